//! Build a CPU tensor, move it to a file carrier and back asynchronously, export it as a
//! DLPack managed tensor, and check the values — with the core crate alone.
//!
//! `cargo run -p strideweave-core --example roundtrip`

use std::sync::Arc;

use strideweave_core::layout::{Layout, Shape, Stride};
use strideweave_core::model::{move_async, Carrier, CarrierExt, FileCarrier, HostCarrier, ModelError, Tensor};
use strideweave_core::storage::ElemKind;

/// The round trip; returns the values read through the DLPack export, in ordinal order.
pub fn run() -> Result<Vec<f32>, ModelError> {
    // A 2 x 3 tensor in column-major order over six host slots: element (i, j) is slot i + 2j.
    let host = HostCarrier::from_f32(&[0.5, 1.5, 2.5, 3.5, 4.5, 5.5]);
    let layout = Layout::new(Shape::flat(&[2, 3])?, Stride::flat(&[1, 2])?)?;
    let tensor = Tensor::new(host.clone(), 0, layout)?;

    // To a file: the empty file carrier grows to the layout's cosize; the host carrier is
    // released once the move commits.
    let file: Arc<dyn Carrier> = FileCarrier::temp(ElemKind::F32)?;
    let on_file = move_async(&tensor, &file)?.wait()?;
    assert!(host.is_released());

    // And back, into fresh host memory.
    let back: Arc<dyn Carrier> = HostCarrier::zeros(ElemKind::F32, 6)?;
    let handle = move_async(&on_file, &back)?;
    let restored = handle.wait()?;
    assert!(file.is_released());

    // Export zero-copy and read the values through the DLPack descriptor.
    let managed = restored.to_dlpack()?;
    let dl = managed.dl_tensor();
    let ndim = dl.ndim as usize;
    // SAFETY: the export owns `ndim` shape and stride entries and keeps the host memory
    // alive until `managed` drops; every addressed element lies inside that memory.
    let values = unsafe {
        let shape = std::slice::from_raw_parts(dl.shape, ndim);
        let strides = std::slice::from_raw_parts(dl.strides, ndim);
        let base = (dl.data as *const u8).add(dl.byte_offset as usize).cast::<f32>();
        let mut out = Vec::new();
        for j in 0..shape[1] {
            for i in 0..shape[0] {
                out.push(*base.offset((i * strides[0] + j * strides[1]) as isize));
            }
        }
        out
    };
    assert_eq!(values, restored.values_f32()?);
    Ok(values)
}

#[allow(dead_code)] // the cargo test includes this file for `run` only
fn main() -> Result<(), ModelError> {
    let values = run()?;
    assert_eq!(values, vec![0.5, 1.5, 2.5, 3.5, 4.5, 5.5]);
    println!("round trip host -> file -> host -> DLPack: {values:?}");
    Ok(())
}
