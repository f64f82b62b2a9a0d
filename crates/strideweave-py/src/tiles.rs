//! Batched span copies between built-in storages, on `strideweave._native`: the data path of
//! TiledEvictable's residency requests, projections and its "tiled.to_cpu" route.
//!
//! `copy_spans(spans)` / `submit_copy_spans(spans, then)` take `(src, src_slot, dst, dst_slot,
//! count)` tuples whose ends are `HostStorage` or `FileStorage` objects, never addresses.
//! `copy_blocks` / `submit_copy_blocks` take `(src, src_slot, dst, dst_slot)` blocks of one
//! shared geometry (a dense block of `block_shape` inside a dense `src_shape` array, placed
//! into a dense `dst_shape` array), which Rust copies row by row: a projection of
//! thousands of tiles is one Python call, not a tuple per row.
//!
//! Every storage is resolved to its live buffer or file and held by `Arc` for the whole
//! request (a concurrent release only drops the carrier's reference), all storages must
//! share one element kind, and every span is checked against its storage's size before the
//! request is queued: a bad request raises here and writes nothing. The submitted form runs
//! the whole request as ONE engine job with the GIL released and then calls `then(None)` or
//! `then(exc)` with the GIL held; the blocking form runs it on the calling thread with the
//! GIL released.

use std::collections::HashMap;
use std::sync::Arc;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use strideweave_core::storage::{ElemKind, FileStore, HostBuffer};
use strideweave_core::tiles::{self, Block, BlockGeometry, Span, Store};

use crate::error::{self, JobError};
use crate::jobs::{run_blocking, submit_job};
use crate::storage::{FileStorage, HostStorage};

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
}

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

    /// Runs every span or block; an I/O error says how large the request was.
    fn run(&self) -> Result<(), JobError> {
        let stores = self.stores();
        // SAFETY: `check` passed for these stores before the request was run; `held` keeps
        // every buffer and file alive; the carrier layer pins the tiles and claims the
        // destination it names, so no other thread writes these ranges meanwhile.
        let done = match &self.work {
            // SAFETY: as above.
            Work::Spans(spans) => unsafe { tiles::run_spans(&stores, self.elem, spans) },
            // SAFETY: as above.
            Work::Blocks(geo, blocks) => unsafe { tiles::run_blocks(&stores, self.elem, geo, blocks) },
        };
        done.map_err(|err| JobError::Io {
            err,
            context: format!("while copying a request of {} spans or blocks between storages", self.len()),
        })
    }
}

/// Collects each distinct storage once (by the identity of its live buffer or file).
#[derive(Default)]
struct Interner {
    held: Vec<Held>,
    index: HashMap<usize, usize>,
    kind: Option<ElemKind>,
}

impl Interner {
    fn intern(&mut self, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<usize> {
        let released = || PyRuntimeError::new_err(format!("{what} storage is released"));
        let (key, kind, held) = if let Ok(h) = obj.cast::<HostStorage>() {
            let buf = h.get().buffer().ok_or_else(released)?;
            (Arc::as_ptr(&buf) as usize, h.get().kind(), Held::Host(buf))
        } else if let Ok(f) = obj.cast::<FileStorage>() {
            let store = f.get().store().ok_or_else(released)?;
            (Arc::as_ptr(&store) as usize, f.get().kind(), Held::File(store))
        } else {
            return Err(PyTypeError::new_err(format!(
                "{what} must be a HostStorage or FileStorage, not {}",
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
        if let Some(&i) = self.index.get(&key) {
            return Ok(i);
        }
        self.held.push(held);
        self.index.insert(key, self.held.len() - 1);
        Ok(self.held.len() - 1)
    }

    fn finish(self, work: Work) -> PyResult<Request> {
        let elem = self.kind.map_or(1, ElemKind::size);
        let request = Request { held: self.held, elem, work };
        request.check()?;
        Ok(request)
    }
}

fn slot(value: i64, what: &str) -> PyResult<u64> {
    u64::try_from(value).map_err(|_| PyValueError::new_err(format!("{what} must be non-negative, got {value}")))
}

fn parse_spans(spans: &Bound<'_, PyAny>) -> PyResult<Request> {
    let mut interner = Interner::default();
    let mut out = Vec::new();
    for (k, item) in spans.try_iter()?.enumerate() {
        let item = item?;
        let (src, src_off, dst, dst_off, count): (Bound<'_, PyAny>, i64, Bound<'_, PyAny>, i64, i64) = item
            .extract()
            .map_err(|_| PyTypeError::new_err(format!("spans[{k}] must be a (src, src_slot, dst, dst_slot, count) tuple")))?;
        out.push(Span {
            src: interner.intern(&src, &format!("spans[{k}] source"))?,
            src_off: slot(src_off, &format!("spans[{k}] src_slot"))?,
            dst: interner.intern(&dst, &format!("spans[{k}] destination"))?,
            dst_off: slot(dst_off, &format!("spans[{k}] dst_slot"))?,
            count: slot(count, &format!("spans[{k}] count"))?,
        });
    }
    interner.finish(Work::Spans(out))
}

fn shape(values: &[i64], what: &str) -> PyResult<Vec<u64>> {
    values.iter().enumerate().map(|(a, &v)| slot(v, &format!("{what}[{a}]"))).collect()
}

fn parse_blocks(blocks: &Bound<'_, PyAny>, block_shape: &[i64], src_shape: &[i64], dst_shape: &[i64]) -> PyResult<Request> {
    let mut interner = Interner::default();
    let mut parsed = Vec::new();
    for (k, item) in blocks.try_iter()?.enumerate() {
        let item = item?;
        let (src, src_off, dst, dst_off): (Bound<'_, PyAny>, i64, Bound<'_, PyAny>, i64) = item
            .extract()
            .map_err(|_| PyTypeError::new_err(format!("blocks[{k}] must be a (src, src_slot, dst, dst_slot) tuple")))?;
        parsed.push(Block {
            src: interner.intern(&src, &format!("blocks[{k}] source"))?,
            src_off: slot(src_off, &format!("blocks[{k}] src_slot"))?,
            dst: interner.intern(&dst, &format!("blocks[{k}] destination"))?,
            dst_off: slot(dst_off, &format!("blocks[{k}] dst_slot"))?,
        });
    }
    let geo = BlockGeometry::new(
        &shape(block_shape, "block_shape")?,
        &shape(src_shape, "src_shape")?,
        &shape(dst_shape, "dst_shape")?,
    )
    .map_err(error::span)?;
    interner.finish(Work::Blocks(geo, parsed))
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

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(copy_spans, m)?)?;
    m.add_function(wrap_pyfunction!(submit_copy_spans, m)?)?;
    m.add_function(wrap_pyfunction!(copy_blocks, m)?)?;
    m.add_function(wrap_pyfunction!(submit_copy_blocks, m)?)?;
    Ok(())
}
