//! `_native.MoveCommit`: the success commit of a built-in move, run by the engine worker that
//! finished its copy, without the GIL.
//!
//! The Python request (`carriers/move.py`) prepares everything at initiation: validation,
//! claims, the destination's growth, the result Tensor, the autograd node (attached to the
//! result before the copy starts: the result is unreachable until the handle completes). What
//! remains after a successful copy is state the native bases hold as fields, so the worker
//! does it directly, in the order of the Python commit:
//!
//! 1. release the source while it is still claimed (drop its storage: free the host buffer,
//!    or unlink the file; then mark it released and drop its claim in one step);
//! 2. drop the destination's claim;
//! 3. complete the progress counter and the handle with the result.
//!
//! No Python code runs, so a thread blocked in `wait()` wakes without any GIL hand-over.
//! The request takes this path only when nothing else must happen at its end: no profiler
//! event to close, no composite owner to consult, and a source of exactly a built-in class
//! whose release is its storage's. A failed copy, or a release that fails (the file cannot
//! be unlinked), goes to the Python commit instead (`then(exc)`), which restores everything.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::carrier_base::{CarrierBase, Slot};
use crate::engine::AwaitResult;
use crate::storage::{FileStorage, HostStorage};
use crate::transfer::TransferProgress;

/// The storage a source releases.
enum SourceStorage {
    Host(Py<HostStorage>),
    File(Py<FileStorage>),
}

/// The carriers a commit releases and unclaims: the Python request's. A move of the core's
/// request (`async_move.rs`) has committed them itself before this runs, and has none.
struct Carriers {
    source: Py<CarrierBase>,
    source_storage: SourceStorage,
    destination: Py<CarrierBase>,
}

/// What a worker needs to commit one successful built-in move without the GIL.
#[pyclass(frozen, module = "strideweave._native")]
pub struct MoveCommit {
    carriers: Option<Carriers>,
    handle: Py<AwaitResult>,
    progress: Option<Py<TransferProgress>>,
    /// The result Tensor; taken (moved into the handle) by the commit, so no reference is
    /// cloned without the GIL.
    output: Slot,
}

#[pymethods]
impl MoveCommit {
    /// `MoveCommit(source, destination, handle, output, progress=None)`: `source` a built-in
    /// carrier holding a `HostStorage` or `FileStorage`, `destination` any carrier.
    #[new]
    #[pyo3(signature = (source, destination, handle, output, progress=None))]
    pub(crate) fn new(
        source: &Bound<'_, CarrierBase>,
        destination: Py<CarrierBase>,
        handle: Py<AwaitResult>,
        output: Py<PyAny>,
        progress: Option<Py<TransferProgress>>,
    ) -> PyResult<Self> {
        let py = source.py();
        let storage =
            source.get().storage.get(py).ok_or_else(|| PyTypeError::new_err("source has no native storage"))?;
        let storage = storage.into_bound(py);
        let source_storage = if let Ok(host) = storage.cast::<HostStorage>() {
            SourceStorage::Host(host.clone().unbind())
        } else if let Ok(file) = storage.cast::<FileStorage>() {
            SourceStorage::File(file.clone().unbind())
        } else {
            return Err(PyTypeError::new_err("source storage must be a HostStorage or FileStorage"));
        };
        let slot = Slot::default();
        drop(slot.put(Some(output)));
        let carriers = Carriers { source: source.clone().unbind(), source_storage, destination };
        Ok(MoveCommit { carriers: Some(carriers), handle, progress, output: slot })
    }
}

impl MoveCommit {
    /// The publication of a move the core's request has committed (released its source, ended
    /// its claims) on the worker: the progress completes and the handle resolves with `output`.
    pub(crate) fn publish(handle: Py<AwaitResult>, output: Py<PyAny>, progress: Option<Py<TransferProgress>>) -> Self {
        let slot = Slot::default();
        drop(slot.put(Some(output)));
        MoveCommit { carriers: None, handle, progress, output: slot }
    }

    /// The commit after a successful copy, without the GIL (see the module docs). `Err` with
    /// the release's failure, nothing else changed, when the Python commit must run.
    pub(crate) fn finish(&self) -> std::io::Result<()> {
        if let Some(carriers) = &self.carriers {
            match &carriers.source_storage {
                SourceStorage::Host(host) => host.get().release_buffer(),
                SourceStorage::File(file) => file.get().release_store()?,
            }
            let (source, destination) = (carriers.source.get(), carriers.destination.get());
            // Released and unclaimed in one transition of the state cell: no move can take the
            // source in between. Dropping the claim objects without the GIL only defers their
            // decref to PyO3's pool.
            let (_, held) = source.state().cell().release_claimed();
            drop(held);
            drop(destination.state().cell().replace_claim(None));
        }
        if let Some(progress) = &self.progress {
            progress.get().complete();
        }
        if let Some(output) = self.output.put(None) {
            self.handle.get().succeed(output);
        }
        Ok(())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<MoveCommit>()?;
    Ok(())
}
