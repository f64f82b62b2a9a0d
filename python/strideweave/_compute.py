"""Fresh Tensors computed from others: sums, products, scalings, copies, fills, scatter-adds
and totals, the arithmetic every operation and every gradient goes through.

Each function computes with the Rust kernels (`_native.binary_f32`, `unary_f32`, `sum_f32`)
when every operand is CPU Float32 storage and the result's carrier class is CPU, and
elementwise in Python through the public carrier protocol otherwise (Generic, and framework
plumbing such as accumulating a gradient into a FileBacked leaf). Results are fresh storage
of the exact class of a `like` carrier, at offset 0.
"""
from __future__ import annotations

from typing import Any, Sequence

from strideweave import _native
from strideweave.layout import Layout
from strideweave.tensor import Tensor

__all__: list[str] = []  # internal module: the public names live in strideweave.operation


def check_live(t: Any, what: str = "tensor") -> None:
    if t._carrier.is_released():
        raise RuntimeError(f"{what}: its {type(t._carrier).__name__} carrier is released")


def _host_f32(carrier: Any) -> Any:
    """The CPU Float32 Rust storage of a live built-in carrier, else None."""
    get = getattr(carrier, "_sw_storage", None)
    if get is None:
        return None
    st = get()
    if isinstance(st, _native.HostStorage) and st.kind == "f32":
        return st
    return None


def _rust_output(like: Any) -> bool:
    """Whether fresh storage of `like`'s class holds CPU Float32 slots the kernels can write."""
    from strideweave.carriers.cpu import CPU
    from strideweave.carriers.dtype import DType

    return isinstance(like, CPU) and like.dtype() is DType.Float32


def _flat_indices(offset: int, extents: Sequence[int], strides: Sequence[int]) -> list[int]:
    """Slot index of every coordinate in canonical order (first leaf fastest)."""
    idx = [offset]
    for e, s in zip(extents, strides):
        if e == 1:
            continue
        idx = [i + j * s for j in range(e) for i in idx]
    return idx


def _values(t: Any, what: str = "tensor") -> list:
    """Logical values of a one-subtensor Tensor in canonical coordinate order."""
    check_live(t, what)
    lay = t._layout
    idx = _flat_indices(t._offset, lay.leaf_shape, lay.leaf_stride)
    st = _host_f32(t._carrier)
    if st is not None:
        slots = st.to_list()
        return [slots[i] for i in idx]
    c = t._carrier
    return [c[i] for i in idx]


def _zero(like: Any) -> Any:
    from strideweave.carriers.dtype import storage_zero

    z = storage_zero(like.dtype())
    return 0.0 if z is None else z


def _from_values(like: Any, layout: Layout, values: list) -> Any:
    """A fresh Tensor of `like`'s exact class at offset 0 holding `values` (canonical order)
    under `layout`; slots the layout does not address hold 0."""
    if layout.cosize == len(values) and layout == Layout.canonical(layout.shape):
        slots = values
    else:
        slots = [_zero(like)] * layout.cosize
        for i, v in zip(_flat_indices(0, layout.leaf_shape, layout.leaf_stride), values):
            slots[i] = v
    return Tensor(like.new_like(slots), 0, layout)


def _fresh_rust(like: Any, layout: Layout) -> tuple[Any, Any]:
    # A compact injective layout addresses every slot, so the kernel overwrites them all and
    # zero-filling first would only cost a pass over memory; gapped layouts need the zeros.
    covered = layout.cosize == layout.size and layout.is_injective()
    carrier = like.allocate_like(layout.cosize, empty=covered)
    return carrier, carrier._sw_storage()


def _operand(storage: Any, t: Any) -> tuple[Any, int, list[int]]:
    """`t` as a kernel operand: its Rust storage, element offset and leaf strides."""
    return (storage, t._offset, list(t._layout.leaf_stride))


def binary(op: str, a: Any, b: Any, like: Any, layout: Layout) -> Any:
    """Fresh Tensor (class of `like`, `layout`) holding a[c] op b[c]; op is "add" or "mul"."""
    check_live(a, "first operand")
    check_live(b, "second operand")
    if a._layout.shape != b._layout.shape or a._layout.shape != layout.shape:
        raise ValueError(f"shapes differ: {a._layout.shape!r} and {b._layout.shape!r}")
    sa, sb = _host_f32(a._carrier), _host_f32(b._carrier)
    if sa is not None and sb is not None and _rust_output(like):
        out, so = _fresh_rust(like, layout)
        _native.binary_f32(op, list(layout.leaf_shape), _operand(sa, a), _operand(sb, b), so,
                           list(layout.leaf_stride))
        return Tensor(out, 0, layout)
    xs, ys = _values(a), _values(b)
    if op == "add":
        vals = [x + y for x, y in zip(xs, ys)]
    else:
        vals = [x * y for x, y in zip(xs, ys)]
    return _from_values(like, layout, vals)


def scaled(a: Any, scalar: Any, like: Any, layout: Layout) -> Any:
    """Fresh Tensor holding a[c]·scalar."""
    check_live(a)
    sa = _host_f32(a._carrier)
    if sa is not None and _rust_output(like):
        out, so = _fresh_rust(like, layout)
        _native.unary_f32("scale", list(layout.leaf_shape), _operand(sa, a), so, list(layout.leaf_stride),
                          float(scalar))
        return Tensor(out, 0, layout)
    return _from_values(like, layout, [x * scalar for x in _values(a)])


def copy_to(a: Any, like: Any, layout: Layout) -> Any:
    """A detached copy of `a`'s logical values under `layout` in fresh `like`-class storage."""
    check_live(a)
    if a._layout.shape != layout.shape:
        raise ValueError(f"shape {a._layout.shape!r} does not match {layout.shape!r}")
    sa = _host_f32(a._carrier)
    if sa is not None and _rust_output(like):
        out, so = _fresh_rust(like, layout)
        _native.unary_f32("copy", list(layout.leaf_shape), _operand(sa, a), so, list(layout.leaf_stride))
        return Tensor(out, 0, layout)
    return _from_values(like, layout, _values(a))


def filled(scalar_source: Any, like: Any, layout: Layout) -> Any:
    """Fresh Tensor with every coordinate equal to element 0 of `scalar_source`."""
    check_live(scalar_source)
    first = scalar_source._offset + scalar_source._layout.index(0)
    sa = _host_f32(scalar_source._carrier)
    if sa is not None and _rust_output(like):
        out, so = _fresh_rust(like, layout)
        n = len(layout.leaf_shape)
        _native.unary_f32("copy", list(layout.leaf_shape), (sa, first, [0] * n), so, list(layout.leaf_stride))
        return Tensor(out, 0, layout)
    v = scalar_source._carrier[first]
    return _from_values(like, layout, [v] * layout.size)


def scatter_add(a: Any, like: Any, size: int, strides: Sequence[int]) -> Any:
    """A fresh carrier of `like`'s class with `size` slots, slot Σ c·strides += a[c]."""
    check_live(a)
    sa = _host_f32(a._carrier)
    if sa is not None and _rust_output(like):
        out = like.allocate_like(size)
        _native.unary_f32("scatter_add", list(a._layout.leaf_shape), _operand(sa, a), out._sw_storage(),
                          list(strides))
        return out
    slots: list = [None] * size
    for i, v in zip(_flat_indices(0, a._layout.leaf_shape, strides), _values(a)):
        slots[i] = v if slots[i] is None else slots[i] + v
    zero = _zero(like)
    return like.new_like([zero if s is None else s for s in slots])


def total(a: Any) -> Any:
    """Sum over every logical coordinate (f64 accumulation then f32 rounding on CPU)."""
    check_live(a)
    sa = _host_f32(a._carrier)
    if sa is not None:
        return _native.sum_f32(list(a._layout.leaf_shape), _operand(sa, a))
    vals = _values(a)
    acc = vals[0]
    for v in vals[1:]:
        acc = acc + v
    return acc
