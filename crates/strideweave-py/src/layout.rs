//! Python classes `Shape`, `Stride` and `Layout` over `strideweave_core::layout`.
//!
//! These pyclasses *are* the public classes (`strideweave.Shape is _native.Shape`), so
//! their Python-visible behaviour is exactly layout-and-dtype.md §2–§7: constructor rules,
//! exception classes, repr, equality and hashing. Other binding modules (Tensor element
//! access, views, DLPack) reuse [`PyLayout::core`], [`PyLayout::index_from_key`] and
//! [`PyLayout::from_core`] instead of going back through Python.

use std::hash::{DefaultHasher, Hash, Hasher};

use pyo3::exceptions::{PyIndexError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyInt, PyList, PySlice, PyTuple, PyType};
use strideweave_core::layout::layout::normalize_mode_index;
use strideweave_core::layout::{
    Coord, IntTree, KeyNode, KeySeq, KeyView, Layout, LayoutError, Mode, ProfileNode, Shape, Stride,
};

use crate::error;

/// Deeper Python nesting than this is refused instead of risking the native stack: no
/// meaningful layout comes close, and Python's own repr gives up far earlier.
const MAX_NESTING: usize = 1000;

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

// ---------------------------------------------------------------------------------------
// Keys: walk a Python key in place (no conversion to a Rust tree, no per-call allocation).

/// A Python object seen as one node of a hierarchical key.
struct PyKey<'py>(Bound<'py, PyAny>);

/// A Python list or tuple of key components.
enum PyKeySeq<'py> {
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
        Err(bad_key_type(o))
    }
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
        item.map(PyKey)
            .map_err(|e| LayoutError::KeyComponentUnreadable(e.to_string()))
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
        return t
            .iter()
            .find_map(|item| find_bad_key_type(&item, depth + 1));
    }
    if let Ok(l) = key.cast::<PyList>() {
        return l
            .iter()
            .find_map(|item| find_bad_key_type(&item, depth + 1));
    }
    Some(bad_key_type(key))
}

/// Run a key walk; on a ValueError, report a type error anywhere in the key instead.
fn with_key_precedence(key: &Bound<'_, PyAny>, result: Result<i64, LayoutError>) -> PyResult<i64> {
    result.map_err(|e| {
        let err = error::layout(e);
        if !err.is_instance_of::<PyValueError>(key.py()) {
            return err;
        }
        find_bad_key_type(key, 0).map_or(err, error::layout)
    })
}

fn coord_to_py<'py>(py: Python<'py>, c: &Coord) -> PyResult<Bound<'py, PyAny>> {
    match c {
        Coord::Int(v) => Ok(v.into_pyobject(py)?.into_any()),
        Coord::Seq(s) => {
            let items = s
                .iter()
                .map(|c| coord_to_py(py, c))
                .collect::<PyResult<Vec<_>>>()?;
            Ok(PyTuple::new(py, items)?.into_any())
        }
    }
}

fn modes_to_py<'py>(py: Python<'py>, modes: &[Mode]) -> PyResult<Bound<'py, PyTuple>> {
    let items = modes
        .iter()
        .map(|m| match m {
            Mode::Leaf(v) => Ok(v.into_pyobject(py)?.into_any()),
            Mode::Nested(n) => Ok(modes_to_py(py, n.children())?.into_any()),
        })
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, items)
}

// ---------------------------------------------------------------------------------------
// Construction of Shape / Stride trees from Python items (§2).

/// Parse one element: an int (bools count as 0/1), a list/tuple (nested mode) or a
/// same-class tree. `same` recognises the same class and returns its tree.
fn parse_element(
    obj: &Bound<'_, PyAny>,
    cls: &str,
    same: &dyn Fn(&Bound<'_, PyAny>) -> Option<IntTree>,
    depth: usize,
) -> PyResult<Mode> {
    if depth > MAX_NESTING {
        return Err(PyValueError::new_err(format!(
            "{cls} nesting deeper than {MAX_NESTING} levels"
        )));
    }
    if obj.is_instance_of::<PyInt>() {
        return obj.extract::<i64>().map(Mode::Leaf).map_err(|_| {
            PyOverflowError::new_err(format!("{cls} element {obj} is outside signed 64 bits"))
        });
    }
    let children: Vec<Mode> = if let Ok(t) = obj.cast::<PyTuple>() {
        t.iter()
            .map(|e| parse_element(&e, cls, same, depth + 1))
            .collect::<PyResult<_>>()?
    } else if let Ok(l) = obj.cast::<PyList>() {
        l.iter()
            .map(|e| parse_element(&e, cls, same, depth + 1))
            .collect::<PyResult<_>>()?
    } else if let Some(tree) = same(obj) {
        // A same-class element with one leaf adds that int; otherwise its modes form one
        // nested mode (a rank-0 element is therefore an empty nested mode: ValueError).
        if let [Mode::Leaf(v)] = tree.modes() {
            return Ok(Mode::Leaf(*v));
        }
        tree.modes().to_vec()
    } else {
        return Err(PyValueError::new_err(format!(
            "{cls} element must be an int, list, tuple or {cls}, got {}",
            type_name(obj)
        )));
    };
    Mode::nested(children)
        .map_err(|_| PyValueError::new_err(format!("{cls} has an empty nested mode")))
}

/// `Shape(*items)` / `Stride(*items)`: no items is rank 0; one item is the whole tree (an
/// int gives rank 1, a list/tuple supplies the top-level modes, a same-class value is
/// copied); several items are the top-level modes.
fn parse_items(
    items: &Bound<'_, PyTuple>,
    cls: &str,
    same: &dyn Fn(&Bound<'_, PyAny>) -> Option<IntTree>,
) -> PyResult<IntTree> {
    let top: Vec<Mode> = if items.len() == 1 {
        let only = items.get_item(0)?;
        if let Some(tree) = same(&only) {
            return Ok(tree);
        }
        if let Ok(t) = only.cast::<PyTuple>() {
            t.iter()
                .map(|e| parse_element(&e, cls, same, 1))
                .collect::<PyResult<_>>()?
        } else if let Ok(l) = only.cast::<PyList>() {
            l.iter()
                .map(|e| parse_element(&e, cls, same, 1))
                .collect::<PyResult<_>>()?
        } else {
            vec![parse_element(&only, cls, same, 1)?]
        }
    } else {
        items
            .iter()
            .map(|e| parse_element(&e, cls, same, 1))
            .collect::<PyResult<_>>()?
    };
    Ok(IntTree::new(top))
}

/// Top-level selection keys (§2): an int (negatives as in Python) or a slice.
enum Selection {
    One(usize),
    Many(Vec<usize>),
}

fn parse_selection(key: &Bound<'_, PyAny>, rank: usize, cls: &str) -> PyResult<Selection> {
    if key.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{cls} indices must be int or slice, not bool"
        )));
    }
    if let Ok(i) = key.cast::<PyInt>() {
        let i = i.extract::<i64>().map_err(|_| {
            PyIndexError::new_err(format!("{cls} index {key} out of range for rank {rank}"))
        })?;
        return normalize_mode_index(i, rank)
            .map(Selection::One)
            .map_err(error::layout);
    }
    if let Ok(s) = key.cast::<PySlice>() {
        let ind = s.indices(rank as isize)?;
        let picked = (0..ind.slicelength as isize)
            .map(|j| (ind.start + j * ind.step) as usize)
            .collect();
        return Ok(Selection::Many(picked));
    }
    Err(PyTypeError::new_err(format!(
        "{cls} indices must be int or slice, not {}",
        type_name(key)
    )))
}

fn hash_of<T: Hash>(tag: &str, value: &T) -> u64 {
    let mut h = DefaultHasher::new();
    tag.hash(&mut h);
    value.hash(&mut h);
    h.finish()
}

// ---------------------------------------------------------------------------------------
// Shape and Stride share everything but validation and Shape's size/decode/encode.

macro_rules! tree_class {
    ($py:ident, $core:ident, $name:literal, { $($extra:tt)* }) => {
        #[doc = concat!("Immutable hierarchical `", $name, "` tree (layout-and-dtype.md §2).")]
        #[pyclass(frozen, module = "strideweave.layout", name = $name)]
        pub struct $py {
            inner: $core,
        }

        impl $py {
            /// Wrap a core tree (for results built in Rust).
            pub fn from_core(inner: $core) -> Self {
                Self { inner }
            }

            /// The core tree.
            pub fn core(&self) -> &$core {
                &self.inner
            }

            fn same_class(obj: &Bound<'_, PyAny>) -> Option<IntTree> {
                obj.cast::<$py>().ok().map(|b| b.get().inner.tree().clone())
            }

            fn operand<'a, 'py>(obj: &'a Bound<'py, PyAny>, what: &str) -> PyResult<&'a Bound<'py, $py>> {
                obj.cast::<$py>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        concat!("{} operand must be a ", $name, ", got {}"), what, type_name(obj)
                    ))
                })
            }
        }

        #[pymethods]
        impl $py {
            #[new]
            #[pyo3(signature = (*items))]
            fn py_new(items: &Bound<'_, PyTuple>) -> PyResult<Self> {
                let tree = parse_items(items, $name, &Self::same_class)?;
                $core::new(tree)
                    .map(Self::from_core)
                    .map_err(|e| error::tree_leaf($name, e))
            }

            /// Nested tuple of ints.
            #[getter]
            fn top_level<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
                modes_to_py(py, self.inner.modes())
            }

            /// 1 if flat (rank 0 included), else 1 + the greatest child depth.
            #[getter]
            fn depth(&self) -> usize {
                self.inner.depth()
            }

            fn __len__(&self) -> usize {
                self.inner.rank()
            }

            fn __getitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<Self> {
                Ok(match parse_selection(key, self.inner.rank(), $name)? {
                    Selection::One(i) => Self::from_core(self.inner.mode(i)),
                    Selection::Many(ix) => Self::from_core(self.inner.select(&ix)),
                })
            }

            fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                let modes: Vec<Self> = (0..self.inner.rank()).map(|i| Self::from_core(self.inner.mode(i))).collect();
                Ok(PyList::new(py, modes)?.try_iter()?.into_any())
            }

            /// The top-level modes of `a`, then those of `b` (callable as `Cls.concat(a, b)`).
            fn concat(&self, other: &Bound<'_, PyAny>) -> PyResult<Self> {
                let b = Self::operand(other, "concat")?;
                Ok(Self::from_core($core::concat(&self.inner, &b.get().inner)))
            }

            /// `a` if `b` is rank 0, the concat if `b` is a leaf, else `b` as one new last mode.
            fn append(&self, other: &Bound<'_, PyAny>) -> PyResult<Self> {
                let b = Self::operand(other, "append")?;
                Ok(Self::from_core($core::append(&self.inner, &b.get().inner)))
            }

            fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> Py<PyAny> {
                let py = other.py();
                let Ok(o) = other.cast::<$py>() else { return py.NotImplemented() };
                let result = match op {
                    CompareOp::Eq => self.inner == o.get().inner,
                    CompareOp::Ne => self.inner != o.get().inner,
                    _ => return py.NotImplemented(),
                };
                PyBool::new(py, result).to_owned().into_any().unbind()
            }

            fn __hash__(&self) -> u64 {
                hash_of($name, self.inner.tree())
            }

            fn __repr__(&self) -> String {
                self.inner.to_string()
            }

            fn __str__(&self) -> String {
                self.inner.to_string()
            }

            fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyType>, (Bound<'py, PyTuple>,))> {
                Ok((slf.get_type(), (modes_to_py(slf.py(), slf.get().inner.modes())?,)))
            }

            $($extra)*
        }
    };
}

tree_class!(PyShape, Shape, "Shape", {
    /// Product of the extents (1 for rank 0); OverflowError beyond 2**63-1.
    #[getter]
    fn size(&self) -> PyResult<i64> {
        self.inner.size().map_err(error::layout)
    }

    /// Coordinate of ordinal `i` (mixed radix, first mode fastest) as a nested tuple.
    fn decode<'py>(&self, py: Python<'py>, i: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        if i.is_instance_of::<PyBool>() || !i.is_instance_of::<PyInt>() {
            return Err(PyTypeError::new_err(format!(
                "Shape.decode ordinal must be an int, got {}",
                type_name(i)
            )));
        }
        let k = i.extract::<i64>().map_err(|_| {
            PyValueError::new_err(format!("Shape.decode ordinal {i} is outside [0, size)"))
        })?;
        let coord = self.inner.decode(k).map_err(error::layout)?;
        coord_to_py(py, &coord)
    }

    /// Ordinal of a hierarchical coordinate (inverse of `decode`; an int may replace any subtree).
    fn encode(&self, c: &Bound<'_, PyAny>) -> PyResult<i64> {
        with_key_precedence(c, self.inner.encode(&PyKey(c.clone())))
    }
});

tree_class!(PyStride, Stride, "Stride", {});

// ---------------------------------------------------------------------------------------
// Layout.

/// An immutable hierarchical layout: a congruent Shape and Stride (layout-and-dtype.md §3–§7).
#[pyclass(frozen, module = "strideweave.layout", name = "Layout")]
pub struct PyLayout {
    inner: Layout,
}

static NODE_MEMBERS: PyOnceLock<[Py<PyAny>; 3]> = PyOnceLock::new();

/// `strideweave.layout.Node.{Leaf, Push, Pop}`, imported on first use: the enum is
/// defined in Python, which imports this extension, so it cannot be fetched at load time.
fn node_members(py: Python<'_>) -> PyResult<&'static [Py<PyAny>; 3]> {
    NODE_MEMBERS.get_or_try_init(py, || {
        let node = py.import("strideweave.layout")?.getattr("Node")?;
        Ok([
            node.getattr("Leaf")?.unbind(),
            node.getattr("Push")?.unbind(),
            node.getattr("Pop")?.unbind(),
        ])
    })
}

impl PyLayout {
    /// Wrap a core layout (results built in Rust: views, canonical layouts, …).
    pub fn from_core(inner: Layout) -> PyLayout {
        PyLayout { inner }
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
        with_key_precedence(key, self.inner.index_of_key(&PyKey(key.clone())))
    }

    fn operand<'a, 'py>(
        obj: &'a Bound<'py, PyAny>,
        what: &str,
    ) -> PyResult<&'a Bound<'py, PyLayout>> {
        obj.cast::<PyLayout>().map_err(|_| {
            PyTypeError::new_err(format!(
                "{what} operand must be a Layout, got {}",
                type_name(obj)
            ))
        })
    }

    fn ints_to_tuple<'py>(py: Python<'py>, v: &[i64]) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, v)
    }
}

#[pymethods]
impl PyLayout {
    #[new]
    fn py_new(shape: &Bound<'_, PyAny>, stride: &Bound<'_, PyAny>) -> PyResult<Self> {
        let shape = shape.cast::<PyShape>().map_err(|_| {
            PyValueError::new_err(format!(
                "Layout shape must be a Shape, got {}",
                type_name(shape)
            ))
        })?;
        let stride = stride.cast::<PyStride>().map_err(|_| {
            PyValueError::new_err(format!(
                "Layout stride must be a Stride, got {}",
                type_name(stride)
            ))
        })?;
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
        let modes: Vec<PyLayout> = (0..self.inner.rank())
            .map(|i| PyLayout::from_core(self.inner.mode(i)))
            .collect();
        Ok(PyList::new(py, modes)?.try_iter()?.into_any())
    }

    /// `Layout(shape[key], stride[key])`: an int or slice over the top-level modes.
    fn __getitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        Ok(match parse_selection(key, self.inner.rank(), "Layout")? {
            Selection::One(i) => PyLayout::from_core(self.inner.mode(i)),
            Selection::Many(ix) => PyLayout::from_core(self.inner.select(&ix)),
        })
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
        PyLayout::ints_to_tuple(py, self.inner.leaf_extents())
    }

    #[getter]
    fn leaf_stride<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyLayout::ints_to_tuple(py, self.inner.leaf_strides())
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
        let layout = layout.cast::<PyLayout>().map_err(|_| {
            PyValueError::new_err(format!(
                "Layout.get_index layout must be a Layout, got {}",
                type_name(layout)
            ))
        })?;
        layout.get().index_from_key(key)
    }

    fn is_injective(&self) -> bool {
        self.inner.is_injective()
    }

    fn broadcast_to(&self, target: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        let target = target.cast::<PyShape>().map_err(|_| {
            PyTypeError::new_err(format!(
                "broadcast_to target must be a Shape, got {}",
                type_name(target)
            ))
        })?;
        self.inner
            .broadcast_to(target.get().core())
            .map(PyLayout::from_core)
            .map_err(error::layout)
    }

    #[staticmethod]
    fn canonical(shape: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        let shape = shape.cast::<PyShape>().map_err(|_| {
            PyTypeError::new_err(format!(
                "Layout.canonical shape must be a Shape, got {}",
                type_name(shape)
            ))
        })?;
        Layout::canonical(shape.get().core())
            .map(PyLayout::from_core)
            .map_err(error::layout)
    }

    fn concat(&self, other: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        let b = PyLayout::operand(other, "concat")?;
        Layout::concat(&self.inner, &b.get().inner)
            .map(PyLayout::from_core)
            .map_err(error::layout)
    }

    fn append(&self, other: &Bound<'_, PyAny>) -> PyResult<PyLayout> {
        let b = PyLayout::operand(other, "append")?;
        Layout::append(&self.inner, &b.get().inner)
            .map(PyLayout::from_core)
            .map_err(error::layout)
    }

    #[pyo3(signature = (*order))]
    fn permute(&self, order: &Bound<'_, PyTuple>) -> PyResult<PyLayout> {
        // Variadic, or a single list/tuple holding the order.
        let single = if order.len() == 1 {
            Some(order.get_item(0)?)
        } else {
            None
        };
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
                return Err(PyTypeError::new_err(format!(
                    "permute order entries must be int, got {}",
                    type_name(e)
                )));
            }
        }
        for e in &entries {
            // Anything that is not a usize is certainly not in range(rank).
            match e.extract::<usize>() {
                Ok(i) => idx.push(i),
                Err(_) => {
                    return Err(PyValueError::new_err(format!(
                        "permute order entry {e} is not in range({rank})"
                    )))
                }
            }
        }
        self.inner
            .permute(&idx)
            .map(PyLayout::from_core)
            .map_err(error::layout)
    }

    fn __add__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let py = other.py();
        let Ok(b) = other.cast::<PyLayout>() else {
            return Ok(py.NotImplemented());
        };
        let out = Layout::concat(&self.inner, &b.get().inner).map_err(error::layout)?;
        Ok(Bound::new(py, PyLayout::from_core(out))?
            .into_any()
            .unbind())
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> Py<PyAny> {
        let py = other.py();
        let Ok(o) = other.cast::<PyLayout>() else {
            return py.NotImplemented();
        };
        let result = match op {
            CompareOp::Eq => self.inner == o.get().inner,
            CompareOp::Ne => self.inner != o.get().inner,
            _ => return py.NotImplemented(),
        };
        PyBool::new(py, result).to_owned().into_any().unbind()
    }

    fn __hash__(&self) -> u64 {
        hash_of("Layout", &self.inner)
    }

    fn __repr__(&self) -> String {
        self.inner.to_string()
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyType>, (PyShape, PyStride))> {
        let me = slf.get();
        Ok((slf.get_type(), (me.shape(), me.stride())))
    }
}

/// Register `Shape`, `Stride` and `Layout` on `strideweave._native`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyShape>()?;
    m.add_class::<PyStride>()?;
    m.add_class::<PyLayout>()?;
    Ok(())
}
