//! `_native.TileBook`: the core's book of a tiled two-tier composite
//! (`model::tile_book::TileBook`, the Rust `TiledEvictable`'s own) for the Python
//! `TiledEvictable`. The core keeps where each tile is, the pins of requests and projections,
//! the tiles a commit retires while a projection reads them, the clean copies, and the
//! residency policy's budget and least-recently-used order; its refusals are the core's,
//! raised with their Python classes at `error::model`. What is done *to* a tile (a fresh one,
//! the copy into it, its adoption and release) stays with the package
//! (`carriers/tiled_residency.py`), which hands the book its tiles and takes back the ones
//! to release.
//!
//! Lock order: the book's lock, then the GIL. Every call takes the book's lock with the GIL
//! released, so no thread ever holds the GIL while it waits for the book. A read or write
//! runs the package's tile code outside the book's lock, as a reader or writer of the tile,
//! with the GIL taken again.

use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use strideweave_core::model::tile_book::{
    ReadPin as CorePin, TileBook as CoreBook, TileBudget, TileRequest as CoreRequest,
};
use strideweave_core::model::{ForeignError, ModelError, Tier};

use crate::error;
use crate::storage::HostStorage;
use crate::tiles::free_tile_buffers;

/// A Python tile (a carrier or a bare storage), shared by the book and what it hands out.
type PyTile = Arc<Py<PyAny>>;

/// A Python error as the core's error, raised again unchanged at the edge (`error::model`).
fn foreign(err: PyErr) -> ModelError {
    ModelError::Foreign(ForeignError::new(err))
}

fn tier(on_primary: bool) -> Tier {
    if on_primary {
        Tier::Primary
    } else {
        Tier::Secondary
    }
}

/// Tiles the book handed back, as Python objects: a tile nothing else shares is moved out of
/// its `Arc` (no reference taken and dropped per tile; a release hands back thousands).
fn tiles_out(py: Python<'_>, tiles: Vec<PyTile>) -> Vec<Py<PyAny>> {
    tiles.into_iter().map(|t| Arc::try_unwrap(t).unwrap_or_else(|shared| shared.clone_ref(py))).collect()
}

/// `release(tiles)` with the tiles a read or write handed back, if any.
fn hand_back(py: Python<'_>, release: &Py<PyAny>, tiles: Vec<PyTile>) -> PyResult<()> {
    if !tiles.is_empty() {
        release.bind(py).call1((tiles_out(py, tiles),))?;
    }
    Ok(())
}

fn tiles_in(tiles: Vec<Py<PyAny>>) -> Vec<PyTile> {
    tiles.into_iter().map(Arc::new).collect()
}

/// A residency request the book admitted: its tiles stay pinned until `TileBook.finish`.
#[pyclass(frozen, module = "strideweave._native", name = "TileRequest")]
pub struct TileRequest {
    inner: Mutex<Option<CoreRequest<PyTile>>>,
}

#[pymethods]
impl TileRequest {
    /// How many phases (tier changes) the request has: the policy's evictions, then its own.
    #[getter]
    fn phase_count(&self) -> usize {
        self.inner.lock().as_ref().map_or(0, |r| r.phases().len())
    }

    /// Phase `k`: `(evicts, the current tiles it copies)`, in the order `TileBook.commit`
    /// takes their fresh tiles; the copy reads them in place (they are pinned).
    fn phase(&self, py: Python<'_>, k: usize) -> PyResult<(bool, Vec<Py<PyAny>>)> {
        let inner = self.inner.lock();
        let request = inner.as_ref().ok_or_else(|| PyRuntimeError::new_err("the tile request is finished"))?;
        let phase = request.phases().get(k).ok_or_else(|| PyRuntimeError::new_err(format!("no phase {k}")))?;
        let sources = phase.copying().map(|s| s.source().clone_ref(py)).collect();
        Ok((phase.evicts(), sources))
    }
}

/// Tiles pinned for reading: a projection's, or every tile for a move out.
#[pyclass(frozen, module = "strideweave._native", name = "TilePin")]
pub struct TilePin {
    inner: Mutex<Option<CorePin<PyTile>>>,
}

#[pymethods]
impl TilePin {
    /// The pinned tiles, in the order asked for.
    #[getter]
    fn tiles(&self, py: Python<'_>) -> Vec<Py<PyAny>> {
        self.inner.lock().as_ref().map_or_else(Vec::new, |pin| pin.tiles().iter().map(|t| t.clone_ref(py)).collect())
    }
}

/// The book of a Python `TiledEvictable` (see the module docs).
#[pyclass(frozen, module = "strideweave._native", name = "TileBook")]
pub struct TileBook {
    book: CoreBook<PyTile>,
}

#[pymethods]
impl TileBook {
    /// A book of `tiles` (tile-index order, first grid axis fastest) in a grid of
    /// `grid_shape`, all on the primary tier or all on the secondary; with `budget_bytes`, a
    /// residency policy of that many bytes for tiles of `tile_bytes`.
    #[new]
    #[pyo3(signature = (grid_shape, tiles, on_primary, retain_clean, budget_bytes, tile_bytes))]
    fn new(
        py: Python<'_>,
        grid_shape: Vec<usize>,
        tiles: Vec<Py<PyAny>>,
        on_primary: bool,
        retain_clean: bool,
        budget_bytes: Option<usize>,
        tile_bytes: usize,
    ) -> PyResult<Self> {
        let budget =
            budget_bytes.map(|b| TileBudget::new(b, tile_bytes)).transpose().map_err(|e| error::model(py, e))?;
        Ok(TileBook { book: CoreBook::new(grid_shape, tiles_in(tiles), tier(on_primary), retain_clean, budget) })
    }

    /// How many tiles the residency policy's budget holds (0 without a policy).
    #[getter]
    fn budget_tiles(&self) -> usize {
        self.book.budget().map_or(0, |b| b.tiles())
    }

    /// Whether the book has been released.
    fn is_released(&self) -> bool {
        self.book.is_released()
    }

    /// Whether a residency request or projection is pending.
    fn is_pending(&self) -> bool {
        self.book.is_pending()
    }

    /// `(on primary, pinned, clean)` of tile `index`; None once released.
    fn state(&self, py: Python<'_>, index: usize) -> PyResult<Option<(bool, bool, bool)>> {
        let state = py.detach(|| self.book.state(index)).map_err(|e| error::model(py, e.into()))?;
        Ok(state.map(|s| (s.tier == Tier::Primary, s.pinned, s.clean)))
    }

    /// The indices of the tiles on the primary tier (or the secondary), ascending.
    fn tiles_on(&self, py: Python<'_>, on_primary: bool) -> PyResult<Vec<usize>> {
        py.detach(|| self.book.tiles_on(tier(on_primary))).map_err(|e| error::model(py, e.into()))
    }

    /// `reader(tile, slot)` on tile `index`, as a reader of the tile (outside the book's
    /// lock: a commit or release that replaces the tile meanwhile keeps it until the read
    /// ends); then `release(tiles)` with the tiles this read was the last reader of, if any,
    /// whether the read succeeded or raised.
    fn read(
        &self,
        py: Python<'_>,
        index: usize,
        reader: Py<PyAny>,
        slot: usize,
        release: Py<PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let (value, ended) = py.detach(|| {
            self.book.read(index, |tile| {
                Python::attach(|py| reader.bind(py).call1((tile.bind(py), slot)).map(Bound::unbind).map_err(foreign))
            })
        });
        hand_back(py, &release, ended)?;
        value.map_err(|e| error::model(py, e))
    }

    /// `writer(tile, slot, value)` on tile `index`, as a writer of the tile (outside the
    /// book's lock; what would read or replace the tile waits for it), refused while the tile
    /// is pinned; then `release(tiles)` with the tiles to release (its clean copy, stale now),
    /// if any.
    fn write(
        &self,
        py: Python<'_>,
        index: usize,
        writer: Py<PyAny>,
        slot: usize,
        value: Py<PyAny>,
        release: Py<PyAny>,
    ) -> PyResult<()> {
        let ((), ended) = py
            .detach(|| {
                self.book.write(index, |tile| {
                    Python::attach(|py| {
                        writer.bind(py).call1((tile.bind(py), slot, value.bind(py))).map(drop).map_err(foreign)
                    })
                })
            })
            .map_err(|e| error::model(py, e))?;
        hand_back(py, &release, ended)?;
        Ok(())
    }

    /// `inspect(tiles)` under the book's lock, with `tiles` a list of `(tile, on primary,
    /// writes so far)` in tile-index order: one consistent view (refused with `action`'s words
    /// once released).
    fn inspect(&self, py: Python<'_>, action: &str, inspect: Py<PyAny>) -> PyResult<Py<PyAny>> {
        let action = static_action(action);
        py.detach(|| {
            self.book.inspect(action, |tiles| {
                Python::attach(|py| {
                    let listed: Vec<(Py<PyAny>, bool, u64)> =
                        tiles.iter().map(|(t, on, writes)| (t.clone_ref(py), *on == Tier::Primary, *writes)).collect();
                    inspect.bind(py).call1((listed,)).map(Bound::unbind).map_err(foreign)
                })
            })
        })
        .map_err(|e| error::model(py, e))
    }

    /// Admit a request moving `indices` to the secondary tier (`evict`) or the primary, its
    /// tiles pinned; None when none of them moves. Under a policy a promote makes room first,
    /// never evicting a tile of `protect`. Refusals raise before any effect.
    fn request(
        &self,
        py: Python<'_>,
        indices: Vec<usize>,
        evict: bool,
        protect: Vec<usize>,
    ) -> PyResult<Option<TileRequest>> {
        let admitted =
            py.detach(|| self.book.request(&indices, evict, &protect)).map_err(|e| error::model(py, e.into()))?;
        Ok(admitted.map(|r| TileRequest { inner: Mutex::new(Some(r)) }))
    }

    /// Commit phase `k` of `request`: its copied tiles take `staged` (one each, in order),
    /// its clean evictions their kept copies. Returns the tiles to release.
    fn commit(
        &self,
        py: Python<'_>,
        request: &TileRequest,
        k: usize,
        staged: Vec<Py<PyAny>>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let staged = tiles_in(staged);
        let replaced = py.detach(|| {
            let inner = request.inner.lock();
            let request = inner.as_ref().ok_or("the tile request is finished")?;
            let phase = request.phases().get(k).ok_or("no such phase")?;
            if phase.copy_count() != staged.len() {
                return Err("one staged tile is needed for each copied tile");
            }
            Ok(self.book.commit(phase, staged))
        });
        replaced.map(|tiles| tiles_out(py, tiles)).map_err(PyRuntimeError::new_err)
    }

    /// The end of `request`, committed or not: its tiles unpinned. A second call does
    /// nothing.
    fn finish(&self, py: Python<'_>, request: &TileRequest) {
        if let Some(mut request) = request.inner.lock().take() {
            // Dropped here, with the GIL, as `unpin` drops a pin's tiles: after a commit the
            // request holds the last reference to every tile the commit replaced.
            let held = request.take_phases();
            py.detach(|| self.book.finish(request));
            drop(held);
        }
    }

    /// Pin `indices` for a projection reading them in place.
    fn pin_reading(&self, py: Python<'_>, indices: Vec<usize>) -> PyResult<TilePin> {
        let pin = py.detach(|| self.book.pin_reading(&indices)).map_err(|e| error::model(py, e.into()))?;
        Ok(TilePin { inner: Mutex::new(Some(pin)) })
    }

    /// Pin every tile for a move out: refused while a request or projection is pending.
    fn pin_all(&self, py: Python<'_>) -> PyResult<TilePin> {
        let pin = py.detach(|| self.book.pin_all()).map_err(|e| error::model(py, e.into()))?;
        Ok(TilePin { inner: Mutex::new(Some(pin)) })
    }

    /// Take back `pin`; returns the tiles retired while it read them, to release. A second
    /// call does nothing.
    fn unpin(&self, py: Python<'_>, pin: &TilePin) -> Vec<Py<PyAny>> {
        let Some(mut pin) = pin.inner.lock().take() else { return Vec::new() };
        // Dropped here, with the GIL: dropped in the book without it, every tile's reference
        // would wait in PyO3's pool of deferred decrements (a move out pins thousands).
        let held = pin.take_tiles();
        let retired = py.detach(|| self.book.unpin(pin));
        drop(held);
        tiles_out(py, retired)
    }

    /// Release the book, freeing its tiles and clean copies that are bare host storages here,
    /// in the same pass (as `release_storages` frees them): returns only the others (file
    /// regions, carriers), to release. A composite of thousands of host tiles hands no list of
    /// them to Python and back. Refused while a request or projection is pending, before any
    /// effect; nothing after that can fail.
    fn release_hosts(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let Some(tiles) = py.detach(|| self.book.release()).map_err(|e| error::model(py, e.into()))? else {
            return Ok(Vec::new());
        };
        let mut buffers = Vec::with_capacity(tiles.len());
        let mut rest = Vec::new();
        for tile in tiles {
            match tile.bind(py).cast::<HostStorage>() {
                Ok(host) => buffers.extend(host.get().take_buffer()),
                Err(_) => rest.push(tile),
            }
        }
        free_tile_buffers(buffers);
        Ok(tiles_out(py, rest))
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.book)
    }
}

/// The words of an `inspect` refusal, as the core's static text.
fn static_action(action: &str) -> &'static str {
    match action {
        "pickle" => "pickle",
        _ => "inspect",
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<TileBook>()?;
    m.add_class::<TileRequest>()?;
    m.add_class::<TilePin>()?;
    Ok(())
}
