//! The one place where an error becomes a Python exception.
//!
//! The core's error enums name causes (`LayoutError::CoordinateOutOfRange`,
//! `BlockError::NoSpace`, ...) and know nothing of Python. This file decides, per cause,
//! which exception class the specification names, and keeps the message the core's
//! `Display` writes; every other binding module calls these functions instead of picking an
//! exception class for a core error itself. Each `match` is exhaustive, so a new core variant
//! fails to compile here until someone decides its class.
//!
//! The binding's own argument checks (a wrong type passed to a `_native` function, a released
//! storage) raise where they are made: they are not core errors.

use std::io;

use pyo3::exceptions::{
    PyBufferError, PyIndexError, PyMemoryError, PyNotImplementedError, PyOSError, PyOverflowError, PyRuntimeError,
    PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use strideweave_core::dlpack::DescError;
use strideweave_core::kernels::KernelError;
use strideweave_core::layout::LayoutError;
use strideweave_core::model::movement::{MoveRefusal, RefusalKind};
use strideweave_core::model::{ModelError, StateRefusal};
use strideweave_core::storage::block::BlockError;
use strideweave_core::tiles::SpanError;
use strideweave_core::transfer::TransferError;

/// Layout algebra (docs/spec/layout-and-dtype.md §2–§7): a bad key type is a TypeError, a size beyond
/// 64 bits an OverflowError, a top-level mode index out of range an IndexError, and every
/// other refusal (out-of-range coordinates, incongruent trees, bad permutations) a
/// ValueError.
pub fn layout(e: LayoutError) -> PyErr {
    let msg = e.to_string();
    match e {
        LayoutError::BoolCoordinate | LayoutError::KeyComponentType { .. } => PyTypeError::new_err(msg),
        LayoutError::SizeOverflow | LayoutError::CosizeOverflow => PyOverflowError::new_err(msg),
        LayoutError::ModeIndexOutOfRange { .. } => PyIndexError::new_err(msg),
        LayoutError::NonPositiveExtent(_)
        | LayoutError::NegativeStride(_)
        | LayoutError::EmptyNestedMode
        | LayoutError::NotCongruent { .. }
        | LayoutError::OrdinalOutOfRange(_)
        | LayoutError::IntegerKeyOutOfRange { .. }
        | LayoutError::ComponentCountMismatch { .. }
        | LayoutError::CoordinateOutOfRange { .. }
        | LayoutError::SubtreeOrdinalOutOfRange { .. }
        | LayoutError::SequenceForLeaf
        | LayoutError::BroadcastStructureMismatch { .. }
        | LayoutError::BroadcastExtentMismatch { .. }
        | LayoutError::PermutationLength { .. }
        | LayoutError::NotAPermutation { .. }
        | LayoutError::CoordinateBeyond64Bits { .. }
        | LayoutError::KeyComponentUnreadable(_)
        | LayoutError::CompositionStrideNotDivisible { .. }
        | LayoutError::CompositionShapeNotDivisible { .. }
        | LayoutError::ComplementNotInjective { .. }
        | LayoutError::ComplementStrideNotDivisible { .. }
        | LayoutError::NotInjective
        | LayoutError::TilerRankExceedsLayout { .. }
        | LayoutError::ProfileRankExceedsLayout { .. }
        | LayoutError::SublayoutIdOutOfRange { .. }
        | LayoutError::ModePathOutOfRange { .. }
        | LayoutError::EmptyOutputTree => PyValueError::new_err(msg),
        // A refusal the core adds later (the enum is non-exhaustive): a ValueError, as most are.
        _ => PyValueError::new_err(msg),
    }
}

/// A move request's refusal (the core's catalogue, `model::movement::MoveRefusal`) as its
/// Python exception: the text is the core's, the class follows the refusal's kind.
pub fn move_refusal(refusal: MoveRefusal) -> PyErr {
    let msg = refusal.to_string();
    match refusal.kind() {
        RefusalKind::Type => PyTypeError::new_err(msg),
        RefusalKind::Value => PyValueError::new_err(msg),
        RefusalKind::NotImplemented => PyNotImplementedError::new_err(msg),
        // A carrier's state, and any kind a later core adds: the spec's RuntimeError.
        _ => PyRuntimeError::new_err(msg),
    }
}

/// A failure of the core's object model (a move it ran for Python carriers) as its Python
/// exception: a move refusal as `move_refusal` maps it, an I/O failure (of a transfer, or of
/// the source's release) as OSError with a note saying what was being done, a transfer's
/// refused range as ValueError, anything else RuntimeError with the core's text.
pub fn model(py: Python<'_>, e: ModelError) -> PyErr {
    let with_note = |err: &io::Error, context: &str| {
        let e = os(err
            .raw_os_error()
            .map_or_else(|| io::Error::new(err.kind(), err.to_string()), io::Error::from_raw_os_error));
        let _ = e.add_note(py, context.to_string());
        e
    };
    match e {
        ModelError::Move(refusal) => move_refusal(refusal),
        // A Python hook's own exception, raised again as it was raised.
        ModelError::Foreign(foreign) => match foreign.downcast_ref::<PyErr>() {
            Some(raised) => raised.clone_ref(py),
            None => PyRuntimeError::new_err(foreign.to_string()),
        },
        ModelError::Io { context, source } => with_note(&source, context),
        ModelError::Transfer(transfer) => match &*transfer {
            TransferError::Io { context, source } => with_note(source, context),
            TransferError::Range(msg) => PyValueError::new_err(msg.clone()),
            other => PyRuntimeError::new_err(other.to_string()),
        },
        ModelError::Tiles(refusal) if refusal.is_bad_argument() => PyValueError::new_err(refusal.to_string()),
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

/// A carrier state transition's refusal (the core's catalogue, `model::StateRefusal`) as its
/// Python exception: the spec's RuntimeError, with the core's text.
pub fn state_refusal(refusal: StateRefusal) -> PyErr {
    PyRuntimeError::new_err(refusal.to_string())
}

/// A `Shape(...)` or `Stride(...)` constructor refusing a leaf: ValueError, its message
/// prefixed with the class name (`"Shape extent must be >= 1, got 0"`).
pub fn tree_leaf(class: &str, e: LayoutError) -> PyErr {
    PyValueError::new_err(format!("{class} {e}"))
}

/// A compute kernel refusing its operands: ValueError.
pub fn kernel(e: KernelError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// A batched span or block copy: its OS error as [`os`], any refusal a ValueError.
pub fn span(e: SpanError) -> PyErr {
    match e {
        SpanError::Io(err) => os(err),
        SpanError::NoStore { .. }
        | SpanError::OutOfRange { .. }
        | SpanError::Overlap { .. }
        | SpanError::Geometry(_) => PyValueError::new_err(e.to_string()),
        // A refusal the core adds later (the enum is non-exhaustive).
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// A DLPack buffer description that cannot become a managed tensor: BufferError.
pub fn dlpack_desc(e: DescError) -> PyErr {
    PyBufferError::new_err(e.to_string())
}

/// A block-device operation on the device opened at `path` (docs/spec/tensor-and-carriers.md §3.1):
///
/// | cause | Python |
/// | --- | --- |
/// | NUL in path, not a block device, bad geometry, range outside a live extent, unknown extent | `ValueError` |
/// | the open fails | `OSError` with errno, strerror and the path (so `FileNotFoundError` etc.) |
/// | OS error during I/O (device now faulted) | `OSError` with errno |
/// | zero-byte transfer (device now faulted), closed, already faulted | `RuntimeError` |
/// | no room | `MemoryError` |
/// | not Linux | `NotImplementedError` |
pub fn block(e: BlockError, path: &str) -> PyErr {
    let msg = e.to_string();
    match e {
        BlockError::Unsupported => PyNotImplementedError::new_err(msg),
        BlockError::InvalidPath(_)
        | BlockError::NotBlockDevice(_)
        | BlockError::BadGeometry(_)
        | BlockError::OutOfRange { .. }
        | BlockError::UnknownExtent { .. } => PyValueError::new_err(msg),
        // OSError(errno, strerror, filename) picks the errno's subclass (FileNotFoundError,
        // PermissionError, ...) the way the built-in open() does.
        BlockError::Open(io) => match io.raw_os_error() {
            Some(errno) => PyOSError::new_err((errno, msg, path.to_owned())),
            None => PyOSError::new_err(msg),
        },
        BlockError::Io(io) => match io.raw_os_error() {
            Some(errno) => PyOSError::new_err((errno, msg)),
            None => PyOSError::new_err(msg),
        },
        BlockError::ZeroTransfer { .. } | BlockError::Closed | BlockError::Faulted(_) => PyRuntimeError::new_err(msg),
        BlockError::NoSpace { .. } => PyMemoryError::new_err(msg),
        // A cause the core adds later (the enum is non-exhaustive): the device refused.
        _ => PyRuntimeError::new_err(msg),
    }
}

/// OSError(errno, strerror) for OS errors, so Python maps errno to the usual subclass and
/// callers can test `e.errno` (ENOSPC stays errno 28); a plain OSError(message) for the rest
/// (a short file, …).
pub fn os(err: io::Error) -> PyErr {
    if err.kind() == io::ErrorKind::OutOfMemory && err.raw_os_error().is_none() {
        return PyMemoryError::new_err(err.to_string());
    }
    match err.raw_os_error() {
        Some(code) => {
            let text = io::Error::from_raw_os_error(code).to_string();
            let strerror = text.split(" (os error").next().unwrap_or(&text).to_owned();
            PyOSError::new_err((code, strerror))
        }
        None => PyOSError::new_err(err.to_string()),
    }
}

/// A vector of `count` items reserved up front (issue 22.4): an allocation sized by an
/// argument or a file's size must fail with MemoryError, never abort the process. `what`
/// names what the memory is for.
pub fn reserve<T>(count: usize, what: &str) -> PyResult<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(count)
        .map_err(|_| PyMemoryError::new_err(format!("cannot allocate memory for {count} {what}")))?;
    Ok(v)
}

/// `len` zero bytes, or MemoryError when they cannot be had (see [`reserve`]).
pub fn zeroed_bytes(len: usize, what: &str) -> PyResult<Vec<u8>> {
    let mut v = reserve::<u8>(len, what)?;
    v.resize(len, 0);
    Ok(v)
}

/// Why a copy job failed, carried from the worker (no GIL) to the GIL-holding side.
pub enum JobError {
    /// An I/O error, and what the job was doing when it happened.
    Io { err: io::Error, context: String },
    /// A panic in the job (a defect), with its message.
    Panic(String),
    /// The core refused work the entry point had already checked (a defect in that check).
    Unchecked(String),
    /// A move of the core's object model failed (its transfer, or its commit's release).
    Model(ModelError),
}

impl From<TransferError> for JobError {
    fn from(e: TransferError) -> Self {
        match e {
            TransferError::Io { context, source } => JobError::Io { err: source, context },
            TransferError::Range(msg) | TransferError::Unchecked(msg) => JobError::Unchecked(msg),
            other => JobError::Unchecked(other.to_string()),
        }
    }
}

/// A failed copy job: an I/O error as [`os`] with a note saying what was being copied; a
/// panic or an unchecked refusal (both defects) as RuntimeError.
pub fn job(py: Python<'_>, e: JobError) -> PyErr {
    match e {
        JobError::Io { err, context } => {
            let e = os(err);
            // A note keeps OSError's (errno, strerror) shape intact while saying what failed.
            let _ = e.add_note(py, context);
            e
        }
        JobError::Panic(msg) | JobError::Unchecked(msg) => {
            PyRuntimeError::new_err(format!("internal error in engine copy job: {msg}"))
        }
        JobError::Model(e) => model(py, e),
    }
}
