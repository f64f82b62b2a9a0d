//! Hierarchical keys, both ways: a Python key (an int, or nested lists/tuples of them) is
//! walked in place by the core's index walker, with no conversion to a Rust tree and no
//! per-call allocation; a core coordinate becomes nested tuples (docs/spec/layout-and-dtype.md §4).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyList, PyTuple};
use strideweave_core::layout::{Coord, KeyNode, KeySeq, KeyView, LayoutError};

use super::protocol::{type_name, MAX_NESTING};
use crate::error;

/// A Python object seen as one node of a hierarchical key.
pub(super) struct PyKey<'py>(Bound<'py, PyAny>);

/// A Python list or tuple of key components.
pub(super) enum PyKeySeq<'py> {
    Tuple(Bound<'py, PyTuple>),
    List(Bound<'py, PyList>),
}

impl<'py> KeyNode for PyKey<'py> {
    type Seq = PyKeySeq<'py>;

    fn view(&self) -> Result<KeyView<PyKeySeq<'py>>, LayoutError> {
        let o = &self.0;
        // bool is an int subclass, so it must be refused before the int test.
        if o.is_instance_of::<PyBool>() {
            return Err(LayoutError::BoolCoordinate);
        }
        if let Ok(i) = o.cast::<PyInt>() {
            // An int beyond 64 bits is necessarily outside every extent.
            return i
                .extract::<i64>()
                .map(KeyView::Int)
                .map_err(|_| LayoutError::CoordinateBeyond64Bits { coordinate: i.to_string() });
        }
        if let Ok(t) = o.cast::<PyTuple>() {
            return Ok(KeyView::Seq(PyKeySeq::Tuple(t.clone())));
        }
        if let Ok(l) = o.cast::<PyList>() {
            return Ok(KeyView::Seq(PyKeySeq::List(l.clone())));
        }
        match index_like(o) {
            Some(Ok(i)) => i
                .extract::<i64>()
                .map(KeyView::Int)
                .map_err(|_| LayoutError::CoordinateBeyond64Bits { coordinate: i.to_string() }),
            _ => Err(bad_key_type(o)),
        }
    }
}

/// `operator.index(o)` for an index-like object that is not an int (`np.int64`, any type with
/// `__index__`), so such keys are accepted wherever an int is (issue 26); `None` when `o` has
/// no `__index__`, `Some(Err)` when its `__index__` raised (numpy's bool does). Only reached
/// after the int, tuple and list tests, so plain int keys never pay for it.
pub(super) fn index_like<'py>(o: &Bound<'py, PyAny>) -> Option<PyResult<Bound<'py, PyInt>>> {
    // SAFETY: `o` is a valid object reference held through the GIL for the call;
    // PyIndex_Check only reads its type's slots.
    if unsafe { pyo3::ffi::PyIndex_Check(o.as_ptr()) } == 0 {
        return None;
    }
    // SAFETY: as above; PyNumber_Index returns a new reference to an int or NULL with an
    // exception set, which from_owned_ptr_or_err turns into an owned Bound or a PyErr.
    let index = unsafe { Bound::from_owned_ptr_or_err(o.py(), pyo3::ffi::PyNumber_Index(o.as_ptr())) };
    Some(index.and_then(|i| i.cast_into::<PyInt>().map_err(PyErr::from)))
}

impl<'py> KeySeq for PyKeySeq<'py> {
    type Node = PyKey<'py>;

    fn len(&self) -> usize {
        match self {
            PyKeySeq::Tuple(t) => t.len(),
            PyKeySeq::List(l) => l.len(),
        }
    }

    fn get(&self, i: usize) -> Result<PyKey<'py>, LayoutError> {
        let item = match self {
            PyKeySeq::Tuple(t) => t.get_item(i),
            PyKeySeq::List(l) => l.get_item(i),
        };
        item.map(PyKey).map_err(|e| LayoutError::KeyComponentUnreadable(e.to_string()))
    }
}

fn bad_key_type(o: &Bound<'_, PyAny>) -> LayoutError {
    LayoutError::KeyComponentType { type_name: type_name(o) }
}

/// First component of `key`, at any depth, whose *type* is invalid (bool, float, str, None,
/// …). The spec makes such a key a TypeError even when the walk first met a value error
/// (e.g. a wrong component count), so a failed walk is re-checked with this scan.
fn find_bad_key_type(key: &Bound<'_, PyAny>, depth: usize) -> Option<LayoutError> {
    if depth > MAX_NESTING {
        return None;
    }
    if key.is_instance_of::<PyBool>() {
        return Some(LayoutError::BoolCoordinate);
    }
    if key.is_instance_of::<PyInt>() {
        return None;
    }
    if let Ok(t) = key.cast::<PyTuple>() {
        return t.iter().find_map(|item| find_bad_key_type(&item, depth + 1));
    }
    if let Ok(l) = key.cast::<PyList>() {
        return l.iter().find_map(|item| find_bad_key_type(&item, depth + 1));
    }
    match index_like(key) {
        Some(Ok(_)) => None,
        _ => Some(bad_key_type(key)),
    }
}

/// Runs `walk` over the Python `key` (read in place) and returns the index it computes; on a
/// ValueError, a bad component type anywhere in the key is reported instead (TypeError).
pub(super) fn walk_key<'py>(
    key: &Bound<'py, PyAny>,
    walk: impl FnOnce(&PyKey<'py>) -> Result<i64, LayoutError>,
) -> PyResult<i64> {
    walk(&PyKey(key.clone())).map_err(|e| {
        let err = error::layout(e);
        if !err.is_instance_of::<PyValueError>(key.py()) {
            return err;
        }
        find_bad_key_type(key, 0).map_or(err, error::layout)
    })
}

/// A coordinate as nested Python tuples of ints.
pub(super) fn coord_to_py<'py>(py: Python<'py>, c: &Coord) -> PyResult<Bound<'py, PyAny>> {
    match c {
        Coord::Int(v) => Ok(v.into_pyobject(py)?.into_any()),
        Coord::Seq(s) => {
            let items = s.iter().map(|c| coord_to_py(py, c)).collect::<PyResult<Vec<_>>>()?;
            Ok(PyTuple::new(py, items)?.into_any())
        }
        _ => Err(PyValueError::new_err("unsupported coordinate node")),
    }
}
