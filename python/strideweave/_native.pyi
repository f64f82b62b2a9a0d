"""Type stub of the compiled extension `strideweave._native` (crates/strideweave-py).

Public names are re-exported by the package (`Shape`, `Stride`, `Layout` via
`strideweave.layout`, `AwaitResult` via `strideweave.carriers.move`); everything else is
framework-internal and may change without notice. This is the only hand-written stub of the
package (the pure-Python modules carry inline annotations); `make typecheck` runs mypy's
stubtest, which checks it against the built module.

Layout API shape decisions: ``size``, ``cosize``, ``depth``, ``is_leaf``, ``leaf_shape``,
``leaf_stride``, ``profile``, ``top_level``, ``shape`` and ``stride`` are properties;
``is_injective()``, ``infix()``, ``index()``, ``decode()``, ``encode()``, ``broadcast_to()``,
``concat()``, ``append()`` and ``permute()`` are methods. Shape, Stride and Layout are
immutable (setting or deleting any attribute raises AttributeError), hashable, and compare
equal only to the same class with the same tree.
"""
import concurrent.futures
from types import GenericAlias
from typing import Any, Callable, Iterable, Iterator, NoReturn, Sequence, SupportsIndex, TypeVar, Union, final, overload

from typing_extensions import Self, disjoint_base

from strideweave.layout import Node
from strideweave.tensor import Tensor
from strideweave.carriers.base import Carrier
from strideweave.carriers.move_handle import AwaitMove

_T = TypeVar("_T")

# An element of a Shape/Stride constructor: int (bool counts as 0/1), nested list/tuple, or
# a same-class tree.
_Item = Union[int, Sequence["_Item"], "Shape", "Stride"]
# A nested tuple of ints as returned by ``top_level`` and ``Shape.decode``.
_NestedInts = tuple[Union[int, "_NestedInts"], ...]
# An index key: an int ordinal, or a list/tuple congruent with the shape where an int may
# replace any subtree. Bools are rejected (TypeError).
_Key = Union[int, Sequence["_Key"]]
_Profile = Union[int, Sequence["_Profile"]]
# A tiler nests as deep as the modes it meets (CuTe's tuple tilers).
_Tiler = Union["Layout", "Shape", int, Sequence[Union["_Tiler", None]]]
_ModePath = Union[int, Sequence[int]]
# A kernel's input operand: (storage, element offset, leaf strides).
_Operand = tuple["HostStorage", int, Sequence[int]]

__version__: str
__all__ = ["__version__", "Shape", "Stride", "Layout", "Tree", "NodeId", "HostStorage", "FileStorage", "dlpack_export",
           "dlpack_device", "AwaitResult", "new_completion", "submit_python", "engine_quiesce", "binary_f32", "unary_f32",
           "sum_f32", "BlockDeviceHandle", "read_element", "write_element",
           "_TensorBase", "_CarrierBase", "TransferProgress", "copy_span", "submit_span", "copy_layout", "submit_layout",
           "copy_spans", "submit_copy_spans", "copy_blocks", "submit_copy_blocks", "copy_storages",
           "submit_place_blocks", "release_storages", "FileSlab", "FileRegion", "copy_buffer_to_host",
           "configure_inline_move", "pending_move_refusal", "configure_initiate", "initiate", "Route", "cached_route", "route_generation", "remember_route", "forget_routes", "configure_move_entry", "move", "move_async",
           "MoveRollback", "count_active_profilers", "grad_enabled", "set_grad_enabled", "MoveCommit", "submit_prefault",
           "MoveRequest", "configure_move_request", "configure_element_access"]

class _IntTree:
    """What Shape and Stride share (stub only: at run time each is its own class, and
    ``Self`` is that class)."""

    def __new__(cls, *items: _Item) -> Self:
        """No items: rank 0. One item: the whole tree (an int gives rank 1, a list/tuple
        supplies the top-level modes). Several items: the top-level modes.

        Raises ValueError for a bad value, a bad element type or an empty nested mode, and
        OverflowError for an int outside signed 64 bits."""
    @property
    def top_level(self) -> _NestedInts:
        """The tree as a nested tuple of ints."""
    @property
    def depth(self) -> int:
        """1 if flat (rank 0 included), else 1 + the greatest child depth."""
    def __len__(self) -> int:
        """Rank: the number of top-level modes."""
    def __hash__(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    @overload
    def __getitem__(self, key: SupportsIndex, /) -> Self:
        """Top-level mode (a nested mode's children become the top level). IndexError out
        of range; TypeError for other key types."""
    @overload
    def __getitem__(self, key: slice, /) -> Self: ...
    def __iter__(self) -> Iterator[Self]: ...
    def concat(self, other: Self) -> Self:
        """``Cls.concat(a, b)``: the top-level modes of a, then of b. TypeError for another
        class."""
    def append(self, other: Self) -> Self:
        """``Cls.append(a, b)``: a if b is rank 0, the concat if b is a leaf, else b as one
        new last mode. TypeError for another class."""

@final
class Shape(_IntTree):
    """Immutable hierarchical tree of extents (each >= 1)."""

    @property
    def size(self) -> int:
        """Product of the extents (1 for rank 0). OverflowError beyond 2**63-1."""
    def decode(self, i: int) -> _NestedInts:
        """Coordinate of ordinal ``i`` (mixed radix, first mode fastest).
        TypeError for a non-int or bool; ValueError outside [0, size)."""
    def encode(self, c: _Key) -> int:
        """Inverse of ``decode``; an int may replace any subtree. Errors as for layout keys."""

@final
class Stride(_IntTree):
    """Immutable hierarchical tree of strides (each >= 0)."""

@final
class Layout:
    """Immutable hierarchical layout: a congruent Shape and Stride."""

    def __new__(cls, shape: Shape, stride: Stride) -> Self:
        """ValueError unless ``shape`` is a Shape, ``stride`` a Stride and they are congruent;
        OverflowError if the size or cosize exceeds 2**63-1."""
    @property
    def shape(self) -> Shape: ...
    @property
    def stride(self) -> Stride: ...
    def __len__(self) -> int:
        """Rank: the number of top-level modes."""
    def __iter__(self) -> Iterator["Layout"]:
        """``layout[0]``, ``layout[1]``, …"""
    @overload
    def __getitem__(self, key: SupportsIndex, /) -> "Layout":
        """``Layout(shape[key], stride[key])``: a selected nested mode's children become the
        top-level modes. IndexError out of range; TypeError for other key types."""
    @overload
    def __getitem__(self, key: slice, /) -> "Layout": ...
    @property
    def depth(self) -> int:
        """``shape.depth``."""
    @property
    def is_leaf(self) -> bool:
        """Rank 1 with an int mode."""
    def __call__(self, key: _Key) -> int:
        """Σ leaf coordinate × leaf stride. ValueError for out-of-range, negative, missing or
        extra components; TypeError for a bool anywhere or a non-int, non-list/tuple."""
    def index(self, key: _Key) -> int:
        """Same as ``layout(key)``."""
    @staticmethod
    def get_index(layout: "Layout", key: _Key) -> int:
        """Same as ``layout(key)``; ValueError if ``layout`` is not a Layout."""
    @property
    def size(self) -> int:
        """Number of coordinates (``shape.size``)."""
    @property
    def cosize(self) -> int:
        """1 + Σ (extent−1)·stride over the leaves: one past the greatest index reached."""
    @property
    def leaf_shape(self) -> tuple[int, ...]:
        """Leaf extents, depth-first, left to right."""
    @property
    def leaf_stride(self) -> tuple[int, ...]:
        """Leaf strides matching ``leaf_shape``."""
    def infix(self) -> list[tuple[int, int]]:
        """``(extent, stride)`` of every leaf, depth-first."""
    @property
    def profile(self) -> list[Node]:
        """A fresh depth-first list of Node markers (values ignored)."""
    def is_injective(self) -> bool:
        """True iff distinct coordinates give distinct indices (a method, not a property)."""
    def broadcast_to(self, target: Shape) -> "Layout":
        """Per leaf: equal extent keeps its stride, extent 1 takes the target extent with
        stride 0. TypeError for a non-Shape; ValueError for another profile or extent change."""
    @staticmethod
    def canonical(shape: Shape) -> "Layout":
        """The canonical injective layout: each leaf's stride is the product of the earlier
        leaves' extents. TypeError for a non-Shape."""
    def concat(self, other: "Layout") -> "Layout":
        """``Layout.concat(a, b)`` / ``a.concat(b)`` / ``a + b``: a's top-level modes, then
        b's. TypeError for a non-Layout operand."""
    def __add__(self, other: "Layout", /) -> "Layout": ...
    def __radd__(self, value: "Layout", /) -> "Layout": ...
    def append(self, other: "Layout") -> "Layout":
        """``Layout.append(a, b)``: a if b is rank 0, the concat if b is a leaf, else b's
        whole tree as one new last mode. TypeError for a non-Layout operand."""
    @overload
    def permute(self, *order: int) -> "Layout":
        """``Layout.permute(layout, *order)``: ``order[j]`` is the source top-level mode at
        j; variadic or one list/tuple. TypeError for a non-int entry (bools included);
        ValueError unless a permutation of range(rank)."""
    @overload
    def permute(self, order: Sequence[int], /) -> "Layout": ...
    def __hash__(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    # The CuTe algebra (layout-and-dtype.md §9). Each is an instance method, so
    # ``Layout.compose(a, b)`` and ``a.compose(b)`` are the same call. An unmet CuTe
    # precondition raises ValueError naming it (divisibility, injectivity, a tiler or profile
    # longer than the layout); a bad argument type raises TypeError naming the argument.
    def coalesce(self, profile: "Shape | _Profile | None" = None) -> "Layout":
        """Same function, fewest modes; with ``profile``, coalesce within each of its modes
        (an int there: that whole mode), keeping the modes past it."""
    def filter(self) -> "Layout":
        """Drop stride-0 and extent-1 modes, then coalesce."""
    def compose(self, other: "_Tiler") -> "Layout":
        """``self ∘ other`` (``(self∘other)(i) == self(other(i))``), shaped like ``other``: a
        Layout, a Shape (its compact layout), an int n (``n:1``), or a tuple of those (None
        keeps a mode) applied mode by mode."""
    def complement(self, cotarget: int | None = None) -> "Layout":
        """The layout that fills ``[0, cotarget)`` (default: the cosize) with what this
        layout's image leaves out."""
    def divide(self, tiler: "_Tiler") -> "Layout":
        """Logical divide ``self ∘ (tiler, complement(tiler, self.size))``; a tuple divides
        mode by mode."""
    def zipped_divide(self, tiler: "_Tiler") -> "Layout":
        """The divide as ``((tile modes…), (rest modes…))``."""
    def tiled_divide(self, tiler: "_Tiler") -> "Layout":
        """The divide as ``((tile modes…), rest mode, rest mode, …)``."""
    def product(self, tiler: "_Tiler") -> "Layout":
        """Logical product ``(self, complement(self, self.size * tiler.cosize) ∘ tiler)``."""
    def blocked_product(self, other: "Layout | Shape | int") -> "Layout":
        """The product with mode i ``(self[i], repeat[i])``, coalesced."""
    def raked_product(self, other: "Layout | Shape | int") -> "Layout":
        """The product with mode i ``(repeat[i], self[i])``, coalesced."""
    def right_inverse(self) -> "Layout":
        """R with ``self(R(i)) == i`` for every i in ``range(R.size)``."""
    def left_inverse(self) -> "Layout":
        """L with ``L(self(i)) == i`` for every i in ``range(self.size)``; ValueError unless
        injective, or where no layout built from the complement to the cosize covers the
        whole image (stride divisibility)."""
    def rearrange(self, output: "Tree | NodeId", selection: Sequence[_ModePath] | None = None) -> "Layout":
        """The hierarchy ``output`` describes, built from sublayouts: by default the top-level
        modes; with ``selection``, sublayout n is the mode path ``selection[n]`` names (an int
        is a top-level mode, a tuple of ints steps into nested modes, ``()`` is the whole
        layout). ``Node.id(n)`` is sublayout n, ``Node.Leaf`` a ``1:0`` mode, a ``Tree`` a
        nested mode. ValueError for an id or path outside what exists; TypeError for other
        argument types."""
    def uniform_preimage_extent(self, target: "Shape | int") -> int | None:
        """k if this layout provably maps exactly k coordinates onto each index of
        ``[0, target.size)`` (its stride-0 leaves repeat a bijection onto that range), else
        None."""

@final
class NodeId:
    """``Node.id(n)``: the n-th sublayout of a ``Layout.rearrange`` selection."""
    def __new__(cls, index: int) -> Self:
        """TypeError unless an int (bools refused); ValueError if negative."""
    @property
    def index(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Tree:
    """``Tree(*children)``: a nested mode of ``Layout.rearrange``'s output; each child is a
    ``Tree``, ``Node.id(n)`` or ``Node.Leaf`` (a ``1:0`` mode). ValueError with no child;
    TypeError for another child type."""
    def __new__(cls, *children: "Tree | NodeId | Node") -> Self: ...
    @property
    def children(self) -> tuple["Tree | NodeId | Node", ...]: ...
    def __len__(self) -> int: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@disjoint_base
class AwaitResult(concurrent.futures.Future[_T]):
    """Read-only completion handle: `done` turns True at the terminal outcome; `wait()` blocks
    (GIL released) and returns the same object, or raises the same exception, every time.
    `wait(timeout)`/`exception(timeout)` raise TimeoutError after `timeout` seconds and leave
    the handle usable; `add_done_callback(fn)` runs `fn(handle)` exactly once; `future()` is
    a `concurrent.futures.Future` of the outcome (for `asyncio.wrap_future`; the spec forbids
    `__await__`). The handle itself works with `concurrent.futures.wait`/`as_completed`;
    `result(timeout)` is `wait(timeout)`; `cancel()` returns False (the work started with the
    handle).

    For type checkers a handle is a `concurrent.futures.Future`, so `concurrent.futures.wait`
    and `as_completed` accept it; two differences remain, both the specification's: `done` is
    a property (interop-movement.md: "the done: bool property"), not a method, and the
    completing methods (`set_result`, `set_exception`, `set_running_or_notify_cancel`) raise
    RuntimeError, since only the operation that made a handle completes it."""
    @property
    def done(self) -> bool: ...  # type: ignore[override]  # the spec's property, not Future.done()
    @property
    def _progress(self) -> TransferProgress | None: ...
    def wait(self, timeout: float | None = None) -> _T: ...
    def result(self, timeout: float | None = None) -> _T: ...
    def exception(self, timeout: float | None = None) -> BaseException | None: ...
    def cancel(self) -> bool: ...
    def cancelled(self) -> bool: ...
    def running(self) -> bool: ...
    def set_result(self, result: object) -> NoReturn: ...
    def set_exception(self, exception: BaseException | None) -> NoReturn: ...
    def set_running_or_notify_cancel(self) -> NoReturn: ...
    def add_done_callback(self, fn: Callable[["AwaitResult[_T]"], object]) -> None: ...
    def future(self) -> concurrent.futures.Future[_T]: ...
    # `_condition`, `_waiters` and `_state` (the waiter protocol of `concurrent.futures.wait`)
    # are read-only properties at run time; the stub inherits Future's declarations of them.
    def __class_getitem__(cls, item: Any) -> GenericAlias: ...
    def _succeed(self, value: Any) -> bool: ...
    def _fail(self, exc: BaseException) -> bool: ...
    def _add_done_callback(self, fn: Callable[["AwaitResult[_T]"], Any]) -> None: ...
    def _join(self, timeout: float | None = None) -> bool: ...

@disjoint_base
class _TensorBase:
    """Native base of `strideweave.Tensor`: its fields (set once by `_sw_init_view` or
    `_sw_init_multi`), element access, and the DLPack protocol methods, implemented in Rust
    so a consumer's call never runs Python code for a built-in carrier."""
    def __new__(cls, *_args: Any, **_kwargs: Any) -> Self: ...
    def _sw_init_view(self, carrier: Any, offset: int, layout: Layout, dtype: Any) -> None: ...
    def _sw_init_multi(self, subtensors: tuple[Any, ...], dtype: Any, adjacent: tuple[Any, ...]) -> None: ...
    def _is_multi(self) -> bool: ...
    @property
    def _carrier(self) -> Any: ...
    @property
    def _offset(self) -> int: ...
    @property
    def _layout(self) -> Layout: ...
    @property
    def _dtype(self) -> Any: ...
    @property
    def _adjacent(self) -> tuple[Any, ...]: ...
    @property
    def _subtensors(self) -> tuple[Any, ...]: ...
    _grad: Any
    _autograd_ctx: Any
    _retain_grad: Any
    _sw_grant: Any
    def __getitem__(self, key: Any, /) -> Any: ...
    def __setitem__(self, key: Any, value: Any, /) -> None: ...
    def __dlpack__(self, stream: Any = None, *, max_version: tuple[int, int] | list[int] | None = None,
                   dl_device: tuple[int, int] | list[int] | None = None, copy: bool | None = None) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...

@disjoint_base
class _CarrierBase:
    """Native base of `strideweave.Carrier`: the framework state every carrier shares."""
    def __new__(cls, *_args: Any, **_kwargs: Any) -> Self: ...
    _sw_version: int
    _sw_released: bool
    _sw_owner: Any
    _sw_claim: Any
    _storage: Any
    _mutable: bool
    # The state transitions (one step of the core's state cell each); `active` is the claim of
    # the move running on this thread, `releasing` the marker a release holds during its hook.
    @staticmethod
    def _sw_take_claims(claim: object, entries: Sequence[tuple[_CarrierBase, str, str]],
                        active: object | None, releasing: object) -> None: ...
    def _sw_take_claim(self, claim: object, action: str, active: object | None, releasing: object) -> None: ...
    def _sw_adopt(self, owner: object, active: object | None, releasing: object) -> bool: ...
    def _sw_disown(self, owner: object) -> bool: ...
    def _sw_drop_claim(self, claim: object) -> None: ...
    def _sw_check_claim(self, action: str, active: object | None, releasing: object) -> None: ...
    def _sw_begin_release(self, active: object | None, releasing: object,
                          owner: object | None = None) -> tuple[bool, object | None]: ...
    def _sw_finish_release(self, saved: object | None) -> None: ...
    def _sw_abort_release(self, saved: object | None) -> None: ...
    def _sw_mutate(self, active: object | None, releasing: object) -> None: ...
    def _sw_count_write(self) -> bool: ...
    def _sw_open_write(self, active: object | None, releasing: object, owner: object | None = None,
                       any_owner: bool = False) -> None: ...
    def _sw_close_write(self, count: bool) -> bool: ...

_A = TypeVar("_A", bound=AwaitResult[Any])

def new_completion(cls: type[_A]) -> _A: ...
def engine_quiesce(timeout_seconds: float, stop_logging: bool = False) -> bool: ...
def submit_python(handle: AwaitResult[Any] | None, job: Callable[[], Any]) -> None: ...

_Then = Callable[[BaseException | None], Any]

_Storage = HostStorage | FileStorage

def copy_span(src: _Storage, src_slot: int, dst: _Storage, dst_slot: int, count: int) -> None: ...
def submit_span(src: _Storage, src_slot: int, dst: _Storage, dst_slot: int, count: int, then: _Then, *,
                progress: TransferProgress | None = None, commit: MoveCommit | None = None) -> None: ...

@final
class TransferProgress:
    def __new__(cls) -> Self: ...
    @property
    def done(self) -> int: ...
    @property
    def total(self) -> int: ...
    def set(self, done: int, total: int) -> None: ...
def copy_layout(src: HostStorage, src_offset: int, dst: HostStorage, dst_offset: int, leaf_extents: Sequence[int],
                leaf_strides: Sequence[int]) -> None: ...
def submit_layout(src: HostStorage, src_offset: int, dst: HostStorage, dst_offset: int, leaf_extents: Sequence[int],
                  leaf_strides: Sequence[int], then: _Then, *, commit: MoveCommit | None = None) -> None: ...

@final
class HostStorage:
    def __new__(cls, kind: str, count: int, zeroed: bool = True) -> Self: ...
    @staticmethod
    def many(kind: str, count: int, number: int, zeroed: bool = True) -> list["HostStorage"]: ...
    @staticmethod
    def wrap(kind: str, pointer: int, count: int) -> "HostStorage": ...
    @property
    def kind(self) -> str: ...
    @property
    def count(self) -> int: ...
    def pointer(self) -> int: ...
    def is_owned(self) -> bool: ...
    def is_released(self) -> bool: ...
    def release(self) -> None: ...
    def get(self, index: int) -> Any: ...
    def set(self, index: int, value: Any) -> None: ...
    def set_values(self, values: Any) -> None: ...
    def to_list(self) -> list[Any]: ...

class _FileSlots:
    """What a file-backed slot storage offers (FileStorage, and FileRegion, one region of a
    FileSlab); a stub-only base that says it once."""
    @property
    def kind(self) -> str: ...
    @property
    def path(self) -> Any: ...
    @property
    def count(self) -> int: ...
    def is_released(self) -> bool: ...
    def release(self) -> None: ...
    def get(self, index: int) -> Any: ...
    def set(self, index: int, value: Any) -> None: ...
    def to_list(self) -> list[Any]: ...

@final
class FileStorage(_FileSlots):
    def __new__(cls, path: str, kind: str) -> Self: ...
    def fileno(self) -> int: ...
    def resize(self, count: int) -> None: ...
    def assign_values(self, values: Any) -> None: ...

# file_slab.rs: one file cut into equal regions (a FileBacked tier's tiles); a region is a
# fixed-size storage over its own slots of the file.
@final
class FileSlab:
    def __new__(cls, path: str, kind: str, region_slots: int) -> Self: ...
    @property
    def path(self) -> Any: ...
    @property
    def kind(self) -> str: ...
    @property
    def region_slots(self) -> int: ...
    @property
    def live(self) -> int: ...
    def is_creator(self) -> bool: ...
    def allocate(self, count: int) -> list["FileRegion"]: ...

@final
class FileRegion(_FileSlots):
    pass

@final
class BlockDeviceHandle:
    def __new__(cls, path: str) -> Self: ...
    path: str
    capacity_bytes: int
    logical_block_size: int
    physical_block_size: int
    allocation_alignment: int
    direct_io: bool
    def is_closed(self) -> bool: ...
    def is_faulted(self) -> bool: ...
    def fault_reason(self) -> str | None: ...
    def close(self) -> None: ...
    def fileno(self) -> int: ...
    def allocate(self, nbytes: int, zero: bool) -> tuple[int, int]: ...
    def free(self, offset: int, length: int | None = None) -> None: ...
    def live_extents(self) -> list[tuple[int, int]]: ...
    def read_f32(self, byte_off: int) -> float: ...
    def write_f32(self, byte_off: int, value: float) -> None: ...
    def read_into(self, storage: HostStorage, storage_byte_off: int, byte_off: int, nbytes: int) -> None: ...
    def write_from(self, storage: HostStorage, storage_byte_off: int, byte_off: int, nbytes: int) -> None: ...
    def write_values(self, byte_off: int, values: Iterable[float | None]) -> None: ...
    def read_values(self, byte_off: int, count: int) -> list[float]: ...
    def read_bytes(self, byte_off: int, nbytes: int) -> bytes: ...
    def write_bytes(self, byte_off: int, data: bytes) -> None: ...

def read_element(storage: HostStorage | FileStorage, offset: int, layout: Layout, key: Any) -> Any: ...
def write_element(carrier: Any, offset: int, layout: Layout, key: Any, value: Any) -> bool: ...
def dlpack_export(tensor: Any, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                  copy: Any = None) -> Any: ...
def dlpack_device(tensor: Any) -> tuple[int, int]: ...
def binary_f32(op: str, extents: Sequence[int], a: _Operand, b: _Operand, out: HostStorage,
               out_strides: Sequence[int]) -> None: ...
def unary_f32(op: str, extents: Sequence[int], a: _Operand, out: HostStorage, out_strides: Sequence[int],
              scalar: float | None = None) -> None: ...
def sum_f32(extents: Sequence[int], a: _Operand) -> float: ...

# tiles.rs: batched span copies between built-in storages (ranges checked before any write);
# a FileRegion's slots are its own window of its slab's file.
_TileStorage = HostStorage | FileStorage | FileRegion

def copy_spans(spans: Iterable[tuple[_TileStorage, int, _TileStorage, int, int]]) -> None: ...
def submit_copy_spans(spans: Iterable[tuple[_TileStorage, int, _TileStorage, int, int]], then: _Then) -> None: ...
def copy_blocks(blocks: Iterable[tuple[_TileStorage, int, _TileStorage, int]], block_shape: Sequence[int],
                src_shape: Sequence[int], dst_shape: Sequence[int]) -> None: ...
def submit_copy_blocks(blocks: Iterable[tuple[_TileStorage, int, _TileStorage, int]], block_shape: Sequence[int],
                       src_shape: Sequence[int], dst_shape: Sequence[int], then: _Then) -> None: ...
def copy_storages(sources: Iterable[_TileStorage], destinations: Iterable[_TileStorage], count: int) -> None: ...
def submit_place_blocks(sources: Iterable[_TileStorage], destination: _TileStorage, offsets: Sequence[int],
                        block_shape: Sequence[int], dst_shape: Sequence[int], then: _Then) -> None: ...
def release_storages(storages: Iterable[HostStorage | FileRegion]) -> None: ...
# buffer_copy.rs: a checked bulk copy from any C-contiguous buffer object (GIL released).
def copy_buffer_to_host(source: Any, source_byte: int, destination: HostStorage, destination_byte: int,
                        nbytes: int) -> None: ...
# prefault.rs: fault a range in (MADV_POPULATE_WRITE, no byte changes) on a copy worker, then then(None).
def submit_prefault(storage: HostStorage, byte_start: int, nbytes: int, then: _Then) -> None: ...

# The native moves (inline_move.rs, async_move.rs) and the per-thread grad mode they read.
def configure_inline_move(config: dict[str, Any]) -> None: ...
@final
class Route:
    """How one exact (source class, destination class) pair moves, resolved once from the
    Python registries and cached natively until a registry changes (routes.rs)."""
    def __new__(cls, operation_class: type | None = None, decision: Any = None, refusal: str | None = None,
                native: bool = False) -> Self: ...
    @property
    def operation_class(self) -> type | None: ...
    @property
    def decision(self) -> Any: ...
    @property
    def refusal(self) -> str | None: ...
    @property
    def native(self) -> bool: ...
    def check_permitted(self) -> Route: ...

def pending_move_refusal(carrier: str, action: str) -> RuntimeError: ...
def configure_initiate(hooks: dict[str, Any]) -> None: ...
def initiate(tensor: Any, destination: Any, *, between_tiers: bool = False, route: Route | None = None,
             operation: Any = None, attach: bool = True) -> MoveRequest: ...
def cached_route(source: type, destination: type) -> Route | None: ...
def route_generation() -> int: ...
def remember_route(source: type, destination: type, route: Route, generation: int) -> Route: ...
def forget_routes() -> None: ...
def count_active_profilers(delta: int) -> None: ...
def grad_enabled() -> bool: ...
def set_grad_enabled(enabled: bool) -> bool: ...
def configure_move_entry(config: dict[str, Any]) -> None: ...
def move(tensor: "Tensor", destination: "Carrier") -> "Tensor":
    """Blocking move of ``tensor`` into ``destination``: exactly
    ``move_async(tensor, destination).wait()``. Validation and route errors raise before any
    effect; a failed transfer raises its error with the source live and the destination
    unclaimed."""
def move_async(tensor: "Tensor", destination: "Carrier") -> "AwaitMove":
    """Validate one move, submit every transfer that can start, and return its handle
    without waiting. Validation and route errors raise here and return no handle."""

@final
class MoveRollback:
    """The failure end of a natively initiated move (the worker's `then`); made natively only."""
    def __call__(self, error: BaseException | None) -> None: ...

@final
class MoveCommit:
    """The GIL-free success commit of a built-in move, run by the worker that finished its copy."""
    def __new__(cls, source: _CarrierBase, destination: _CarrierBase, handle: AwaitResult[Any], output: Any,
                progress: TransferProgress | None = None) -> Self: ...

# The move request of every move the native moves do not take whole (move_request.rs).
def configure_move_request(hooks: dict[str, Any]) -> None: ...
def configure_element_access(hooks: dict[str, Any]) -> None: ...

@final
class MoveRequest:
    """One move from its checks to its one terminal commit; also the claim its carriers hold."""
    def __new__(cls, tensor: Any, destination: _CarrierBase, between_tiers: bool) -> Self: ...
    @staticmethod
    def check(tensor: Any, destination: Any, between_tiers: bool,
              resolve: Callable[[], tuple[Any, Any, bool]]) -> tuple[Any, Any, bool, bool]: ...
    @property
    def tensor(self) -> Any: ...
    # The carriers are `Carrier`s and the handle an `AwaitMove` (classes of the layers above).
    @property
    def source(self) -> Any: ...
    @property
    def destination(self) -> Any: ...
    @property
    def layout(self) -> Any: ...
    @property
    def cosize(self) -> int: ...
    @property
    def handle(self) -> Any: ...
    @property
    def between_tiers(self) -> bool: ...
    @property
    def committed(self) -> bool: ...
    node: Any
    recorded: Any
    token: Any
    output: Any
    prepared: Any
    open_destination: Any
    grown: bool
    def commit(self, error: BaseException | None = None) -> None: ...
    def abandon(self) -> None: ...
