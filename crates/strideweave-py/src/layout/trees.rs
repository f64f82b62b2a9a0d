//! `Shape` and `Stride`: validated integer trees built from Python items
//! (docs/spec/layout-and-dtype.md §2), one macro for both classes.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::types::{PyBool, PyInt, PyList, PyTuple, PyType};
use strideweave_core::layout::{IntTree, Mode, Shape, Stride};

use super::keys::{coord_to_py, walk_key};
use super::protocol::{argument, compare, hash_of, iter_modes, select_modes, type_name, MAX_NESTING};
use crate::error;

/// A tree's top-level modes as nested tuples of ints (`top_level`, pickling).
pub(super) fn modes_to_py<'py>(py: Python<'py>, modes: &[Mode]) -> PyResult<Bound<'py, PyTuple>> {
    let items = modes
        .iter()
        .map(|m| match m {
            Mode::Leaf(v) => Ok(v.into_pyobject(py)?.into_any()),
            Mode::Nested(n) => Ok(modes_to_py(py, n.children())?.into_any()),
            _ => Err(PyValueError::new_err("unsupported mode node")),
        })
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, items)
}

/// Parse one element: an int (bools count as 0/1), a list/tuple (nested mode) or a
/// same-class tree. `same` recognises the same class and returns its tree.
fn parse_element(
    obj: &Bound<'_, PyAny>,
    cls: &str,
    same: &dyn Fn(&Bound<'_, PyAny>) -> Option<IntTree>,
    depth: usize,
) -> PyResult<Mode> {
    if depth > MAX_NESTING {
        return Err(PyValueError::new_err(format!("{cls} nesting deeper than {MAX_NESTING} levels")));
    }
    if obj.is_instance_of::<PyInt>() {
        return obj
            .extract::<i64>()
            .map(Mode::Leaf)
            .map_err(|_| PyOverflowError::new_err(format!("{cls} element {obj} is outside signed 64 bits")));
    }
    let children: Vec<Mode> = if let Ok(t) = obj.cast::<PyTuple>() {
        t.iter().map(|e| parse_element(&e, cls, same, depth + 1)).collect::<PyResult<_>>()?
    } else if let Ok(l) = obj.cast::<PyList>() {
        l.iter().map(|e| parse_element(&e, cls, same, depth + 1)).collect::<PyResult<_>>()?
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
    Mode::nested(children).map_err(|_| PyValueError::new_err(format!("{cls} has an empty nested mode")))
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
            t.iter().map(|e| parse_element(&e, cls, same, 1)).collect::<PyResult<_>>()?
        } else if let Ok(l) = only.cast::<PyList>() {
            l.iter().map(|e| parse_element(&e, cls, same, 1)).collect::<PyResult<_>>()?
        } else {
            vec![parse_element(&only, cls, same, 1)?]
        }
    } else {
        items.iter().map(|e| parse_element(&e, cls, same, 1)).collect::<PyResult<_>>()?
    };
    Ok(IntTree::new(top))
}

// Shape and Stride share everything but validation and Shape's size/decode/encode.
macro_rules! tree_class {
    ($py:ident, $core:ident, $name:literal, { $($extra:tt)* }) => {
        #[doc = concat!("Immutable hierarchical `", $name, "` tree (docs/spec/layout-and-dtype.md §2).")]
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
                argument(obj, &format!(concat!("{} operand must be a ", $name), what))
                    .map_err(PyTypeError::new_err)
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
                select_modes(&self.inner, key, $name).map(Self::from_core)
            }

            fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                iter_modes(py, &self.inner, Self::from_core)
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
                let same = other.cast::<$py>().ok();
                compare(other.py(), &self.inner, same.map(|o| &o.get().inner), op)
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
            return Err(PyTypeError::new_err(format!("Shape.decode ordinal must be an int, got {}", type_name(i))));
        }
        let k = i
            .extract::<i64>()
            .map_err(|_| PyValueError::new_err(format!("Shape.decode ordinal {i} is outside [0, size)")))?;
        let coord = self.inner.decode(k).map_err(error::layout)?;
        coord_to_py(py, &coord)
    }

    /// Ordinal of a hierarchical coordinate (inverse of `decode`; an int may replace any subtree).
    fn encode(&self, c: &Bound<'_, PyAny>) -> PyResult<i64> {
        walk_key(c, |key| self.inner.encode(key))
    }
});

tree_class!(PyStride, Stride, "Stride", {});
