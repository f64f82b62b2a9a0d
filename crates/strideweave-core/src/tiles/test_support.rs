//! Helpers shared by the span and block tests: stores filled with `u32` values and read back.

use std::path::PathBuf;

use crate::storage::{FileStore, HostBuffer};

/// A fresh file in the temporary directory, named after the process and `tag`.
pub(super) fn temp_file(tag: &str) -> (FileStore, PathBuf) {
    let path = std::env::temp_dir().join(format!("sw-tiles-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    (FileStore::create_new(&path).unwrap(), path)
}

/// A host buffer holding `values`.
pub(super) fn host_with(values: &[u32]) -> HostBuffer {
    let mut b = HostBuffer::new(values.len() * 4, true).unwrap();
    for (k, v) in values.iter().enumerate() {
        b.write_mut(k * 4, &v.to_ne_bytes()).unwrap();
    }
    b
}

/// Every `u32` of a host buffer.
pub(super) fn host_values(b: &HostBuffer) -> Vec<u32> {
    let mut bytes = vec![0u8; b.len()];
    b.read(0, &mut bytes).unwrap();
    values_of(&bytes)
}

/// Every `u32` of a file.
pub(super) fn file_values(f: &FileStore) -> Vec<u32> {
    let mut bytes = vec![0u8; f.len_bytes().unwrap() as usize];
    f.read_at(0, &mut bytes).unwrap();
    values_of(&bytes)
}

fn values_of(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect()
}
