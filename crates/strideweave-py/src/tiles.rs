//! Batched span copies between built-in storages, on `strideweave._native`: the data path of
//! TiledEvictable's residency requests, projections and its "tiled.to_cpu" route.
//!
//! `copy_spans(spans)` / `submit_copy_spans(spans, then)` take `(src, src_slot, dst, dst_slot,
//! count)` tuples whose ends are `HostStorage`, `FileStorage` or `FileRegion` objects, never
//! addresses. A `FileRegion`'s slots are checked against the region and then addressed in its
//! slab's file, so every region of one slab is one store of the request and spans over
//! neighbouring regions merge into one positioned read or write.
//! `copy_blocks` / `submit_copy_blocks` take `(src, src_slot, dst, dst_slot)` blocks of one
//! shared geometry (a dense block of `block_shape` inside a dense `src_shape` array, placed
//! into a dense `dst_shape` array), which Rust copies row by row: a projection of
//! thousands of tiles is one Python call, not a tuple per row.
//!
//! `copy_storages(sources, destinations, count)` copies whole tiles pairwise and
//! `submit_place_blocks(sources, destination, offsets, ...)` places whole tiles into one dense
//! array (neither builds a tuple per tile), and `release_storages(storages)` releases a request's replaced bare tiles in one
//! call.
//!
//! Every storage is resolved to its live buffer or file and held by `Arc` for the whole
//! request (a concurrent release only drops the carrier's reference), all storages must
//! share one element kind, and every span is checked against its storage's size before the
//! request is queued: a bad request raises here and writes nothing. The submitted form runs
//! the whole request as ONE engine job with the GIL released and then calls `then(None)` or
//! `then(exc)` with the GIL held; the blocking form runs it on the calling thread with the
//! GIL released. Either way, a placement whose tiles sit on the block lattice (disjoint, so
//! safe to copy at once) into 16 MiB or more of host memory runs in parts over idle copy
//! threads, as a large span does (`transfer.rs`).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use strideweave_core::copy;
use strideweave_core::engine;
use strideweave_core::storage::{ElemKind, FileStore, HostBuffer};
use strideweave_core::tiles::{self, Block, BlockGeometry, Span, SpanError, Store};

use crate::error::{self, JobError};
use crate::file_slab::{release_regions, FileRegion};
use crate::jobs::{run_blocking, submit_job};
use crate::storage::{FileStorage, HostStorage, DEFERRED_FREE_BYTES};

/// A storage's bytes, kept alive for the request.
enum Held {
    Host(Arc<HostBuffer>),
    File(Arc<FileStore>),
}

/// What a request copies.
enum Work {
    Spans(Vec<Span>),
    Blocks(BlockGeometry, Vec<Block>),
}

/// A checked request: its storages (each once) and the spans or blocks over them.
struct Request {
    held: Vec<Held>,
    elem: usize,
    work: Work,
    /// The blocks write pairwise disjoint slots of host memory (a placement on the block
    /// lattice, `tiles::placed_on_lattice`), so parts of them may run at the same time.
    disjoint: bool,
}

/// A disjoint placement of at least two of these runs in parts over idle copy threads
/// (`engine::run_pieces`), each part large enough to stream its stores as the whole would.
const SPLIT_PART_BYTES: u64 = copy::STREAM_THRESHOLD as u64;

impl Request {
    fn stores(&self) -> Vec<Store<'_>> {
        self.held
            .iter()
            .map(|h| match h {
                Held::Host(b) => Store::Host(b),
                Held::File(f) => Store::File(f),
            })
            .collect()
    }

    fn check(&self) -> PyResult<()> {
        let stores = self.stores();
        match &self.work {
            Work::Spans(spans) => tiles::check_spans(&stores, self.elem, spans),
            Work::Blocks(geo, blocks) => tiles::check_blocks(&stores, self.elem, geo, blocks),
        }
        .map_err(error::span)
    }

    /// How many spans or blocks, for error notes.
    fn len(&self) -> usize {
        match &self.work {
            Work::Spans(spans) => spans.len(),
            Work::Blocks(_, blocks) => blocks.len(),
        }
    }

    /// How many parts a disjoint placement into host memory runs in (1: the whole at once).
    fn parts(&self) -> usize {
        let Work::Blocks(geo, blocks) = &self.work else { return 1 };
        // Host destinations only (a file's writes serialise on its inode lock anyway), and no
        // source that is the destination itself: one part could read what another writes.
        let apart = blocks.iter().all(|b| matches!(self.held[b.dst], Held::Host(_)) && b.src != b.dst);
        if !self.disjoint || !apart {
            return 1;
        }
        let bytes = geo.block_slots() * self.elem as u64 * blocks.len() as u64;
        ((bytes / SPLIT_PART_BYTES) as usize).clamp(1, blocks.len())
    }

    /// Runs every span or block, a disjoint placement in parts over idle copy threads; an
    /// I/O error says how large the request was.
    fn run(self) -> Result<(), JobError> {
        let parts = self.parts();
        if parts == 1 {
            return self.run_part(0, 1);
        }
        let request = Arc::new(self);
        engine::run_pieces(parts, move |k| request.run_part(k, parts))
    }

    /// Runs part `k` of `parts`: the `k`-th run of consecutive blocks (`parts` > 1 only for a
    /// disjoint placement), or the whole request.
    fn run_part(&self, k: usize, parts: usize) -> Result<(), JobError> {
        let stores = self.stores();
        // SAFETY: `check` passed for these stores before the request was run; `held` keeps
        // every buffer and file alive; the carrier layer pins the tiles and claims the
        // destination it names, so no other thread writes these ranges meanwhile. Parts of
        // one request that run at once write disjoint slots (`parts` is 1 unless
        // `placed_on_lattice` held) and only read their sources.
        let done = match &self.work {
            // SAFETY: as above.
            Work::Spans(spans) => unsafe { tiles::run_spans(&stores, self.elem, spans) },
            Work::Blocks(geo, blocks) => {
                let part = &blocks[k * blocks.len() / parts..(k + 1) * blocks.len() / parts];
                // SAFETY: as above.
                unsafe { tiles::run_blocks(&stores, self.elem, geo, part) }
            }
        };
        done.map_err(|err| JobError::Io {
            err,
            context: format!("while copying a request of {} spans or blocks between storages", self.len()),
        })
    }
}

/// Where one end of a span or block lives: the request's store `index`, from slot `base` of
/// it, and for a region at most `limit` slots (a whole storage is limited by its size, which
/// the core checks).
#[derive(Clone, Copy)]
struct End {
    index: usize,
    base: u64,
    limit: Option<u64>,
}

impl End {
    /// The store slot of `[off, off + count)` of this end, checked against a region's limit.
    fn place(&self, item: &'static str, k: usize, side: &'static str, off: u64, count: u64) -> PyResult<u64> {
        if let Some(limit) = self.limit {
            match off.checked_add(count) {
                Some(end) if end <= limit => {}
                end => {
                    let end = end.unwrap_or(u64::MAX);
                    return Err(error::span(SpanError::OutOfRange { item, index: k, side, end, slots: limit }));
                }
            }
        }
        Ok(self.base + off)
    }
}

/// Hashes the address of a live buffer or file, the interner's key: distinct live objects, so
/// a multiplicative mix spreads them well enough, at a fraction of SipHash's cost per tile.
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        // Fold the product's high bits down: addresses share their low (alignment) bits, and
        // the table picks buckets by the low bits of the hash.
        self.0 ^ (self.0 >> 29)
    }
}

/// Collects each distinct storage once (by the identity of its live buffer or file: every
/// region of one slab is the slab's one file).
#[derive(Default)]
struct Interner {
    held: Vec<Held>,
    index: HashMap<usize, usize, BuildHasherDefault<AddressHasher>>,
    kind: Option<ElemKind>,
}

impl Interner {
    fn intern(&mut self, obj: &Bound<'_, PyAny>, what: Name<'_>) -> PyResult<End> {
        self.intern_as(obj, what, true)
    }

    /// `intern` for a storage only ever read (the sources of a placement): it is looked up
    /// only against storages interned before with `intern` (the destination), so an alias of
    /// the destination is still caught by the request's overlap check, while the thousands of
    /// tiles of a placement are not hashed. A storage read twice is simply held twice.
    fn intern_read_only(&mut self, obj: &Bound<'_, PyAny>, what: Name<'_>) -> PyResult<End> {
        self.intern_as(obj, what, false)
    }

    fn intern_as(&mut self, obj: &Bound<'_, PyAny>, what: Name<'_>, indexed: bool) -> PyResult<End> {
        let released = || PyRuntimeError::new_err(format!("{what} storage is released"));
        let (mut base, mut limit) = (0, None);
        let (key, kind, held) = if let Ok(h) = obj.cast::<HostStorage>() {
            let buf = h.get().buffer().ok_or_else(released)?;
            (Arc::as_ptr(&buf) as usize, h.get().kind(), Held::Host(buf))
        } else if let Ok(f) = obj.cast::<FileStorage>() {
            let store = f.get().store().ok_or_else(released)?;
            (Arc::as_ptr(&store) as usize, f.get().kind(), Held::File(store))
        } else if let Ok(r) = obj.cast::<FileRegion>() {
            let (store, first, slots) = r.get().region().ok_or_else(released)?;
            (base, limit) = (first, Some(slots));
            (Arc::as_ptr(&store) as usize, r.get().kind(), Held::File(store))
        } else {
            return Err(PyTypeError::new_err(format!(
                "{what} must be a HostStorage, FileStorage or FileRegion, not {}",
                obj.get_type().name()?
            )));
        };
        match self.kind {
            None => self.kind = Some(kind),
            Some(k) if k != kind => {
                return Err(PyTypeError::new_err(format!(
                    "{what} holds {} slots, the request's other storages hold {}",
                    kind.name(),
                    k.name()
                )))
            }
            Some(_) => {}
        }
        let index = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                self.held.push(held);
                if indexed {
                    self.index.insert(key, self.held.len() - 1);
                }
                self.held.len() - 1
            }
        };
        Ok(End { index, base, limit })
    }

    fn finish(self, work: Work) -> PyResult<Request> {
        self.finish_with(work, false)
    }

    /// `finish`, for blocks the caller has found to write disjoint slots (`disjoint`).
    fn finish_with(self, work: Work, disjoint: bool) -> PyResult<Request> {
        let elem = self.kind.map_or(1, ElemKind::size);
        let request = Request { held: self.held, elem, work, disjoint };
        request.check()?;
        Ok(request)
    }
}

/// What an argument is called in an error (`spans[3] src_slot`), formatted only on error:
/// a request of thousands of items must not build a string per item.
#[derive(Clone, Copy)]
struct Name<'a> {
    list: &'a str,
    index: Option<usize>,
    part: &'a str,
}

impl std::fmt::Display for Name<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.list)?;
        if let Some(index) = self.index {
            write!(f, "[{index}]")?;
        }
        if !self.part.is_empty() {
            write!(f, " {}", self.part)?;
        }
        Ok(())
    }
}

/// `list[index] part`, e.g. `spans[3] source`; `part` may be empty.
fn name<'a>(list: &'a str, index: usize, part: &'a str) -> Name<'a> {
    Name { list, index: Some(index), part }
}

fn slot(value: i64, what: impl std::fmt::Display) -> PyResult<u64> {
    u64::try_from(value).map_err(|_| PyValueError::new_err(format!("{what} must be non-negative, got {value}")))
}

fn parse_spans(spans: &Bound<'_, PyAny>) -> PyResult<Request> {
    let mut interner = Interner::default();
    let mut out = Vec::new();
    for (k, item) in spans.try_iter()?.enumerate() {
        let item = item?;
        let (src, src_off, dst, dst_off, count): (Bound<'_, PyAny>, i64, Bound<'_, PyAny>, i64, i64) =
            item.extract().map_err(|_| {
                PyTypeError::new_err(format!("spans[{k}] must be a (src, src_slot, dst, dst_slot, count) tuple"))
            })?;
        let from = interner.intern(&src, name("spans", k, "source"))?;
        let src_off = slot(src_off, name("spans", k, "src_slot"))?;
        let to = interner.intern(&dst, name("spans", k, "destination"))?;
        let dst_off = slot(dst_off, name("spans", k, "dst_slot"))?;
        let count = slot(count, name("spans", k, "count"))?;
        out.push(Span {
            src: from.index,
            src_off: from.place("span", k, "source", src_off, count)?,
            dst: to.index,
            dst_off: to.place("span", k, "destination", dst_off, count)?,
            count,
        });
    }
    interner.finish(Work::Spans(out))
}

fn shape(values: &[i64], what: &str) -> PyResult<Vec<u64>> {
    values.iter().enumerate().map(|(a, &v)| slot(v, name(what, a, ""))).collect()
}

fn parse_blocks(
    blocks: &Bound<'_, PyAny>,
    block_shape: &[i64],
    src_shape: &[i64],
    dst_shape: &[i64],
) -> PyResult<Request> {
    let geo = BlockGeometry::new(
        &shape(block_shape, "block_shape")?,
        &shape(src_shape, "src_shape")?,
        &shape(dst_shape, "dst_shape")?,
    )
    .map_err(error::span)?;
    let mut interner = Interner::default();
    let mut parsed = Vec::new();
    for (k, item) in blocks.try_iter()?.enumerate() {
        let item = item?;
        let (src, src_off, dst, dst_off): (Bound<'_, PyAny>, i64, Bound<'_, PyAny>, i64) = item
            .extract()
            .map_err(|_| PyTypeError::new_err(format!("blocks[{k}] must be a (src, src_slot, dst, dst_slot) tuple")))?;
        let from = interner.intern(&src, name("blocks", k, "source"))?;
        let src_off = slot(src_off, name("blocks", k, "src_slot"))?;
        let to = interner.intern(&dst, name("blocks", k, "destination"))?;
        let dst_off = slot(dst_off, name("blocks", k, "dst_slot"))?;
        parsed.push(Block {
            src: from.index,
            src_off: from.place("block", k, "source", src_off, geo.src_reach())?,
            dst: to.index,
            dst_off: to.place("block", k, "destination", dst_off, geo.dst_reach())?,
        });
    }
    interner.finish(Work::Blocks(geo, parsed))
}

/// Dense blocks placed into one array: `sources[k]` (each a whole `block_shape` block) into
/// `destination` (a dense `dst_shape` array) at slot `offsets[k]`.
fn parse_placement(
    sources: &Bound<'_, PyAny>,
    destination: &Bound<'_, PyAny>,
    offsets: Vec<i64>,
    block_shape: &[i64],
    dst_shape: &[i64],
) -> PyResult<Request> {
    let block = shape(block_shape, "block_shape")?;
    let dst_shape = shape(dst_shape, "dst_shape")?;
    let geo = BlockGeometry::new(&block, &block, &dst_shape).map_err(error::span)?;
    let mut interner = Interner::default();
    let into = interner.intern(destination, Name { list: "destination", index: None, part: "" })?;
    let mut parsed = Vec::with_capacity(offsets.len());
    let mut placed_at = Vec::with_capacity(offsets.len());
    let mut at = offsets.into_iter();
    for (k, src) in sources.try_iter()?.enumerate() {
        let off =
            at.next().ok_or_else(|| PyValueError::new_err(format!("offsets has fewer items than sources ({k})")))?;
        let from = interner.intern_read_only(&src?, name("sources", k, ""))?;
        let dst_off = slot(off, name("offsets", k, ""))?;
        placed_at.push(dst_off);
        parsed.push(Block {
            src: from.index,
            src_off: from.place("block", k, "source", 0, geo.src_reach())?,
            dst: into.index,
            dst_off: into.place("block", k, "destination", dst_off, geo.dst_reach())?,
        });
    }
    if at.next().is_some() {
        return Err(PyValueError::new_err(format!("offsets has more items than sources ({})", parsed.len())));
    }
    let disjoint = tiles::placed_on_lattice(&block, &dst_shape, &placed_at);
    interner.finish_with(Work::Blocks(geo, parsed), disjoint)
}

/// Whole-storage copies: `sources[k]` slots `[0, count)` into `destinations[k]` at slot 0.
fn parse_pairs(sources: &Bound<'_, PyAny>, destinations: &Bound<'_, PyAny>, count: i64) -> PyResult<Request> {
    let count = slot(count, "count")?;
    let mut interner = Interner::default();
    let mut out = Vec::new();
    let mut to = destinations.try_iter()?;
    for (k, src) in sources.try_iter()?.enumerate() {
        let dst = to
            .next()
            .ok_or_else(|| PyValueError::new_err(format!("destinations has fewer items than sources ({k})")))??;
        let from = interner.intern(&src?, name("sources", k, ""))?;
        let into = interner.intern(&dst, name("destinations", k, ""))?;
        out.push(Span {
            src: from.index,
            src_off: from.place("span", k, "source", 0, count)?,
            dst: into.index,
            dst_off: into.place("span", k, "destination", 0, count)?,
            count,
        });
    }
    if to.next().is_some() {
        return Err(PyValueError::new_err(format!("destinations has more items than sources ({})", out.len())));
    }
    interner.finish(Work::Spans(out))
}

fn run_now(py: Python<'_>, request: Request) -> PyResult<()> {
    run_blocking(py, move || request.run())
}

/// Queues the request as one engine job; `then(None)` or `then(exc)` runs afterwards with the
/// GIL held on the worker. The storages are dropped before Python learns of the outcome, so a
/// commit that releases the old tiles frees their memory at once.
fn submit(then: &Bound<'_, PyAny>, request: Request) -> PyResult<()> {
    submit_job(then, move || request.run())
}

/// Copies every `(src, src_slot, dst, dst_slot, count)` span, in order, with the GIL
/// released. Ranges are checked against every storage first (ValueError, nothing written).
#[pyfunction]
fn copy_spans(py: Python<'_>, spans: &Bound<'_, PyAny>) -> PyResult<()> {
    let request = parse_spans(spans)?;
    run_now(py, request)
}

/// `copy_spans` as one engine job; then `then(None)` or `then(exc)`.
#[pyfunction]
fn submit_copy_spans(spans: &Bound<'_, PyAny>, then: &Bound<'_, PyAny>) -> PyResult<()> {
    let request = parse_spans(spans)?;
    submit(then, request)
}

/// Copies every `(src, src_slot, dst, dst_slot)` block: the `block_shape` region of a dense
/// `src_shape` array at `src_slot` into a dense `dst_shape` array at `dst_slot` (shapes first
/// mode fastest), with the GIL released.
#[pyfunction]
fn copy_blocks(
    py: Python<'_>,
    blocks: &Bound<'_, PyAny>,
    block_shape: Vec<i64>,
    src_shape: Vec<i64>,
    dst_shape: Vec<i64>,
) -> PyResult<()> {
    let request = parse_blocks(blocks, &block_shape, &src_shape, &dst_shape)?;
    run_now(py, request)
}

/// `copy_blocks` as one engine job; then `then(None)` or `then(exc)`.
#[pyfunction]
fn submit_copy_blocks(
    blocks: &Bound<'_, PyAny>,
    block_shape: Vec<i64>,
    src_shape: Vec<i64>,
    dst_shape: Vec<i64>,
    then: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let request = parse_blocks(blocks, &block_shape, &src_shape, &dst_shape)?;
    submit(then, request)
}

/// Copies slots `[0, count)` of each `sources[k]` to slots `[0, count)` of `destinations[k]`
/// (the two equally long), with the GIL released: a residency request's tiles, without a
/// tuple per tile. Checked as `copy_spans` checks its spans.
#[pyfunction]
fn copy_storages(
    py: Python<'_>,
    sources: &Bound<'_, PyAny>,
    destinations: &Bound<'_, PyAny>,
    count: i64,
) -> PyResult<()> {
    let request = parse_pairs(sources, destinations, count)?;
    run_now(py, request)
}

/// Places each whole dense `sources[k]` (of `block_shape`) into the dense `dst_shape` array
/// `destination` at slot `offsets[k]`, as one engine job; then `then(None)` or `then(exc)`.
/// What a projection or the route to CPU does with a tiled tier's tiles, without a tuple per
/// tile. Checked as `copy_blocks` checks its blocks.
#[pyfunction]
fn submit_place_blocks(
    sources: &Bound<'_, PyAny>,
    destination: &Bound<'_, PyAny>,
    offsets: Vec<i64>,
    block_shape: Vec<i64>,
    dst_shape: Vec<i64>,
    then: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let request = parse_placement(sources, destination, offsets, &block_shape, &dst_shape)?;
    submit(then, request)
}

/// Releases every `HostStorage` and `FileRegion` of `storages` (idempotently), the regions of
/// one slab together (one lock and at most one resize or unlink of its file). TypeError,
/// before anything is released, for any other object.
#[pyfunction]
fn release_storages(py: Python<'_>, storages: &Bound<'_, PyAny>) -> PyResult<()> {
    let items: Vec<Bound<'_, PyAny>> = storages.try_iter()?.collect::<PyResult<_>>()?;
    let mut hosts = Vec::new();
    let mut regions = Vec::new();
    for (k, item) in items.iter().enumerate() {
        if let Ok(h) = item.cast::<HostStorage>() {
            hosts.push(h.get());
        } else if let Ok(r) = item.cast::<FileRegion>() {
            regions.push(r.get());
        } else {
            return Err(PyTypeError::new_err(format!(
                "storages[{k}] must be a HostStorage or FileRegion, not {}",
                item.get_type().name()?
            )));
        }
    }
    free_tile_buffers(hosts.iter().filter_map(|h| h.take_buffer()).collect());
    release_regions(py, &regions)
}

/// The buffers of released tiles: kept for the tiles a later promote makes, as far as
/// `HostBuffer::keep_batch` keeps them; the rest freed together, on an engine worker once they
/// add up to DEFERRED_FREE_BYTES (a thousand tile buffers take milliseconds to unmap, which
/// nobody needs to wait for), as one large buffer's release is.
pub(crate) fn free_tile_buffers(buffers: Vec<Arc<HostBuffer>>) {
    let buffers = HostBuffer::keep_batch(buffers);
    if buffers.iter().map(|b| b.len()).sum::<usize>() >= DEFERRED_FREE_BYTES {
        engine::submit(move || drop(buffers));
    } else {
        drop(buffers);
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(copy_storages, m)?)?;
    m.add_function(wrap_pyfunction!(submit_place_blocks, m)?)?;
    m.add_function(wrap_pyfunction!(release_storages, m)?)?;
    m.add_function(wrap_pyfunction!(copy_spans, m)?)?;
    m.add_function(wrap_pyfunction!(submit_copy_spans, m)?)?;
    m.add_function(wrap_pyfunction!(copy_blocks, m)?)?;
    m.add_function(wrap_pyfunction!(submit_copy_blocks, m)?)?;
    Ok(())
}
