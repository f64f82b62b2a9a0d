"""The Tensor: a logical dtype over one or more subtensors (docs/spec/tensor-and-carriers.md §1).

A one-subtensor Tensor reads coordinate `c` at `carrier[offset + layout(c)]`. Views share
carrier objects; nothing here copies storage. Autograd state is stored on the Tensor but its
rules live in `strideweave._autograd`; DLPack export lives in Rust (`_native.dlpack_export`).
"""
from __future__ import annotations

import operator
from typing import Any, NoReturn

from strideweave import _native
from strideweave.carriers import _builtin
from strideweave.carriers.base import Carrier, not_a_carrier
from strideweave.carriers.dtype import DType
from strideweave.core import representation
from strideweave.core.representation import Subtensor
from strideweave.layout import Layout, Shape, Stride

__all__ = ["Tensor"]


class _Layers:
    """What the layers above this module install when they are imported: the autograd rules
    (`strideweave._autograd`) and the operator implementations (`strideweave.operation`).
    Tensor's autograd surface and its `+`/`*` delegate to them; `import strideweave` imports
    both, so they are set before any Tensor can be used."""

    autograd: Any = None
    operations: Any = None


LAYERS = _Layers()


def _rebuild_tensor(cls: type["Tensor"], subtensors: tuple[Subtensor, ...], dtype: DType,
                    adjacent: tuple[Any, ...]) -> "Tensor":
    return cls._from_subtensors(dtype, subtensors, adjacent)


def _multi_subtensor(operation: str) -> NotImplementedError:
    return NotImplementedError(f"{operation} is not implemented for a multi-subtensor Tensor")


class Tensor(_native._TensorBase):
    """A view of carrier slots through a hierarchical layout."""

    # The fields live in the native base (`_native._TensorBase`): `_carrier`, `_offset`,
    # `_layout`, `_dtype`, `_adjacent`, `_subtensors` (set once), and the autograd state
    # `_grad`, `_autograd_ctx`, `_retain_grad`. A Tensor has no instance dict.
    __slots__ = ()

    def __init__(self, carrier: Carrier, offset: int, layout: Layout) -> None:
        if not isinstance(carrier, Carrier):
            raise not_a_carrier("carrier", carrier)
        if not isinstance(layout, Layout):
            raise TypeError(f"layout must be a Layout, not {type(layout).__name__}")
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise TypeError(f"offset must be an int, not {type(offset).__name__}")
        if offset < 0:
            raise ValueError(f"offset must be non-negative, got {offset}")
        if carrier.is_released():
            raise RuntimeError(f"cannot build a Tensor over a released {type(carrier).__name__} carrier")
        span = offset + layout.cosize
        size = carrier.size()
        if span > size:
            raise ValueError(f"offset {offset} + layout cosize {layout.cosize} = {span} exceeds carrier size {size}")
        self._sw_init_view(carrier, offset, layout, carrier.dtype())

    @classmethod
    def _from_subtensors(cls, dtype: DType, subtensors: tuple[Subtensor, ...], adjacent: tuple[Any, ...]) -> "Tensor":
        """Framework constructor for validated representations (core.representation)."""
        tensor = cls.__new__(cls)
        tensor._sw_init_multi(subtensors, dtype, adjacent)
        return tensor

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles the view and the autograd state; the carrier pickles itself (or refuses, as
        a built-in's native storage does)."""
        return (_rebuild_tensor, (type(self), self._subtensors, self._dtype, self._adjacent),
                (self._grad, self._autograd_ctx, self._retain_grad))

    def __setstate__(self, state: tuple[Any, Any, Any]) -> None:
        self._grad, self._autograd_ctx, self._retain_grad = state

    # ----- queries ----------------------------------------------------------------------
    @property
    def carrier(self) -> Carrier:
        return self._carrier

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def layout(self) -> Layout:
        return self._layout

    @property
    def subtensors(self) -> tuple[Subtensor, ...]:
        return self._subtensors

    @property
    def adjacent_layouts(self) -> tuple[Any, ...]:
        return self._adjacent

    @property
    def version(self) -> int:
        return self._carrier.version

    def dtype(self) -> DType:
        return self._dtype

    def size(self) -> int:
        return self._layout.size

    def carrier_type(self) -> type[Carrier]:
        return type(self._carrier)

    def is_mutable(self) -> bool:
        return len(self._subtensors) == 1 and self._carrier.is_mutable()

    def version_snapshot(self) -> tuple[tuple[int, int], ...]:
        if not self._is_multi():  # one carrier (a recorded move snapshots this on every move)
            carrier = self._carrier
            return ((id(carrier), carrier.version),)
        seen: dict[int, Carrier] = {}
        for sub in self._subtensors:
            seen.setdefault(id(sub.carrier), sub.carrier)
        return tuple((key, carrier.version) for key, carrier in seen.items())

    def __repr__(self) -> str:
        if self._is_multi():
            return f"<Tensor {self._dtype.name} multi-subtensor x{len(self._subtensors)} size={self.size()}>"
        return (f"<Tensor {self._dtype.name} on {type(self._carrier).__name__} offset={self._offset} "
                f"layout={self._layout!r}>")

    def __str__(self) -> str:
        """The values, printed like NumPy prints `np.asarray(self)` (summarised with `...`
        beyond 1000 elements); the `repr` for a multi-subtensor or released tensor."""
        if self._is_multi() or self._carrier.is_released():
            return repr(self)
        from strideweave._format import format_values

        carrier, offset, strides = self._carrier, self._offset, self._layout.leaf_stride
        return format_values(self.shape, lambda c: carrier[offset + sum(map(int.__mul__, c, strides))],
                             self._dtype is DType.Float32)

    def __iter__(self) -> NoReturn:
        raise TypeError("Tensor is not iterable; index it or export it through DLPack")

    # ----- what array users reach for first -----------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The leaf extents, `layout.leaf_shape`: the flat shape NumPy, PyTorch and JAX see
        through DLPack and `np.asarray`, one axis per leaf mode, depth-first.

        A hierarchical layout is flattened here: `Shape([2, [3, 4]])` gives `(2, 3, 4)`. The
        hierarchical Shape itself is `layout.shape`; the number of logical coordinates is
        `size()`."""
        return self._layout.leaf_shape

    @property
    def ndim(self) -> int:
        """`len(shape)`: the number of leaf modes (0 for a rank-0 layout)."""
        return len(self._layout.leaf_shape)

    def _scalar(self, kind: str) -> Any:
        if self._is_multi():
            raise _multi_subtensor(f"{kind}()")
        if self._layout.size != 1:
            raise TypeError(f"only a one-element Tensor converts to a Python {kind}, "
                            f"this one has {self._layout.size} elements")
        return self[0]

    def __float__(self) -> float:
        """`float(t)` for a one-element tensor (TypeError otherwise)."""
        return float(self._scalar("float"))

    def __int__(self) -> int:
        """`int(t)` for a one-element tensor (TypeError otherwise); floats truncate."""
        return int(self._scalar("int"))

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> Any:
        """NumPy's array protocol (NumPy 2 semantics), so `np.asarray(t)` works.

        Without a copy this is the zero-copy view `np.from_dlpack(t)` gives (CPU carriers,
        Float32 and Int32). `copy=None` falls back to a copy of the logical values when no
        such view exists (another carrier or dtype) or `dtype` needs a conversion; `copy=False`
        raises ValueError instead; `copy=True` always returns a fresh array. A copy has
        `shape` and holds `t[k]` at the axis-0-fastest position of integer key `k`."""
        import numpy as np

        if self._is_multi():
            raise _multi_subtensor("__array__")
        view = None
        if copy is not True:
            try:
                view = np.from_dlpack(self)
            except BufferError as exc:  # the carrier or dtype cannot be exported
                if copy is False:
                    raise ValueError(f"np.asarray(copy=False) needs a zero-copy view, which this "
                                     f"Tensor cannot give: {exc}") from exc
        if view is not None:
            if dtype is None or np.dtype(dtype) == view.dtype:
                return view
            if copy is False:
                raise ValueError(f"np.asarray(copy=False) cannot convert {view.dtype} to "
                                 f"{np.dtype(dtype)} without a copy")
            return view.astype(dtype)
        values = np.array(self.tolist(), dtype=_numpy_dtype(self._dtype))
        values = values.reshape(self.shape, order="F")
        return values if dtype is None else values.astype(dtype, copy=False)

    def tolist(self) -> list[Any]:
        """The logical values in integer-key order (first mode fastest)."""
        if self._is_multi():
            raise _multi_subtensor("tolist")
        self._check_live()
        carrier, offset, layout = self._carrier, self._offset, self._layout
        return [carrier[offset + layout.index(k)] for k in range(layout.size)]

    # ----- element access and views -----------------------------------------------------
    def _check_live(self) -> None:
        if self._carrier.is_released():
            raise RuntimeError(f"{type(self._carrier).__name__} carrier is released")

    # `t[key]` and `t[key] = value` are native (`_native._TensorBase.__getitem__` /
    # `__setitem__`): a one-subtensor view over a built-in carrier class that keeps the
    # built-in element hooks is read and written in one Rust call; everything else comes
    # here, to the reference path, which runs the carrier's public hooks in the contract's
    # order.
    def _sw_getitem(self, key: Any) -> Any:
        if self._is_multi():
            raise _multi_subtensor("element access")
        if _has_slice(key):
            return self._slice_view(key)
        self._check_live()
        return self._carrier[self._offset + self._layout.index(_coordinate(key))]

    def _sw_setitem(self, key: Any, value: Any) -> None:
        if self._is_multi():
            raise _multi_subtensor("element assignment")
        if _has_slice(key):
            raise TypeError("slice assignment is not supported; assign elements one key at a time")
        self._check_live()
        slot = self._offset + self._layout.index(_coordinate(key))
        grant = self._sw_grant
        request = grant() if grant is not None else None
        if request is not None:
            # A Tensor a move handed its transfer: the move's claim admits its writes.
            self._carrier._sw_write_granted(slot, value, request)
        else:
            self._carrier[slot] = value

    def _slice_view(self, key: Any) -> "Tensor":
        self._check_live()
        entries = key if isinstance(key, tuple) else (key,)
        layout = self._layout
        rank = len(layout)
        if len(entries) != rank:
            raise ValueError(f"a slicing key needs one entry per top-level mode ({rank}), got {len(entries)}")
        shapes: list = []
        strides: list = []
        offset = self._offset
        for position, entry in enumerate(entries):
            mode = layout[position:position + 1]
            mode_shape = mode.shape.top_level[0]
            mode_stride: Any = mode.stride.top_level[0]  # an int unless the mode is nested
            if not isinstance(entry, (int, slice)) and hasattr(type(entry), "__index__"):
                entry = _index_like(entry, position)  # np.int64 and the like, as ints (issue 26)
            if isinstance(entry, bool) or not isinstance(entry, (int, slice)):
                raise TypeError(f"slicing key entry {position} must be an int or a slice, not {type(entry).__name__}")
            if isinstance(entry, int):
                if entry < 0 or entry >= mode.size:
                    raise ValueError(f"slicing key entry {position} = {entry} is outside [0, {mode.size})")
                offset += mode.index(entry)
                continue
            entry = slice(*(_index_like(part, position) if part is not None and not isinstance(part, int)
                            and hasattr(type(part), "__index__") else part
                            for part in (entry.start, entry.stop, entry.step)))
            for part in (entry.start, entry.stop, entry.step):
                if part is not None and (isinstance(part, bool) or not isinstance(part, int)):
                    raise TypeError(f"slice bounds of entry {position} must be ints or None")
            if isinstance(mode_shape, tuple):
                if entry != slice(None):
                    raise ValueError(f"nested mode {position} accepts only ':' or an int")
                shapes.append(mode_shape)
                strides.append(mode_stride)
                continue
            start, stop, step = entry.indices(mode_shape)
            if step <= 0:
                raise ValueError(f"slice step of entry {position} must be positive")
            extent = len(range(start, stop, step))
            if extent == 0:
                raise ValueError(f"slice of entry {position} selects nothing")
            offset += start * mode_stride
            shapes.append(extent)
            strides.append(mode_stride * step)
        view_layout = Layout(Shape(shapes), Stride(strides))
        return Tensor(self._carrier, offset, view_layout)

    def _broadcast_view(self, shape: Shape) -> "Tensor":
        """The raw broadcast view: same carrier and offset, widened extent-1 leaves get stride 0."""
        if self._is_multi():
            raise _multi_subtensor("broadcast_to")
        if not isinstance(shape, Shape):
            raise TypeError(f"shape must be a Shape, not {type(shape).__name__}")
        layout = self._layout.broadcast_to(shape)
        return Tensor(self._carrier, self._offset, layout)

    # ----- layout views (tensor-and-carriers.md §1.2): same carrier, no copy ---------------
    def _view(self, operation: str, layout: Layout, offset: int | None = None) -> "Tensor":
        self._check_live()
        if self._is_multi():
            raise _multi_subtensor(operation)
        return Tensor(self._carrier, self._offset if offset is None else offset, layout)

    def compose(self, layout: Any) -> "Tensor":
        """The view through ``self.layout ∘ layout`` (``Layout.compose``'s arguments)."""
        return self._view("compose", self._layout.compose(layout))

    def tile(self, tiler: Any) -> "Tensor":
        """The tiled view: ``zipped_divide`` of the layout, mode 0 within a tile and mode 1
        across tiles, so ``t.tile((2, 3))[:, k]`` is tile k."""
        return self._view("tile", self._layout.zipped_divide(tiler))

    def permute(self, *order: Any) -> "Tensor":
        """The view with the top-level modes reordered (``Layout.permute``'s arguments)."""
        return self._view("permute", self._layout.permute(*order))

    def reshape(self, shape: Any) -> "Tensor":
        """The view with ``shape`` in which ordinal k (first mode fastest) is still element
        k: ``layout ∘ Layout.canonical(shape)``. ValueError naming the reason where the sizes
        differ or the strides cannot express it without a copy."""
        if not isinstance(shape, Shape):
            if isinstance(shape, bool) or not isinstance(shape, (int, tuple, list)):
                raise TypeError(f"reshape shape must be a Shape, int, tuple or list, not {type(shape).__name__}")
            shape = Shape(shape)
        if shape.size != self._layout.size:
            raise ValueError(f"reshape shape {shape} has size {shape.size}, the tensor {self._layout.size}")
        try:
            layout = self._layout.compose(Layout.canonical(shape))
        except ValueError as e:
            raise ValueError(f"reshape to {shape} needs a copy: {e}") from None
        return self._view("reshape", layout)

    def squeeze(self, mode: int | None = None) -> "Tensor":
        """The view without the top-level modes of size 1 (all, or only ``mode``, which must
        have size 1)."""
        layout = self._layout
        rank = len(layout)
        if mode is None:
            keep = [i for i in range(rank) if layout[i].size != 1]
        else:
            if isinstance(mode, bool) or not isinstance(mode, int):
                raise TypeError(f"squeeze mode must be an int, not {type(mode).__name__}")
            if not -rank <= mode < rank:
                raise IndexError(f"squeeze mode {mode} out of range for rank {rank}")
            mode %= rank
            if layout[mode].size != 1:
                raise ValueError(f"squeeze mode {mode} has size {layout[mode].size}, not 1")
            keep = [i for i in range(rank) if i != mode]
        return self._view("squeeze", _select(layout, keep))

    def unsqueeze(self, position: int) -> "Tensor":
        """The view with a new extent-1 mode (stride 0) at top-level ``position``."""
        rank = len(self._layout)
        if isinstance(position, bool) or not isinstance(position, int):
            raise TypeError(f"unsqueeze position must be an int, not {type(position).__name__}")
        if not -rank - 1 <= position <= rank:
            raise IndexError(f"unsqueeze position {position} out of range for rank {rank}")
        position %= rank + 1
        lay = self._layout
        layout = lay[:position] + Layout(Shape(1), Stride(0)) + lay[position:]
        return self._view("unsqueeze", layout)

    def broadcast_in_dim(self, shape: Any, dims: Any) -> "Tensor":
        """JAX's ``broadcast_in_dim``: the view of flat ``shape`` where this tensor's mode i
        becomes output mode ``dims[i]`` (its extent equal to that of the output mode, or 1)
        and every other output mode has stride 0. ``dims`` must be strictly increasing."""
        extents = list(shape.top_level) if isinstance(shape, Shape) else list(shape) if isinstance(shape, (tuple, list)) else None
        if extents is None or any(isinstance(e, bool) or not isinstance(e, int) for e in extents):
            raise TypeError("broadcast_in_dim shape must be a flat Shape, tuple or list of ints")
        if not isinstance(dims, (tuple, list)) or any(isinstance(d, bool) or not isinstance(d, int) for d in dims):
            raise TypeError("broadcast_in_dim dims must be a tuple or list of ints")
        layout = self._layout
        if len(dims) != len(layout):
            raise ValueError(f"broadcast_in_dim dims has {len(dims)} entries, the tensor {len(layout)} modes")
        if any(not 0 <= d < len(extents) for d in dims) or list(dims) != sorted(set(dims)):
            raise ValueError(f"broadcast_in_dim dims {tuple(dims)} must be increasing indices into the shape")
        strides = [0] * len(extents)
        for i, d in enumerate(dims):
            mode = layout[i]
            if mode.size == 1:
                continue
            if mode.size != extents[d] or len(mode.coalesce()) != 1:
                raise ValueError(f"broadcast_in_dim mode {i} (size {mode.size}) cannot become output mode {d} "
                                 f"of extent {extents[d]}")
            strides[d] = mode.coalesce().leaf_stride[0]
        return self._view("broadcast_in_dim", Layout(Shape(extents), Stride(strides)))

    def as_strided(self, shape: Any, stride: Any, offset: int | None = None) -> "Tensor":
        """The view ``Layout(Shape(shape), Stride(stride))`` of the same carrier from ``offset``
        (default: this view's); ValueError where it reaches past the carrier."""
        layout = Layout(shape if isinstance(shape, Shape) else Shape(shape),
                        stride if isinstance(stride, Stride) else Stride(stride))
        return self._view("as_strided", layout, offset)

    # ----- DLPack: __dlpack__ and __dlpack_device__ are native methods of _TensorBase -----

    # ----- autograd surface (rules in strideweave._autograd) ------------------------------
    def is_differentiable(self) -> bool:
        return self._dtype is DType.Float32 or self._dtype is DType.Floating

    @property
    def grad(self) -> "Tensor | None":
        grad: Tensor | None = LAYERS.autograd.tensor_grad_get(self)
        return grad

    @grad.setter
    def grad(self, value: "Tensor | None") -> None:
        LAYERS.autograd.tensor_grad_set(self, value)

    @property
    def autograd_ctx(self) -> Any:
        return self._autograd_ctx

    @autograd_ctx.setter
    def autograd_ctx(self, value: Any) -> None:
        LAYERS.autograd.tensor_ctx_set(self, value)

    def retain_grad(self, retain: bool = True) -> None:
        LAYERS.autograd.tensor_retain_grad(self, retain)

    def backward(self, gradient: "Tensor | None" = None, retain_graph: bool = False, **kwargs: Any) -> None:
        LAYERS.autograd.tensor_backward(self, gradient, retain_graph, kwargs)

    def __add__(self, other: Any) -> "Tensor":
        result: Tensor = LAYERS.operations.add(self, other)
        return result

    def __mul__(self, other: Any) -> "Tensor":
        result: Tensor = LAYERS.operations.mul(self, other)
        return result

    def __rmul__(self, other: Any) -> "Tensor":
        result: Tensor = LAYERS.operations.mul(self, other)
        return result


representation.TENSOR_CLASS.append(Tensor)


def _numpy_dtype(dtype: DType) -> str | None:
    """The NumPy dtype of a copied Tensor; None lets NumPy infer one (Generic's objects)."""
    names: dict[DType, str] = {DType.Float32: "float32", DType.Int32: "int32", DType.Bool: "bool"}
    return names.get(dtype)


def _has_slice(key: Any) -> bool:
    if isinstance(key, slice):
        return True
    return isinstance(key, tuple) and any(isinstance(entry, slice) for entry in key)


def _index_like(entry: Any, position: int) -> int:
    """`operator.index(entry)`; a refusing `__index__` (numpy's bool) is the entry's TypeError."""
    try:
        return operator.index(entry)
    except TypeError:
        raise TypeError(f"slicing key entry {position} must be an int or a slice, "
                        f"not {type(entry).__name__}") from None


def _coordinate(key: Any) -> Any:
    """A lone int is a logical index; a tuple or list is a hierarchical coordinate."""
    return list(key) if isinstance(key, tuple) else key


def _select(layout: Layout, keep: list[int]) -> Layout:
    """The top-level modes ``keep`` of ``layout``, in order (rank 0 when none)."""
    out = Layout(Shape(), Stride())
    for i in keep:
        out = out + layout[i:i + 1]
    return out


# The functions the native element path calls, named here once so that a rename fails this
# import, not an access (the binding reads no private attribute by name).
_native.configure_element_access({
    "getitem": Tensor._sw_getitem, "setitem": Tensor._sw_setitem,
    "keeps_builtin_element_path": _builtin.keeps_builtin_element_path,
    "keeps_builtin_mutability": _builtin.keeps_builtin_mutability,
})
