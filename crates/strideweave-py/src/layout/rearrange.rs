//! `Tree` and `NodeId` (what `Node.id(n)` returns), the value types that describe the output
//! of `Layout.rearrange`, and the argument conversion of `rearrange` and
//! `uniform_preimage_extent` (docs/spec/layout-and-dtype.md §9, "Rearrange").
//!
//! Both classes are native and frozen so that a tree is validated once, at construction, and
//! `rearrange` reads it without calling back into Python.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::types::{PyInt, PyList, PyTuple};
use strideweave_core::layout::OutputTree;

use super::protocol::type_name;
use super::{node_members, PyLayout, PyShape};
use crate::error;

/// `Node.id(n)`: the n-th sublayout a `Layout.rearrange` selection extracts.
#[pyclass(frozen, eq, hash, module = "strideweave.layout", name = "NodeId")]
#[derive(PartialEq, Eq, Hash)]
pub struct PyNodeId {
    index: usize,
}

#[pymethods]
impl PyNodeId {
    #[new]
    fn new(index: &Bound<'_, PyAny>) -> PyResult<Self> {
        if !index.is_exact_instance_of::<PyInt>() {
            return Err(PyTypeError::new_err(format!("Node.id index must be an int, got {}", type_name(index))));
        }
        match index.extract::<usize>() {
            Ok(index) => Ok(PyNodeId { index }),
            Err(_) => Err(PyValueError::new_err(format!("Node.id index must be >= 0, got {index}"))),
        }
    }

    /// The sublayout's position in the selection.
    #[getter]
    fn index(&self) -> usize {
        self.index
    }

    fn __repr__(&self) -> String {
        format!("Node.id({})", self.index)
    }
}

/// One child of a `Tree`: kept as the Python object (for `children` and repr) and as the
/// core node it describes.
struct Child {
    object: Py<PyAny>,
    node: OutputTree,
}

/// `Tree(*children)`: a nested mode of `Layout.rearrange`'s output; each child is a `Tree`,
/// `Node.id(n)` or `Node.Leaf` (a `1:0` placeholder mode).
#[pyclass(frozen, module = "strideweave.layout", name = "Tree")]
pub struct PyTree {
    children: Vec<Child>,
}

impl PyTree {
    fn core(&self) -> OutputTree {
        OutputTree::Branch(self.children.iter().map(|c| c.node.clone()).collect())
    }
}

/// The core node `obj` describes, or None when it is neither a Tree, a NodeId nor Node.Leaf.
fn output_node(obj: &Bound<'_, PyAny>) -> PyResult<Option<OutputTree>> {
    if let Ok(t) = obj.cast::<PyTree>() {
        return Ok(Some(t.get().core()));
    }
    if let Ok(n) = obj.cast::<PyNodeId>() {
        return Ok(Some(OutputTree::Id(n.get().index)));
    }
    let leaf = node_members(obj.py())?[0].bind(obj.py());
    if obj.is(leaf) {
        return Ok(Some(OutputTree::Unit));
    }
    Ok(None)
}

#[pymethods]
impl PyTree {
    #[new]
    #[pyo3(signature = (*children))]
    fn new(children: &Bound<'_, PyTuple>) -> PyResult<Self> {
        if children.is_empty() {
            return Err(PyValueError::new_err("Tree needs at least one child"));
        }
        let mut out = Vec::with_capacity(children.len());
        for (i, c) in children.iter().enumerate() {
            let Some(node) = output_node(&c)? else {
                return Err(PyTypeError::new_err(format!(
                    "Tree child {i} must be a Tree, Node.id(n) or Node.Leaf, got {}",
                    if c.is_instance_of::<PyInt>() { c.repr()?.to_string() } else { type_name(&c) }
                )));
            };
            out.push(Child { object: c.unbind(), node });
        }
        Ok(PyTree { children: out })
    }

    /// The children, in order.
    #[getter]
    fn children<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.children.iter().map(|c| c.object.bind(py)))
    }

    fn __len__(&self) -> usize {
        self.children.len()
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> Py<PyAny> {
        let py = other.py();
        let Ok(o) = other.cast::<PyTree>() else {
            return py.NotImplemented();
        };
        let same = self.core() == o.get().core();
        match op {
            CompareOp::Eq => same.into_pyobject(py).map(|b| b.to_owned().into_any().unbind()),
            CompareOp::Ne => (!same).into_pyobject(py).map(|b| b.to_owned().into_any().unbind()),
            _ => return py.NotImplemented(),
        }
        .unwrap_or_else(|e: std::convert::Infallible| match e {})
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let mut h = DefaultHasher::new();
        "Tree".hash(&mut h);
        self.core().hash(&mut h);
        h.finish()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let parts = self
            .children
            .iter()
            .map(|c| {
                let b = c.object.bind(py);
                if matches!(c.node, OutputTree::Unit) {
                    Ok("Node.Leaf".to_owned())
                } else {
                    b.repr().map(|r| r.to_string())
                }
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(format!("Tree({})", parts.join(", ")))
    }
}

/// `rearrange`'s output: a Tree, or a NodeId for one sublayout alone.
pub(super) fn output_tree(obj: &Bound<'_, PyAny>) -> PyResult<OutputTree> {
    match obj.cast::<PyTree>() {
        Ok(t) => Ok(t.get().core()),
        Err(_) => match obj.cast::<PyNodeId>() {
            Ok(n) => Ok(OutputTree::Id(n.get().index)),
            Err(_) => Err(PyTypeError::new_err(format!(
                "rearrange output must be a Tree or Node.id(n), got {}",
                type_name(obj)
            ))),
        },
    }
}

/// One step of a selection path: an int ≥ 0.
fn path_step(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<usize> {
    if !obj.is_exact_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!("{what} must be an int or a tuple of ints, got {}", type_name(obj))));
    }
    obj.extract::<usize>().map_err(|_| PyValueError::new_err(format!("{what} must be >= 0, got {obj}")))
}

/// `rearrange`'s selection: None, or a sequence of mode paths (an int is a top-level mode; a
/// tuple or list of ints steps into nested modes; `()` is the whole layout).
pub(super) fn selection(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<Vec<usize>>>> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(None);
    };
    if !(obj.is_instance_of::<PyTuple>() || obj.is_instance_of::<PyList>()) {
        return Err(PyTypeError::new_err(format!(
            "rearrange selection must be a tuple or list of mode paths, got {}",
            type_name(obj)
        )));
    }
    let mut paths = Vec::new();
    for (i, p) in obj.try_iter()?.enumerate() {
        let p = p?;
        let what = format!("rearrange selection[{i}]");
        paths.push(if p.is_instance_of::<PyTuple>() || p.is_instance_of::<PyList>() {
            p.try_iter()?.map(|s| path_step(&s?, &what)).collect::<PyResult<_>>()?
        } else {
            vec![path_step(&p, &what)?]
        });
    }
    Ok(Some(paths))
}

impl PyLayout {
    /// The hierarchy `output` describes, built from the selected sublayouts.
    pub(super) fn alg_rearrange(
        &self,
        output: &Bound<'_, PyAny>,
        selection_arg: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyLayout> {
        let tree = output_tree(output)?;
        let paths = selection(selection_arg)?;
        self.core().rearrange(&tree, paths.as_deref()).map(PyLayout::from_core).map_err(error::layout)
    }

    /// k if every index of `[0, target.size)` has exactly k coordinates mapping onto it
    /// (provably), else None.
    pub(super) fn alg_uniform_preimage_extent(&self, target: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
        let size = if let Ok(s) = target.cast::<PyShape>() {
            s.get().core().size().map_err(error::layout)?
        } else if target.is_exact_instance_of::<PyInt>() {
            let n: i64 = target.extract().map_err(|_| {
                PyValueError::new_err(format!("uniform_preimage_extent target {target} is out of range"))
            })?;
            if n < 1 {
                return Err(PyValueError::new_err(format!("uniform_preimage_extent target must be >= 1, got {n}")));
            }
            n
        } else {
            return Err(PyTypeError::new_err(format!(
                "uniform_preimage_extent target must be a Shape or an int, got {}",
                type_name(target)
            )));
        };
        Ok(self.core().uniform_preimage_extent(size))
    }
}
