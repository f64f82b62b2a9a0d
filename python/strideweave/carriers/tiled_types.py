"""The value types of the tiled tier (extension-and-tiling.md §7): TileSet, TileSelection,
TileState, the completion handles AwaitResidency and AwaitProjection, and the ownership token
a TiledEvictable records on its tiers and tiles.

Public names are re-exported by `strideweave.carriers.tiled_evictable`, their documented home.
"""
from __future__ import annotations

import contextlib
import math
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from strideweave.carriers._definition_values import FrozenValue, KeyedValue
from strideweave.carriers.base import Carrier
from strideweave.carriers.ownership import Ownership
from strideweave.carriers.move import AwaitResult

if TYPE_CHECKING:  # annotations only: the projection's result type
    from strideweave.tensor import Tensor

__all__ = ["TileSet", "TileSelection", "AwaitProjection", "AwaitResidency", "TileState", "ResidencyPolicy"]


# ===== value types ==============================================================================

def _component(value: Any, what: str) -> int:
    """A tile coordinate component: an int, bool rejected (TypeError)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    return int(value)


def _consume_ints(values: Any, what: str) -> tuple[int, ...]:
    try:
        items = tuple(values)
    except TypeError:
        raise TypeError(f"{what} must be an iterable of ints, not {type(values).__name__}") from None
    return tuple(_component(v, f"{what}[{k}]") for k, v in enumerate(items))


def _consume_int_rows(values: Any, name: str, rows: str) -> tuple[tuple[int, ...], ...]:
    """An iterable of int iterables (`rows` names them in the error) as a tuple of int tuples."""
    try:
        entries = tuple(values)
    except TypeError:
        raise TypeError(f"{name} must be an iterable of {rows}, not {type(values).__name__}") from None
    return tuple(_consume_ints(entry, f"{name}[{k}]") for k, entry in enumerate(entries))


def _added(seen: set[tuple[int, ...]], coordinate: tuple[int, ...]) -> bool:
    """Add `coordinate` to `seen`; False, so a generator can record and test in one pass."""
    seen.add(coordinate)
    return False


class TileSet(KeyedValue):
    """An immutable, possibly empty set of tile coordinates, sorted first axis fastest.

    `TileSet([(1, 0), (0, 1), (0, 0)]).coordinates == ((0, 0), (1, 0), (0, 1))`. A component
    that is not an int (or is a bool) → TypeError; mixed ranks, negative components or
    duplicates → ValueError. Whether the coordinates fit a carrier's grid is checked when
    the set is used.
    """

    __slots__ = ("_coordinates",)
    _coordinates: tuple[tuple[int, ...], ...]
    _sw_key_field = "_coordinates"  # equal and hashed by it (KeyedValue)

    def __init__(self, coordinates: Iterable[Sequence[int]] = ()) -> None:
        coords = _consume_int_rows(coordinates, "coordinates", "int sequences")
        ranks = {len(c) for c in coords}
        if len(ranks) > 1:
            raise ValueError(f"coordinates mix ranks {sorted(ranks)}")
        if 0 in ranks:
            raise ValueError("a tile coordinate needs at least one component")
        for c in coords:
            if any(v < 0 for v in c):
                raise ValueError(f"tile coordinate {c} has a negative component")
        if len(set(coords)) != len(coords):
            seen: set[tuple[int, ...]] = set()
            duplicate = next(c for c in coords if c in seen or _added(seen, c))
            raise ValueError(f"tile coordinate {duplicate} appears more than once")
        object.__setattr__(self, "_coordinates", tuple(sorted(coords, key=lambda c: c[::-1])))

    @property
    def coordinates(self) -> tuple[tuple[int, ...], ...]:
        """The coordinates, first axis fastest."""
        return self._coordinates

    @property
    def rank(self) -> int | None:
        """The coordinates' rank, or None for the empty set."""
        return len(self._coordinates[0]) if self._coordinates else None

    def __len__(self) -> int:
        return len(self._coordinates)

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        return iter(self._coordinates)

    def __contains__(self, coordinate: Any) -> bool:
        return tuple(coordinate) in self._coordinates if isinstance(coordinate, (tuple, list)) else False

    def __repr__(self) -> str:
        return f"TileSet({list(self._coordinates)!r})"


class TileSelection(KeyedValue):
    """An ordered Cartesian product of per-axis tile indices.

    `per_axis` keeps the caller's order; `coordinates` enumerates the product first mode
    fastest: `TileSelection(((7, 2), (4, 9))).coordinates == ((7, 4), (2, 4), (7, 9), (2, 9))`.
    No axes, an empty axis, a duplicate within an axis or a negative index → ValueError; a
    non-int (or bool) index → TypeError.
    """

    __slots__ = ("_per_axis",)
    _per_axis: tuple[tuple[int, ...], ...]
    _sw_key_field = "_per_axis"  # equal and hashed by it (KeyedValue)

    def __init__(self, per_axis: Iterable[Iterable[int]]) -> None:
        parsed = _consume_int_rows(per_axis, "per_axis", "int iterables")
        if not parsed:
            raise ValueError("per_axis must name at least one axis")
        for a, axis in enumerate(parsed):
            if not axis:
                raise ValueError(f"per_axis[{a}] selects no tiles")
            if any(v < 0 for v in axis):
                raise ValueError(f"per_axis[{a}] has a negative tile index")
            if len(set(axis)) != len(axis):
                raise ValueError(f"per_axis[{a}] repeats a tile index")
        object.__setattr__(self, "_per_axis", parsed)

    @property
    def per_axis(self) -> tuple[tuple[int, ...], ...]:
        return self._per_axis

    @property
    def rank(self) -> int:
        return len(self._per_axis)

    @property
    def compact_grid_shape(self) -> tuple[int, ...]:
        """Selected tiles per axis: the grid of the compact projection."""
        return tuple(len(axis) for axis in self._per_axis)

    @property
    def coordinates(self) -> tuple[tuple[int, ...], ...]:
        """Every selected tile, first mode fastest, each axis in the caller's order."""
        shape = self.compact_grid_shape
        out = []
        for k in range(math.prod(shape)):
            coord = []
            for axis, extent in zip(self._per_axis, shape):
                k, r = divmod(k, extent)
                coord.append(axis[r])
            out.append(tuple(coord))
        return tuple(out)

    @property
    def tile_set(self) -> TileSet:
        return TileSet(self.coordinates)

    def __repr__(self) -> str:
        return f"TileSelection({[list(a) for a in self._per_axis]!r})"


class AwaitResidency(AwaitResult[None]):
    """Completion handle of a residency request; `wait()` returns None or raises the first
    transfer failure. Only the framework creates these."""

    __slots__ = ()


class AwaitProjection(AwaitResult["Tensor"]):
    """Completion handle of a projection; `wait()` returns the compact Tensor (the same
    object every time) or raises the gather's failure. Only the framework creates these."""

    __slots__ = ()


def as_tile_set(tiles: Any, what: str) -> "TileSet":
    """`tiles` as a TileSet (a TileSelection gives its `tile_set`); TypeError naming `what`
    for any other type."""
    if isinstance(tiles, TileSelection):
        return tiles.tile_set
    if not isinstance(tiles, TileSet):
        raise TypeError(f"{what} must be a TileSet or TileSelection, not {type(tiles).__name__}")
    return tiles


class ResidencyPolicy(KeyedValue):
    """A TiledEvictable's residency policy (`residency_policy=`): at most `budget` bytes of
    tiles on the primary tier at any time, counting tiles a pending promote is bringing in.
    A promote that would pass it first evicts unpinned primary tiles outside the request,
    clean ones first (they cost no write), least recently used first among equals.

    `budget` is an int ≥ 1 (a bool or another type: TypeError; below 1: ValueError)."""

    __slots__ = ("budget",)
    _sw_key_field = "budget"
    budget: int

    def __init__(self, budget: int) -> None:
        if type(budget) is not int:
            raise TypeError(f"ResidencyPolicy budget must be an int, not {type(budget).__name__}")
        if budget < 1:
            raise ValueError(f"ResidencyPolicy budget must be >= 1 byte, got {budget}")
        self._sw_set(budget=budget)

    def __repr__(self) -> str:
        return f"ResidencyPolicy(budget={self.budget})"


class TileState(FrozenValue):
    """Where one tile lives (`location` is "primary" or "secondary") and whether a pending
    request pins it."""

    __slots__ = ("coordinate", "location", "pinned", "clean")
    coordinate: tuple[int, ...]
    location: str
    pinned: bool
    # On primary with its unchanged secondary copy retained (TiledEvictable(retain_clean=True)).
    clean: bool

    def __init__(self, coordinate: tuple[int, ...], location: str, pinned: bool,
                 clean: bool = False) -> None:
        object.__setattr__(self, "coordinate", coordinate)
        object.__setattr__(self, "location", location)
        object.__setattr__(self, "pinned", pinned)
        object.__setattr__(self, "clean", clean)

    def __repr__(self) -> str:
        pinned = ", pinned" if self.pinned else ""
        clean = ", clean" if self.clean else ""
        return f"TileState({self.coordinate}, {self.location!r}{pinned}{clean})"


# ===== ownership ================================================================================

# The owner token of a TiledEvictable's tiers and tiles (see carriers/ownership.py).
_Ownership = Ownership.named("TiledEvictable")


def _release_quietly(carrier: Carrier, ownership: Ownership | None = None) -> None:
    if ownership is not None:
        ownership.drop(carrier)
    with contextlib.suppress(Exception):
        if carrier._sw_owner is None:
            carrier.release()


PRIMARY, SECONDARY = "primary", "secondary"


def _check_shape(value: Any, name: str) -> tuple[int, ...]:
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be an iterable of ints, not {type(value).__name__}") from None
    for k, v in enumerate(items):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name}[{k}] must be an int, not {type(v).__name__}")
    return tuple(int(v) for v in items)

