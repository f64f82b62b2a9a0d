"""RayObjectCarrier: slots sealed in one object of Ray's object store (issue 14).

The object is the tuple `(PAYLOAD_TAG, dtype name, ndarray)`: a host buffer of slots plus the
dtype metadata, so a reader on any node can check what it fetched. Ray stores the ndarray out
of band, so `ray.get` on a node returns a read-only view of that node's object-store buffer
(fetched across nodes by Ray when needed) without copying it again.

Life cycle: `RayObjectCarrier(dtype=...)` is empty and publicly mutable, so it can be a move
destination. The move grows it (`_allocate`: the slot count, no storage yet), its transfer
seals it (`_sw_seal`: one `ray.put`), and from then on it is immutable: readable through
`carrier[i]`, exportable through DLPack as a read-only view of the local object-store buffer,
and never written again. `allocate_like(n, empty=True)` makes the same unsealed state with `n`
slots already (a TiledEvictable's eviction target), which a move of exactly `n` slots seals.

`release()` drops this carrier's reference and its local view; Ray frees the object when that
was the last reference anywhere (a task or actor that received the carrier borrows it). Ray
2.60 offers no supported way to free an object eagerly: `ray._private.internal_api.free` was
deprecated and then removed (ray-project/ray#64037), and the core worker exposes no free or
delete call, so reference counting is the mechanism.

As a TiledEvictable's secondary tier, each evicted tile is its own sealed object: it is read in
place, and writing it needs a promotion first (a sealed object is immutable). The carrier is a
`tiled_tiles.HostReadableTile` (a whole tile lands in a bare HostStorage with one native copy
from the local view, so `tiled.to_cpu` and projections read Ray tiles in bulk) and a
`tiled_tiles.ShareableTile` (a tier move's private copy shares the sealed object).
"""
from __future__ import annotations

import math
import threading
from typing import Any, Iterable

import numpy as np
import ray

from strideweave import _native
from strideweave.carriers.base import Carrier, check_factory_dtype, check_index, check_size_argument
from strideweave.carriers.dtype import STORAGE_KIND, DType, storage_zero
from strideweave.ray.errors import RayObjectLostError, describe, fetch_timeout, ray_call, require_ray

__all__ = ["RayObjectCarrier", "RayObjectLostError"]

PAYLOAD_TAG = "strideweave.RayObjectCarrier/1"
RAY_DTYPES = (DType.Float32, DType.Int32)
NUMPY_DTYPE: dict[DType, np.dtype[Any]] = {DType.Float32: np.dtype(np.float32), DType.Int32: np.dtype(np.int32)}




class RayObjectCarrier(Carrier):
    """Slots of one dtype (Float32 or Int32) sealed in a Ray object.

    Made empty by `RayObjectCarrier(dtype=...)`; a move from CPU grows, fills and seals it.
    `object_ref` is the sealed object's `ray.ObjectRef` (None while empty or released).
    """

    def __init__(self, *, dtype: DType = DType.Float32) -> None:
        check_factory_dtype(type(self), dtype, RAY_DTYPES)
        super().__init__()
        self._dtype = dtype
        self._slots = 0
        self._ref: Any = None
        self._array: np.ndarray | None = None
        self._exported = False
        self._lock = threading.Lock()
        self._seed_tiles: list[RayObjectCarrier] | None = None

    @classmethod
    def _sw_from_ref(cls, ref: Any, dtype: DType, slots: int) -> "RayObjectCarrier":
        """A sealed carrier over an existing object (unpickling, the factories)."""
        carrier = cls(dtype=dtype)
        carrier._slots = slots
        carrier._ref = ref
        return carrier

    # ----- identity ----------------------------------------------------------------------
    @property
    def object_ref(self) -> Any:
        """The sealed object's `ray.ObjectRef`, or None while empty or after release."""
        return None if self._sw_released else self._ref

    def is_sealed(self) -> bool:
        return self._ref is not None and not self._sw_released

    # ----- storage hooks -----------------------------------------------------------------
    def size(self) -> int:
        return 0 if self._sw_released else self._slots

    def dtype(self) -> DType:
        return self._dtype

    def _supports_storage_dtype(self, d: DType) -> bool:
        return d in RAY_DTYPES

    def _is_mutable(self) -> bool:
        # Only an unsealed carrier may receive a move; a sealed Ray object never changes.
        return self._ref is None

    def get_value(self, i: Any) -> Any:
        index = check_index(self, i)
        if self._ref is None:  # grown by a pending move, not filled yet: reads zero
            return storage_zero(self._dtype)
        return self._sw_local_array()[index].item()

    def set_value(self, i: Any, v: Any) -> None:
        check_index(self, i)
        raise RuntimeError(f"{type(self).__name__} carrier is not mutable: a Ray object is immutable "
                           "once sealed")

    def _sw_fill(self, i: int, v: Any) -> None:
        # Element-wise transfers (pairs other than CPU -> RayObjectCarrier) have no step that
        # could seal the object afterwards, so they fail here; the move then undoes its growth.
        raise NotImplementedError(f"{type(self).__name__} is filled only by a move from an exact CPU "
                                  "carrier (CpuToRayObjectMoveOperation)")

    def _allocate(self, size: int) -> None:
        """Grow an empty carrier to `size` slots for the move that will seal it; `0` undoes a
        failed move (drops whatever it sealed). No storage is made until the seal."""
        n = check_size_argument(size)
        if n == 0:
            self._drop_object()
            self._slots = 0
            return
        if self._ref is not None:
            raise RuntimeError(f"{type(self).__name__} is sealed and cannot grow")
        require_ray(f"move into a {type(self).__name__}")
        self._slots = n

    def _release(self) -> None:
        self._drop_object()

    def dlpack_info(self) -> dict[str, Any]:
        """A read-only (the carrier is immutable) CPU view of the local object-store buffer;
        pointer 0 once released, which DLPack refuses."""
        if self._sw_released or self._ref is None:
            return {"pointer": 0, "device_type": 1, "device_id": 0}
        array = self._sw_local_array()
        # A consumer keeps the exporting Tensor (so this carrier) alive: keep the mapping too,
        # even across release(), so an export never dangles.
        self._exported = True
        return {"pointer": array.ctypes.data, "device_type": 1, "device_id": 0}

    # ----- factories ---------------------------------------------------------------------
    def new_like(self, values: Iterable[Any], *, mutable: bool = True,
                 dtype: DType | None = None) -> "RayObjectCarrier":
        """A fresh sealed object holding `values` (None → 0). `mutable` is accepted for the
        factory signature, but a sealed Ray object is always immutable."""
        dtype = self._dtype if dtype is None else check_factory_dtype(type(self), dtype, RAY_DTYPES)
        try:
            items = list(values)
        except TypeError:
            raise TypeError(f"values must be iterable, not {type(values).__name__}") from None
        zero = storage_zero(dtype)
        array = _checked_array([zero if v is None else v for v in items], dtype)
        require_ray(f"create a {type(self).__name__}")
        return type(self)._sw_from_ref(put_payload(array, dtype), dtype, len(items))

    def allocate_like(self, size: int, *, mutable: bool = True, dtype: DType | None = None,
                      empty: bool = False) -> "RayObjectCarrier":
        """Size 0: a fresh empty carrier that a move can fill. `empty=True`: a fresh unsealed
        carrier of `size` slots (reading zero) that a move of exactly `size` slots from CPU
        fills and seals, which is how a TiledEvictable makes the tile an eviction lands in.
        Otherwise a fresh sealed object of zeros (immutable, whatever `mutable` says)."""
        n = check_size_argument(size)
        dtype = self._dtype if dtype is None else check_factory_dtype(type(self), dtype, RAY_DTYPES)
        fresh = type(self)(dtype=dtype)
        if n == 0:
            return fresh
        if empty:
            fresh._allocate(n)  # RuntimeError without Ray, as a move into it would raise
            return fresh
        require_ray(f"create a {type(self).__name__}")
        return type(self)._sw_from_ref(put_payload(np.zeros(n, NUMPY_DTYPE[dtype]), dtype), dtype, n)

    # ----- pickling: only the reference and metadata travel -------------------------------
    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if self._sw_released:
            raise RuntimeError(f"cannot pickle a released {type(self).__name__}")
        if self._ref is None:
            raise RuntimeError(f"cannot pickle an unsealed {type(self).__name__}: it holds no Ray object yet")
        return (_rebuild_carrier, (type(self), self._ref, self._dtype, self._slots))

    # ----- a seeding tier that is already tiles (pickling.py rebuilds a tiled tensor) -------
    @classmethod
    def _sw_tile_seed(cls, dtype: DType, tiles: list["RayObjectCarrier"], slots: int) -> "RayObjectCarrier":
        """An unsealed carrier of `slots` slots, so a TiledEvictable accepts it as its full
        seeding tier, that hands `tiles` over instead of being split (`_sw_seed_tiles`)."""
        seed = cls(dtype=dtype)
        seed._slots = slots
        seed._seed_tiles = list(tiles)
        return seed

    def _sw_seed_tiles(self, grid_shape: tuple[int, ...], tile_shape: tuple[int, ...],
                       out: list[Carrier]) -> bool:
        """Called by the TiledEvictable this carrier seeds: a `_sw_tile_seed` appends its tiles
        to `out` once and becomes an empty tier (the prototype of later evictions); any other
        carrier returns False and is split as usual."""
        tiles, self._seed_tiles = self._seed_tiles, None
        if tiles is None:
            return False
        per_tile = math.prod(tile_shape)
        if len(tiles) != math.prod(grid_shape) or any(t.size() != per_tile for t in tiles):
            raise ValueError(f"{len(tiles)} tiles do not make a grid {grid_shape} of tiles {tile_shape}")
        out.extend(tiles)
        self._slots = 0
        return True

    # ----- framework internals -----------------------------------------------------------
    def _sw_seal(self, array: np.ndarray) -> None:
        """The CPU→Ray transfer: put `array` (exactly `size()` slots) once and seal."""
        if array.shape != (self._slots,) or array.dtype != NUMPY_DTYPE[self._dtype]:
            raise ValueError(f"sealing needs {self._slots} {self._dtype.name} slots, got {array.shape} "
                             f"{array.dtype}")
        ref = put_payload(array, self._dtype)
        with self._lock:
            self._ref = ref

    def _sw_local_array(self) -> np.ndarray:
        """The slots as a read-only view of this node's copy of the object (fetched through
        Ray on first use, from another node if needed). RayObjectLostError when it cannot be."""
        with self._lock:
            array, ref = self._array, self._ref
        if array is not None:
            return array
        if ref is None or self._sw_released:
            raise RuntimeError(f"{type(self).__name__} carrier is released")
        array = fetch_payload(ref, self._dtype, self._slots)
        with self._lock:
            if self._array is None and not self._sw_released:
                self._array = array
            return array

    def _sw_land(self, first: int, storage: _native.HostStorage, count: int) -> None:
        """Slots `[first, first + count)` into `storage` from slot 0: one checked native copy
        (GIL released) from the local view, fetched first if needed."""
        size = NUMPY_DTYPE[self._dtype].itemsize
        _native.copy_buffer_to_host(self._sw_local_array(), first * size, storage, 0, count * size)

    def _sw_host_snapshot(self) -> _native.HostStorage:
        """Every slot in a fresh bare HostStorage, with what `carrier[i]` reads: the sealed
        object's bytes in one native copy, or zeros while a pending move has not sealed it."""
        kind = STORAGE_KIND[self._dtype]
        if self._ref is None and not self._sw_released:
            return _native.HostStorage(kind, self._slots)
        # From 2 MiB a zeroed HostStorage is an anonymous mapping with huge pages asked for,
        # which the copy faults in 2 MiB at a time: about twice as fast as the 4 KiB faults of
        # a fresh uninitialised heap block of that size (heap blocks win below it).
        zeroed = self._slots * NUMPY_DTYPE[self._dtype].itemsize >= SNAPSHOT_MAPPED_BYTES
        storage = _native.HostStorage(kind, self._slots, zeroed)
        self._sw_land(0, storage, self._slots)
        return storage

    def _sw_shared_copy(self) -> "RayObjectCarrier":
        """A private copy for a TiledEvictable's tier move (which releases the copy it moves):
        a new carrier over the same sealed object and local view, since nobody can change
        either; releasing it drops only its own reference."""
        with self._lock:
            ref, array = self._ref, self._array
        if ref is None or self._sw_released:
            raise RuntimeError(f"{type(self).__name__} carrier is released")
        copy = type(self)._sw_from_ref(ref, self._dtype, self._slots)
        copy._array = array
        return copy

    def _sw_is_local(self) -> bool:
        """Whether this carrier already holds its local view (no fetch is needed)."""
        return self._array is not None

    def _drop_object(self) -> None:
        with self._lock:
            self._ref = None
            if not self._exported:
                self._array = None


# The tile size from which a host snapshot is allocated as a (kernel-zeroed) mapping.
SNAPSHOT_MAPPED_BYTES = 2 << 20


def _rebuild_carrier(cls: type[RayObjectCarrier], ref: Any, dtype: DType, slots: int) -> RayObjectCarrier:
    return cls._sw_from_ref(ref, dtype, slots)


def _checked_array(values: list, dtype: DType) -> np.ndarray:
    """Values converted with the carrier write rules' types (TypeError for a wrong type)."""
    for v in values:
        if dtype is DType.Int32:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"Int32 slots take integers, not {type(v).__name__}")
        elif isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"Float32 slots take numbers, not {type(v).__name__}")
    try:
        return np.array(values, dtype=NUMPY_DTYPE[dtype])
    except OverflowError:
        raise OverflowError(f"a value is out of range for {dtype.name}") from None


def put_payload(array: np.ndarray, dtype: DType) -> Any:
    """One `ray.put` of the slots plus their dtype metadata (the bytes are copied once)."""
    return ray_call("store a RayObjectCarrier's slots", None, lambda: ray.put((PAYLOAD_TAG, dtype.name, array)))


def fetch_payload(ref: Any, dtype: DType, slots: int) -> np.ndarray:
    """`ray.get` the object on this node and check it is a carrier payload of `slots` slots of
    `dtype`. Ray's failures (node or owner died, object lost or freed, no arrival within
    `STRIDEWEAVE_RAY_FETCH_TIMEOUT`) become RayObjectLostError naming the object; no Ray in
    this process (after `ray.shutdown()`) a RuntimeError saying so (`errors.ray_call`)."""
    timeout = fetch_timeout()
    payload = ray_call("read a RayObjectCarrier", ref, lambda: ray.get(ref, timeout=timeout), timeout=timeout)
    if not (isinstance(payload, tuple) and len(payload) == 3 and payload[0] == PAYLOAD_TAG):
        raise RuntimeError(f"{describe(ref)} is not a RayObjectCarrier payload")
    _, name, array = payload
    expected = NUMPY_DTYPE[dtype]
    if name != dtype.name or not isinstance(array, np.ndarray) or array.dtype != expected \
            or array.shape != (slots,):
        raise RuntimeError(f"{describe(ref)} holds {name} slots of shape {getattr(array, 'shape', None)}, "
                           f"not {slots} {dtype.name} slots")
    return array
