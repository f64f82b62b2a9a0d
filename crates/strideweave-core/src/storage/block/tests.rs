use super::aligned_io::AlignedBuf;
use super::*;
use std::io;
use std::io::{Read, Seek, SeekFrom};

fn temp_path(tag: &str) -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("sw-block-{}-{tag}-{n}", std::process::id()))
}

struct TempFile(std::path::PathBuf);
impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A regular file of `cap` bytes filled with 0xAB (so zeroing is observable), wrapped as
/// a device. `direct` only switches the alignment logic on; the file itself is buffered,
/// so a misaligned direct transfer would not fail here: `Io::direct_read`/`direct_write`
/// assert the alignment in debug builds instead.
fn device(cap: u64, logical: u32, physical: u32, direct: bool) -> (BlockDevice, TempFile) {
    let path = temp_path("dev");
    std::fs::write(&path, vec![0xABu8; cap as usize]).unwrap();
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    let g = Geometry::new(cap, logical, physical).unwrap();
    (BlockDevice::from_file(file, g, direct), TempFile(path))
}

fn file_bytes(t: &TempFile) -> Vec<u8> {
    let mut v = Vec::new();
    let mut f = File::open(&t.0).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_end(&mut v).unwrap();
    v
}

#[test]
fn geometry_validation() {
    assert!(matches!(Geometry::new(0, 512, 512), Err(BlockError::BadGeometry(_))));
    assert!(matches!(Geometry::new(4096, 0, 512), Err(BlockError::BadGeometry(_))));
    assert!(matches!(Geometry::new(4096, 512, 1000), Err(BlockError::BadGeometry(_))));
    assert!(matches!(Geometry::new(4096, 1 << 21, 512), Err(BlockError::BadGeometry(_))));
    assert!(matches!(Geometry::new(4100, 512, 512), Err(BlockError::BadGeometry(_))));
    let g = Geometry::new(4096 * 3 + 512, 512, 4096).unwrap();
    assert_eq!(g.allocation_alignment(), 4096);
    assert_eq!(g.usable_bytes(), 4096 * 3);
}

#[test]
fn allocate_rounds_zeroes_and_first_fits() {
    let (d, t) = device(64 * 1024, 512, 4096, true);
    let a = d.allocate(1, true).unwrap();
    assert_eq!(a, Extent { offset: 0, len: 4096 });
    let b = d.allocate(4097, true).unwrap();
    assert_eq!(b, Extent { offset: 4096, len: 8192 });
    let c = d.allocate(4096, false).unwrap();
    assert_eq!(c, Extent { offset: 12288, len: 4096 });
    let bytes = file_bytes(&t);
    assert!(bytes[..12288].iter().all(|&x| x == 0), "zeroed extents read zero");
    assert!(bytes[12288..16384].iter().all(|&x| x == 0xAB), "zero=false leaves bytes");
    // Freeing the middle extent makes its range the lowest fit again.
    d.free(b).unwrap();
    assert_eq!(d.allocate(100, true).unwrap(), Extent { offset: 4096, len: 4096 });
    // A request larger than the hole skips it.
    assert_eq!(d.allocate(8192, true).unwrap(), Extent { offset: 16384, len: 8192 });
    assert_eq!(d.allocate(4096, true).unwrap(), Extent { offset: 8192, len: 4096 });
    let live = d.live_extents();
    for w in live.windows(2) {
        assert!(w[0].offset + w[0].len <= w[1].offset, "extents overlap: {live:?}");
    }
}

#[test]
fn zero_length_extent_occupies_nothing() {
    let (d, _t) = device(8192, 512, 512, true);
    let z = d.allocate(0, true).unwrap();
    assert_eq!(z.len, 0);
    assert!(d.live_extents().is_empty());
    d.free(z).unwrap();
    assert_eq!(d.allocate(8192, true).unwrap(), Extent { offset: 0, len: 8192 });
}

#[test]
fn no_space_reserves_nothing() {
    let (d, _t) = device(16384 + 512, 512, 4096, true);
    let a = d.allocate(8192, true).unwrap();
    assert!(matches!(d.allocate(8193, true), Err(BlockError::NoSpace { .. })));
    assert!(matches!(d.allocate(u64::MAX, true), Err(BlockError::NoSpace { .. })));
    assert_eq!(d.live_extents(), vec![a]);
    // The trailing partial alignment unit is never handed out.
    assert_eq!(d.allocate(8192, true).unwrap(), Extent { offset: 8192, len: 8192 });
    assert!(matches!(d.allocate(1, true), Err(BlockError::NoSpace { .. })));
}

#[test]
fn free_unknown_and_mismatched() {
    let (d, _t) = device(16384, 512, 512, true);
    let a = d.allocate(1024, true).unwrap();
    assert!(matches!(d.free(Extent { offset: a.offset, len: 512 }), Err(BlockError::UnknownExtent { .. })));
    assert!(matches!(d.free_at(512), Err(BlockError::UnknownExtent { .. })));
    assert_eq!(d.free_at(0).unwrap(), a);
    assert!(matches!(d.free(a), Err(BlockError::UnknownExtent { .. })));
}

#[test]
fn element_and_unaligned_round_trips() {
    for direct in [true, false] {
        let (d, t) = device(1 << 20, 512, 4096, direct);
        let _guard = d.allocate(4096, true).unwrap();
        let e = d.allocate(3 * 4096, true).unwrap();
        for (i, off) in [0u64, 4, 508, 510, 4094, 4096 * 3 - 4].iter().enumerate() {
            d.write_f32(e.offset + off, i as f32 + 0.5).unwrap();
            assert_eq!(d.read_f32(e.offset + off).unwrap(), i as f32 + 0.5);
        }
        // A run crossing block boundaries, starting and ending mid-block.
        let data: Vec<u8> = (0..9000u32).map(|i| (i % 251) as u8).collect();
        d.write(e.offset + 300, &data).unwrap();
        let mut back = vec![0u8; 9000];
        d.read(e.offset + 300, &mut back).unwrap();
        assert_eq!(back, data);
        let bytes = file_bytes(&t);
        let base = e.offset as usize;
        assert_eq!(&bytes[base + 300..base + 9300], &data[..]);
        // Read-modify-write kept the neighbours: the f32 at 0 survives, the guard extent
        // and the bytes after the run are untouched.
        assert_eq!(d.read_f32(e.offset).unwrap(), 0.5);
        assert!(bytes[..4096].iter().all(|&x| x == 0));
        assert_eq!(d.read_f32(e.offset + 4096 * 3 - 4).unwrap(), 5.5);
    }
}

#[test]
fn bulk_round_trip_spans_chunks() {
    let cap = (CHUNK_BYTES * 3) as u64;
    let (d, _t) = device(cap, 512, 512, true);
    let e = d.allocate(cap, false).unwrap();
    let n = CHUNK_BYTES * 2 + 1024;
    // `src` and `back` are block-aligned buffers: at `shift == 0` the aligned pieces go
    // straight from/to the caller's memory, at `shift == 1` everything is bounced.
    let mut src = AlignedBuf::zeroed(n + 512, 4096);
    for (i, x) in src.as_mut_slice().iter_mut().enumerate() {
        *x = (i * 7 % 256) as u8;
    }
    let mut back = AlignedBuf::zeroed(n + 512, 4096);
    // (memory shift, device offset): aligned; misaligned memory (everything bounced and
    // pipelined); both off by one, i.e. congruent (head/tail blocks bounced, the middle
    // chunks direct).
    for (shift, dev_off) in [(0usize, 512u64), (1, 512), (1, 513)] {
        let data = &src.as_mut_slice()[shift..shift + n].to_vec();
        let s = &src.as_mut_slice()[shift..shift + n];
        d.write(e.offset + dev_off, s).unwrap();
        let b = &mut back.as_mut_slice()[shift..shift + n];
        b.fill(0);
        d.read(e.offset + dev_off, b).unwrap();
        assert_eq!(&b[..], &data[..]);
        let mut byte = [0u8; 1];
        d.read(e.offset + dev_off + n as u64, &mut byte).unwrap();
        assert_eq!(byte[0], 0xAB, "the byte after the run is untouched");
    }
}

#[test]
fn access_outside_live_extents_is_refused() {
    let (d, _t) = device(16384, 512, 512, true);
    let e = d.allocate(1024, true).unwrap();
    assert!(matches!(d.read_f32(1022), Err(BlockError::OutOfRange { .. })));
    assert!(matches!(d.write_f32(1024, 1.0), Err(BlockError::OutOfRange { .. })));
    assert!(matches!(d.read_f32(u64::MAX - 1), Err(BlockError::OutOfRange { .. })));
    d.free(e).unwrap();
    assert!(matches!(d.read_f32(0), Err(BlockError::OutOfRange { .. })));
    assert!(!d.is_faulted(), "range errors are caller errors, not device faults");
}

#[test]
fn os_error_faults_device_but_free_and_close_work() {
    let path = temp_path("ro");
    std::fs::write(&path, vec![0u8; 8192]).unwrap();
    let _t = TempFile(path.clone());
    // A read-only descriptor makes every write fail with EBADF: a real OS error.
    let file = File::open(&path).unwrap();
    let d = BlockDevice::from_file(file, Geometry::new(8192, 512, 512).unwrap(), false);
    let e = d.allocate(1024, false).unwrap();
    assert_eq!(d.read_f32(0).unwrap(), 0.0);
    assert!(matches!(d.write_f32(4, 1.0), Err(BlockError::Io(_))));
    assert!(d.is_faulted());
    assert!(d.fault_reason().unwrap().contains("I/O error"));
    assert!(matches!(d.read_f32(0), Err(BlockError::Faulted(_))));
    assert!(matches!(d.allocate(512, false), Err(BlockError::Faulted(_))));
    d.free(e).unwrap();
    d.close();
    d.close();
    assert!(d.is_closed());
}

#[test]
fn zeroing_failure_reserves_nothing_and_faults() {
    let path = temp_path("ro2");
    std::fs::write(&path, vec![0u8; 8192]).unwrap();
    let _t = TempFile(path.clone());
    let file = File::open(&path).unwrap();
    let d = BlockDevice::from_file(file, Geometry::new(8192, 512, 512).unwrap(), true);
    assert!(matches!(d.allocate(512, true), Err(BlockError::Io(_))));
    assert!(d.live_extents().is_empty());
    assert!(d.is_faulted());
}

#[test]
fn zero_byte_read_faults_device() {
    // The geometry claims more bytes than the file has, so a read past the file's end
    // returns 0 bytes, the same thing a shrunken block device does.
    let (d, _t) = device(4096, 512, 512, true);
    let d2 = {
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&_t.0).unwrap();
        BlockDevice::from_file(file, Geometry::new(16384, 512, 512).unwrap(), true)
    };
    drop(d);
    let e = d2.allocate(16384, false).unwrap();
    assert!(matches!(d2.read_f32(e.offset + 8192), Err(BlockError::ZeroTransfer { write: false, .. })));
    assert!(d2.is_faulted());
    assert!(matches!(d2.write_f32(0, 1.0), Err(BlockError::Faulted(_))));
}

#[test]
fn closed_device_refuses_io_and_allocation() {
    let (d, _t) = device(16384, 512, 512, true);
    let e = d.allocate(512, true).unwrap();
    d.close();
    assert!(matches!(d.read_f32(0), Err(BlockError::Closed)));
    assert!(matches!(d.allocate(512, true), Err(BlockError::Closed)));
    assert!(d.raw_fd().is_none());
    d.free(e).unwrap();
}

#[test]
fn open_rejects_nul_and_non_block_paths() {
    assert!(matches!(BlockDevice::open("/dev/lo\0op0"), Err(BlockError::InvalidPath(_))));
    #[cfg(target_os = "linux")]
    {
        let t = TempFile(temp_path("plain"));
        std::fs::write(&t.0, b"x").unwrap();
        let p = t.0.to_str().unwrap();
        assert!(matches!(BlockDevice::open(p), Err(BlockError::NotBlockDevice(_))));
        assert!(matches!(BlockDevice::open("/"), Err(BlockError::NotBlockDevice(_))));
        assert!(matches!(
            BlockDevice::open("/nonexistent/strideweave"),
            Err(BlockError::Open(e)) if e.kind() == io::ErrorKind::NotFound
        ));
    }
}

/// Real loop device: needs root and `losetup`; skipped with a printed reason otherwise.
#[cfg(target_os = "linux")]
#[test]
fn loop_device_round_trip() {
    use std::process::Command;
    let backing = TempFile(temp_path("loop"));
    let f = File::create(&backing.0).unwrap();
    f.set_len(8 << 20).unwrap();
    drop(f);
    let out = Command::new("losetup").args(["--find", "--show", "--direct-io=on"]).arg(&backing.0).output();
    let dev = match out {
        Ok(o) if o.status.success() => String::from_utf8(o.stdout).unwrap().trim().to_owned(),
        Ok(o) => {
            eprintln!("SKIPPED loop_device_round_trip: losetup failed: {}", String::from_utf8_lossy(&o.stderr).trim());
            return;
        }
        Err(e) => {
            eprintln!("SKIPPED loop_device_round_trip: cannot run losetup: {e}");
            return;
        }
    };
    struct Detach(String);
    impl Drop for Detach {
        fn drop(&mut self) {
            let _ = std::process::Command::new("losetup").args(["-d", &self.0]).status();
        }
    }
    let _detach = Detach(dev.clone());
    let d = BlockDevice::open(&dev).unwrap();
    let g = d.geometry();
    assert_eq!(g.capacity_bytes(), 8 << 20);
    assert!(g.logical_block_size() >= 512);
    assert!(d.is_direct(), "loop devices accept O_DIRECT");
    let e = d.allocate(10_000, true).unwrap();
    assert_eq!(e.offset, 0);
    d.write_f32(e.offset + 6, 2.5).unwrap();
    assert_eq!(d.read_f32(e.offset + 6).unwrap(), 2.5);
    assert_eq!(d.read_f32(e.offset + 10).unwrap(), 0.0);
    d.close();
    // The value reached the device, not just a cache: read it back through a fresh open.
    let d = BlockDevice::open(&dev).unwrap();
    let e = d.allocate(10_000, false).unwrap();
    assert_eq!(d.read_f32(e.offset + 6).unwrap(), 2.5);
}
