//! `Layout`'s CuTe algebra methods (docs/spec/layout-and-dtype.md §9): the arguments Python
//! passes (a Layout, a Shape, an int, a tuple tiler, a profile) turned into core values,
//! and the core's precondition errors turned into ValueError by `error::layout`.
//!
//! The `#[pymethods]` wrappers live in `mod.rs` (one methods block per class); every method is
//! an instance method, so `Layout.compose(A, B)` and `A.compose(B)` are the same call.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyList, PyTuple};
use strideweave_core::layout::{Layout, Tiler};

use super::protocol::type_name;
use super::{PyLayout, PyShape};
use crate::error;

/// One tiler entry: a Layout, a Shape (its canonical compact layout) or a positive int `n`
/// (the layout `n:1`).
fn one_layout(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<Layout>> {
    if let Ok(l) = obj.cast::<PyLayout>() {
        return Ok(Some(l.get().core().clone()));
    }
    if let Ok(s) = obj.cast::<PyShape>() {
        return Layout::canonical(s.get().core()).map(Some).map_err(error::layout);
    }
    if obj.is_exact_instance_of::<PyInt>() {
        let n: i64 = obj.extract().map_err(|_| PyValueError::new_err(format!("{what} {obj} is out of range")))?;
        if n < 1 {
            return Err(PyValueError::new_err(format!("{what} must be >= 1, got {n}")));
        }
        return Layout::leaf(n, 1).map(Some).map_err(error::layout);
    }
    Err(PyTypeError::new_err(format!("{what} must be a Layout, Shape or int, got {}", type_name(obj))))
}

/// A whole-layout tiler, or a tuple/list of per-mode tilers (`None` keeps a mode).
fn to_tiler(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Tiler> {
    if obj.is_instance_of::<PyTuple>() || obj.is_instance_of::<PyList>() {
        let mut modes = Vec::new();
        for (i, item) in obj.try_iter()?.enumerate() {
            let item = item?;
            modes.push(if item.is_none() { None } else { one_layout(&item, &format!("{what}[{i}]"))? });
        }
        return Ok(Tiler::Modes(modes));
    }
    match one_layout(obj, what)? {
        Some(l) => Ok(Tiler::Layout(l)),
        None => unreachable!("one_layout never returns None for a non-None argument"),
    }
}

fn wrap(r: Result<Layout, strideweave_core::layout::LayoutError>) -> PyResult<PyLayout> {
    r.map(PyLayout::from_core).map_err(error::layout)
}

impl PyLayout {
    /// Same function, fewest modes; with `profile` (a Shape or nested tuple), coalesce
    /// within each of its modes.
    pub(super) fn alg_coalesce(&self, py: Python<'_>, profile: Option<&Bound<'_, PyAny>>) -> PyResult<PyLayout> {
        match profile {
            None => wrap(self.core().coalesce()),
            Some(p) => {
                let shape = if let Ok(s) = p.cast::<PyShape>() {
                    s.get().core().clone()
                } else if p.is_instance_of::<PyTuple>() || p.is_instance_of::<PyList>() || p.is_instance_of::<PyInt>() {
                    py.get_type::<PyShape>()
                        .call1((p,))
                        .map_err(|e| PyValueError::new_err(format!("coalesce profile is not a valid shape: {e}")))?
                        .cast::<PyShape>()?
                        .get()
                        .core()
                        .clone()
                } else {
                    return Err(PyTypeError::new_err(format!(
                        "coalesce profile must be a Shape or a tuple, got {}",
                        type_name(p)
                    )));
                };
                wrap(self.core().coalesce_by(shape.tree()))
            }
        }
    }

    /// Drop stride-0 and extent-1 modes, then coalesce.
    pub(super) fn alg_filter(&self) -> PyResult<PyLayout> {
        wrap(self.core().filter())
    }

    /// `self ∘ other`, shaped like `other`: a Layout, a Shape (its compact layout), an int
    /// `n` (`n:1`), or a tuple of those (or None) applied mode by mode.
    pub(super) fn alg_compose(&self, other: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        match to_tiler(other, "compose other")? {
            Tiler::Layout(b) => wrap(self.core().compose(&b)),
            Tiler::Modes(ts) => wrap(self.core().compose_modes(&ts)),
            // `to_tiler` builds only the two kinds above.
            _ => Err(PyTypeError::new_err("compose other: unsupported tiler")),
        }
    }

    /// The layout filling `[0, cotarget)` (default: this layout's cosize) with what this
    /// layout's image leaves out.
    pub(super) fn alg_complement(&self, cotarget: Option<&Bound<'_, PyAny>>) -> PyResult<PyLayout> {
        let cot = match cotarget {
            None => self.core().cosize(),
            Some(c) if c.is_exact_instance_of::<PyInt>() => c
                .extract::<i64>()
                .map_err(|_| PyValueError::new_err(format!("complement cotarget {c} is out of range")))?,
            Some(c) => {
                return Err(PyTypeError::new_err(format!("complement cotarget must be an int, got {}", type_name(c))))
            }
        };
        if cot < 1 {
            return Err(PyValueError::new_err(format!("complement cotarget must be >= 1, got {cot}")));
        }
        wrap(self.core().complement(cot))
    }

    /// Logical divide `self ∘ (tiler, complement(tiler, self.size))`.
    pub(super) fn alg_divide(&self, tiler: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        wrap(self.core().divide(&to_tiler(tiler, "divide tiler")?))
    }

    /// The divide as `((tile modes…), (rest modes…))`.
    pub(super) fn alg_zipped_divide(&self, tiler: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        wrap(self.core().zipped_divide(&to_tiler(tiler, "zipped_divide tiler")?))
    }

    /// The divide as `((tile modes…), rest mode, rest mode, …)`.
    pub(super) fn alg_tiled_divide(&self, tiler: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        wrap(self.core().tiled_divide(&to_tiler(tiler, "tiled_divide tiler")?))
    }

    /// Logical product `(self, complement(self, self.size·tiler.cosize) ∘ tiler)`.
    pub(super) fn alg_product(&self, tiler: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        wrap(self.core().product(&to_tiler(tiler, "product tiler")?))
    }

    /// The product with each mode `(self's mode, repeat's mode)`, coalesced.
    pub(super) fn alg_blocked_product(&self, other: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        let b = one_layout(other, "blocked_product other")?.expect("not None");
        wrap(self.core().blocked_product(&b))
    }

    /// The product with each mode `(repeat's mode, self's mode)`, coalesced.
    pub(super) fn alg_raked_product(&self, other: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        let b = one_layout(other, "raked_product other")?.expect("not None");
        wrap(self.core().raked_product(&b))
    }

    /// `R` with `self(R(i)) == i` for every `i` in `range(R.size)`.
    pub(super) fn alg_right_inverse(&self) -> PyResult<PyLayout> {
        wrap(self.core().right_inverse())
    }

    /// `L` with `L(self(i)) == i` for every `i` in `range(self.size)`; ValueError unless
    /// this layout is injective.
    pub(super) fn alg_left_inverse(&self) -> PyResult<PyLayout> {
        wrap(self.core().left_inverse())
    }
}
