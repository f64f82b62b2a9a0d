//! Python classes `Shape`, `Stride` and `Layout` over `strideweave_core::layout`.
//!
//! These pyclasses *are* the public classes (`strideweave.Shape is _native.Shape`), so
//! their Python-visible behaviour is exactly docs/spec/layout-and-dtype.md §2–§7: constructor rules,
//! exception classes, repr, equality and hashing. Other binding modules (Tensor element
//! access, views, DLPack) reuse [`PyLayout::core`], [`PyLayout::index_from_key`] and
//! [`PyLayout::from_core`] instead of going back through Python.
//!
//! - this file: `Layout` and the module's registration;
//! - `trees.rs`: `Shape` and `Stride`, built from Python items;
//! - `algebra.rs`: the CuTe algebra methods (§9): compose, complement, divides, products, inverses;
//! - `rearrange.rs`: `Tree` and `NodeId` (`Node.id(n)`), `rearrange` and `uniform_preimage_extent`;
//! - `keys.rs`: Python keys walked in place, coordinates back to tuples;
//! - `protocol.rs`: what the three classes share (mode selection, iteration, equality, hash,
//!   argument classes).

mod algebra;
mod keys;
mod protocol;
mod rearrange;
mod trees;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyInt, PyList, PyTuple, PyType};
use strideweave_core::layout::{Layout, ProfileNode};

use std::sync::Arc;

use crate::error;
use keys::walk_key;
use protocol::{argument, compare, hash_of, iter_modes, select_modes, type_name};
pub use trees::{PyShape, PyStride};

/// An immutable hierarchical layout: a congruent Shape and Stride (docs/spec/layout-and-dtype.md §3–§7).
#[pyclass(frozen, module = "strideweave.layout", name = "Layout")]
pub struct PyLayout {
    /// Shared with the core tensors built over this layout (a move's), which so cost no copy
    /// of its trees.
    inner: Arc<Layout>,
}

static NODE_MEMBERS: PyOnceLock<[Py<PyAny>; 3]> = PyOnceLock::new();

/// `strideweave.layout.Node.{Leaf, Push, Pop}`, imported on first use: the enum is
/// defined in Python, which imports this extension, so it cannot be fetched at load time.
fn node_members(py: Python<'_>) -> PyResult<&'static [Py<PyAny>; 3]> {
    NODE_MEMBERS.get_or_try_init(py, || {
        let node = py.import("strideweave.layout")?.getattr("Node")?;
        Ok([node.getattr("Leaf")?.unbind(), node.getattr("Push")?.unbind(), node.getattr("Pop")?.unbind()])
    })
}

impl PyLayout {
    /// Wrap a core layout (results built in Rust: views, canonical layouts, …).
    pub fn from_core(inner: Layout) -> PyLayout {
        PyLayout { inner: Arc::new(inner) }
    }

    /// The core layout, shared (for a core tensor over it).
    pub fn shared(&self) -> &Arc<Layout> {
        &self.inner
    }

    /// The core layout: `leaf_extents()` / `leaf_strides()` / `index_of_int()` for kernels.
    pub fn core(&self) -> &Layout {
        &self.inner
    }

    /// The scalar index of a Python key, with exactly the §4 rules: an int in `[0, size)`,
    /// or a list/tuple congruent with the shape where an int may replace any subtree.
    /// Errors: out of range, negative, missing/extra components, a list where a leaf
    /// belongs → ValueError; a bool anywhere, float, str, None or other type → TypeError.
    pub fn index_from_key(&self, key: &Bound<'_, PyAny>) -> PyResult<i64> {
        walk_key(key, |key| self.inner.index_of_key(key))
    }

    fn operand<'a, 'py>(obj: &'a Bound<'py, PyAny>, what: &str) -> PyResult<&'a Bound<'py, PyLayout>> {
        argument(obj, &format!("{what} operand must be a Layout")).map_err(PyTypeError::new_err)
    }
}

#[pymethods]
impl PyLayout {
    #[new]
    fn py_new(shape: &Bound<'_, PyAny>, stride: &Bound<'_, PyAny>) -> PyResult<Self> {
        let shape = argument::<PyShape>(shape, "Layout shape must be a Shape").map_err(PyValueError::new_err)?;
        let stride = argument::<PyStride>(stride, "Layout stride must be a Stride").map_err(PyValueError::new_err)?;
        Layout::new(shape.get().core().clone(), stride.get().core().clone())
            .map(PyLayout::from_core)
            .map_err(error::layout)
    }

    #[getter]
    fn shape(&self) -> PyShape {
        PyShape::from_core(self.inner.shape().clone())
    }

    #[getter]
    fn stride(&self) -> PyStride {
        PyStride::from_core(self.inner.stride().clone())
    }

    fn __len__(&self) -> usize {
        self.inner.rank()
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        iter_modes(py, &*self.inner, PyLayout::from_core)
    }

    /// `Layout(shape[key], stride[key])`: an int or slice over the top-level modes.
    fn __getitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        select_modes(&*self.inner, key, "Layout").map(PyLayout::from_core)
    }

    #[getter]
    fn depth(&self) -> usize {
        self.inner.depth()
    }

    #[getter]
    fn is_leaf(&self) -> bool {
        self.inner.is_leaf()
    }

    #[getter]
    fn size(&self) -> i64 {
        self.inner.size()
    }

    #[getter]
    fn cosize(&self) -> i64 {
        self.inner.cosize()
    }

    #[getter]
    fn leaf_shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.leaf_extents())
    }

    #[getter]
    fn leaf_stride<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.leaf_strides())
    }

    fn infix<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.inner.infix())
    }

    #[getter]
    fn profile<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let [leaf, push, pop] = node_members(py)?;
        let items = self.inner.profile().into_iter().map(|n| match n {
            ProfileNode::Leaf => leaf.bind(py),
            ProfileNode::Push => push.bind(py),
            ProfileNode::Pop => pop.bind(py),
            // The core's profile has only the three markers above.
            _ => unreachable!("a profile holds Leaf, Push and Pop only"),
        });
        PyList::new(py, items)
    }

    fn __call__(&self, key: &Bound<'_, PyAny>) -> PyResult<i64> {
        self.index_from_key(key)
    }

    fn index(&self, key: &Bound<'_, PyAny>) -> PyResult<i64> {
        self.index_from_key(key)
    }

    #[staticmethod]
    fn get_index(layout: &Bound<'_, PyAny>, key: &Bound<'_, PyAny>) -> PyResult<i64> {
        let layout =
            argument::<PyLayout>(layout, "Layout.get_index layout must be a Layout").map_err(PyValueError::new_err)?;
        layout.get().index_from_key(key)
    }

    fn is_injective(&self) -> bool {
        self.inner.is_injective()
    }

    fn broadcast_to(&self, target: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        let target =
            argument::<PyShape>(target, "broadcast_to target must be a Shape").map_err(PyTypeError::new_err)?;
        self.inner.broadcast_to(target.get().core()).map(PyLayout::from_core).map_err(error::layout)
    }

    #[staticmethod]
    fn canonical(shape: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        let shape =
            argument::<PyShape>(shape, "Layout.canonical shape must be a Shape").map_err(PyTypeError::new_err)?;
        Layout::canonical(shape.get().core()).map(PyLayout::from_core).map_err(error::layout)
    }

    fn concat(&self, other: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        let b = PyLayout::operand(other, "concat")?;
        Layout::concat(&self.inner, &b.get().inner).map(PyLayout::from_core).map_err(error::layout)
    }

    fn append(&self, other: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        let b = PyLayout::operand(other, "append")?;
        Layout::append(&self.inner, &b.get().inner).map(PyLayout::from_core).map_err(error::layout)
    }

    #[pyo3(signature = (*order))]
    fn permute(&self, order: &Bound<'_, PyTuple>) -> PyResult<PyLayout> {
        // Variadic, or a single list/tuple holding the order.
        let single = if order.len() == 1 { Some(order.get_item(0)?) } else { None };
        let entries: Vec<Bound<'_, PyAny>> = match &single {
            Some(s) if s.is_instance_of::<PyTuple>() || s.is_instance_of::<PyList>() => {
                s.try_iter()?.collect::<PyResult<_>>()?
            }
            _ => order.iter().collect(),
        };
        let rank = self.inner.rank();
        let mut idx = Vec::with_capacity(entries.len());
        for e in &entries {
            if !e.is_exact_instance_of::<PyInt>() {
                return Err(PyTypeError::new_err(format!("permute order entries must be int, got {}", type_name(e))));
            }
        }
        for e in &entries {
            // Anything that is not a usize is certainly not in range(rank).
            match e.extract::<usize>() {
                Ok(i) => idx.push(i),
                Err(_) => {
                    return Err(PyValueError::new_err(format!("permute order entry {e} is not in range({rank})")))
                }
            }
        }
        self.inner.permute(&idx).map(PyLayout::from_core).map_err(error::layout)
    }

    // The CuTe algebra (§9); bodies in algebra.rs.
    #[pyo3(signature = (profile=None))]
    fn coalesce(&self, py: Python<'_>, profile: Option<&Bound<'_, PyAny>>) -> PyResult<PyLayout> {
        self.alg_coalesce(py, profile)
    }

    fn filter(&self) -> PyResult<PyLayout> {
        self.alg_filter()
    }

    fn compose(&self, other: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        self.alg_compose(other)
    }

    #[pyo3(signature = (cotarget=None))]
    fn complement(&self, cotarget: Option<&Bound<'_, PyAny>>) -> PyResult<PyLayout> {
        self.alg_complement(cotarget)
    }

    fn divide(&self, tiler: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        self.alg_divide(tiler)
    }

    fn zipped_divide(&self, tiler: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        self.alg_zipped_divide(tiler)
    }

    fn tiled_divide(&self, tiler: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        self.alg_tiled_divide(tiler)
    }

    fn product(&self, tiler: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        self.alg_product(tiler)
    }

    fn blocked_product(&self, other: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        self.alg_blocked_product(other)
    }

    fn raked_product(&self, other: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        self.alg_raked_product(other)
    }

    fn right_inverse(&self) -> PyResult<PyLayout> {
        self.alg_right_inverse()
    }

    fn left_inverse(&self) -> PyResult<PyLayout> {
        self.alg_left_inverse()
    }

    #[pyo3(signature = (output, selection=None))]
    fn rearrange(&self, output: &Bound<'_, PyAny>, selection: Option<&Bound<'_, PyAny>>) -> PyResult<PyLayout> {
        self.alg_rearrange(output, selection)
    }

    fn uniform_preimage_extent(&self, target: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
        self.alg_uniform_preimage_extent(target)
    }

    fn __add__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let py = other.py();
        let Ok(b) = other.cast::<PyLayout>() else {
            return Ok(py.NotImplemented());
        };
        let out = Layout::concat(&self.inner, &b.get().inner).map_err(error::layout)?;
        Ok(Bound::new(py, PyLayout::from_core(out))?.into_any().unbind())
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> Py<PyAny> {
        let same = other.cast::<PyLayout>().ok();
        compare(other.py(), &*self.inner, same.map(|o| &*o.get().inner), op)
    }

    fn __hash__(&self) -> u64 {
        hash_of("Layout", &*self.inner)
    }

    fn __repr__(&self) -> String {
        self.inner.to_string()
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyType>, (PyShape, PyStride))> {
        let me = slf.get();
        Ok((slf.get_type(), (me.shape(), me.stride())))
    }
}

/// Register `Shape`, `Stride` and `Layout` on `strideweave._native`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyShape>()?;
    m.add_class::<PyStride>()?;
    m.add_class::<PyLayout>()?;
    m.add_class::<rearrange::PyTree>()?;
    m.add_class::<rearrange::PyNodeId>()?;
    Ok(())
}
