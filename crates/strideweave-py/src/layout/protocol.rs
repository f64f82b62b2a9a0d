//! What `Shape`, `Stride` and `Layout` share as Python objects: selecting top-level modes by
//! an int or a slice (docs/spec/layout-and-dtype.md §2), iterating over them, equality, hashing, and
//! checking that an argument is of the expected class.

use std::hash::{DefaultHasher, Hash, Hasher};

use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::type_object::PyTypeCheck;
use pyo3::types::{PyBool, PyInt, PyList, PySlice};
use strideweave_core::layout::layout::normalize_mode_index;
use strideweave_core::layout::{Layout, Shape, Stride};

use crate::error;

/// Deeper Python nesting than this is refused instead of risking the native stack: no
/// meaningful layout comes close, and Python's own repr gives up far earlier.
pub(super) const MAX_NESTING: usize = 1000;

/// The class name of `obj`, for messages.
pub(super) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// `obj` as the pyclass `P`, or the message `"{rule}, got {type}"` for the caller's exception.
pub(super) fn argument<'a, 'py, P: PyTypeCheck>(
    obj: &'a Bound<'py, PyAny>,
    rule: &str,
) -> Result<&'a Bound<'py, P>, String> {
    obj.cast::<P>().map_err(|_| format!("{rule}, got {}", type_name(obj)))
}

/// A core value made of top-level modes.
pub(super) trait TopLevelModes: Sized {
    fn rank(&self) -> usize;
    /// Top-level mode `i < rank` on its own.
    fn mode(&self, i: usize) -> Self;
    /// The top-level modes at `indices`, in order.
    fn select(&self, indices: &[usize]) -> Self;
}

// `mode` and `select` are inherent methods of all three core types (inherent methods win
// over this trait's in path calls); `rank` is Layout's own, and the tree's for Shape/Stride.
macro_rules! top_level_modes {
    ($core:ty, |$v:ident| $rank:expr) => {
        impl TopLevelModes for $core {
            fn rank(&self) -> usize {
                let $v = self;
                $rank
            }
            fn mode(&self, i: usize) -> Self {
                <$core>::mode(self, i)
            }
            fn select(&self, indices: &[usize]) -> Self {
                <$core>::select(self, indices)
            }
        }
    };
}
top_level_modes!(Shape, |v| v.tree().rank());
top_level_modes!(Stride, |v| v.tree().rank());
top_level_modes!(Layout, |v| Layout::rank(v));

/// `obj[key]`: an int (negatives as in Python; out of range is IndexError) picks one mode, a
/// slice picks several; any other key is a TypeError naming `class`.
pub(super) fn select_modes<T: TopLevelModes>(core: &T, key: &Bound<'_, PyAny>, class: &str) -> PyResult<T> {
    let rank = core.rank();
    if key.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!("{class} indices must be int or slice, not bool")));
    }
    // An index-like key (`np.int64`, any `__index__`) selects as its int does (issue 26).
    let index = match key.cast::<PyInt>() {
        Ok(i) => Some(i.clone()),
        Err(_) if key.cast::<PySlice>().is_err() => super::keys::index_like(key).and_then(Result::ok),
        Err(_) => None,
    };
    if let Some(i) = index {
        let i = i
            .extract::<i64>()
            .map_err(|_| PyIndexError::new_err(format!("{class} index {key} out of range for rank {rank}")))?;
        let i = normalize_mode_index(i, rank).map_err(error::layout)?;
        return Ok(core.mode(i));
    }
    if let Ok(s) = key.cast::<PySlice>() {
        let ind = s.indices(rank as isize)?;
        let picked: Vec<usize> = (0..ind.slicelength as isize).map(|j| (ind.start + j * ind.step) as usize).collect();
        return Ok(core.select(&picked));
    }
    Err(PyTypeError::new_err(format!("{class} indices must be int or slice, not {}", type_name(key))))
}

/// `iter(obj)`: the top-level modes, each wrapped as its Python class by `wrap`.
pub(super) fn iter_modes<'py, T: TopLevelModes, P: IntoPyObject<'py>>(
    py: Python<'py>,
    core: &T,
    wrap: impl Fn(T) -> P,
) -> PyResult<Bound<'py, PyAny>> {
    let modes: Vec<P> = (0..core.rank()).map(|i| wrap(core.mode(i))).collect();
    Ok(PyList::new(py, modes)?.try_iter()?.into_any())
}

/// `==` and `!=` against another value of the same class (`other`); NotImplemented for any
/// other class and for orderings.
pub(super) fn compare<T: PartialEq>(py: Python<'_>, mine: &T, other: Option<&T>, op: CompareOp) -> Py<PyAny> {
    let Some(other) = other else {
        return py.NotImplemented();
    };
    let result = match op {
        CompareOp::Eq => mine == other,
        CompareOp::Ne => mine != other,
        _ => return py.NotImplemented(),
    };
    PyBool::new(py, result).to_owned().into_any().unbind()
}

/// The hash of `value`, salted with its class name so that equal trees of different classes
/// (a Shape and a Stride) hash apart.
pub(super) fn hash_of<T: Hash>(class: &str, value: &T) -> u64 {
    let mut h = DefaultHasher::new();
    class.hash(&mut h);
    value.hash(&mut h);
    h.finish()
}
