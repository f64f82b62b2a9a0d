"""Multi-subtensor representations (docs/spec/tensor-and-carriers.md §1.1).

A representation is a logical dtype over one `Subtensor` per storage-schema plane, linked by
adjacent layouts that map level-i coordinates to level i+1. `tensor_from_subtensors` is the
only way to build a multi-subtensor Tensor; it validates everything before building anything.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from strideweave.carriers.base import Carrier, not_a_carrier
from strideweave.carriers.dtype import PLANAR_FLOAT32_PAIR, DType, storage_schema
from strideweave.layout import Layout

__all__ = ["Subtensor", "tensor_from_subtensors", "PLANAR_FLOAT32_PAIR"]


@dataclass(frozen=True, slots=True, eq=False)
class Subtensor:
    """One plane of a representation: `carrier[offset + layout(c)]` holds `storage_dtype`."""

    storage_dtype: DType
    carrier: Carrier
    offset: int
    layout: Layout


def _as_tuple(value: Any, name: str) -> tuple:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a sequence, not {type(value).__name__}")
    return tuple(value)


# The Tensor class, registered by `strideweave.tensor` when it is defined: that module sits a
# layer above this one (a Tensor is made of Subtensors), so this one cannot import it.
TENSOR_CLASS: list[Any] = []


def tensor_from_subtensors(logical_dtype: DType, subtensors: Sequence[Subtensor],
                           adjacent_layouts: Sequence[Layout] = ()) -> Any:
    """Validate a representation in the contract's order and build its Tensor."""

    # 1. argument types
    if not isinstance(logical_dtype, DType):
        raise TypeError(f"logical_dtype must be a DType, not {type(logical_dtype).__name__}")
    subs = _as_tuple(subtensors, "subtensors")
    adjacent = _as_tuple(adjacent_layouts, "adjacent_layouts")
    for i, sub in enumerate(subs):
        if not isinstance(sub, Subtensor):
            raise TypeError(f"subtensors[{i}] must be a Subtensor, not {type(sub).__name__}")
    for i, lay in enumerate(adjacent):
        if not isinstance(lay, Layout):
            raise TypeError(f"adjacent_layouts[{i}] must be a Layout, not {type(lay).__name__}")
    # 2. schema
    try:
        schema = storage_schema(logical_dtype)
    except ValueError:
        raise ValueError(f"{logical_dtype.name} has no Tensor storage schema") from None
    # 3. counts
    if len(subs) != len(schema):
        raise ValueError(f"{logical_dtype.name} needs {len(schema)} subtensors, got {len(subs)}")
    if len(adjacent) != len(schema) - 1:
        raise ValueError(f"{logical_dtype.name} needs {len(schema) - 1} adjacent layouts, got {len(adjacent)}")
    # 4. each subtensor
    for i, sub in enumerate(subs):
        if not isinstance(sub.carrier, Carrier):
            raise not_a_carrier(f"subtensors[{i}].carrier", sub.carrier)
        if isinstance(sub.offset, bool) or not isinstance(sub.offset, int):
            raise TypeError(f"subtensors[{i}].offset must be an int, not {type(sub.offset).__name__}")
        if not isinstance(sub.layout, Layout):
            raise TypeError(f"subtensors[{i}].layout must be a Layout, not {type(sub.layout).__name__}")
        # The contract lists the ValueErrors before "released"; the span check must follow
        # the release check, since a released carrier has size 0 and would always overflow.
        if sub.storage_dtype is not schema[i]:
            raise ValueError(f"subtensors[{i}].storage_dtype must be {schema[i].name}")
        if sub.carrier.dtype() is not schema[i]:
            raise ValueError(f"subtensors[{i}].carrier stores {sub.carrier.dtype().name}, not {schema[i].name}")
        if sub.offset < 0:
            raise ValueError(f"subtensors[{i}].offset must be non-negative")
        if sub.carrier.is_released():
            raise RuntimeError(f"subtensors[{i}].carrier is released")
        if sub.offset + sub.layout.cosize > sub.carrier.size():
            raise ValueError(f"subtensors[{i}] span exceeds carrier size {sub.carrier.size()}")
    # 5. one exact carrier class
    classes = {type(sub.carrier) for sub in subs}
    if len(classes) > 1:
        raise TypeError("all subtensor carriers must have the same exact class, got "
                        + ", ".join(sorted(c.__name__ for c in classes)))
    # 6. adjacent layouts link consecutive levels
    for i, lay in enumerate(adjacent):
        if lay.shape != subs[i].layout.shape:
            raise ValueError(f"adjacent_layouts[{i}].shape must equal subtensors[{i}].layout.shape")
        if lay.cosize > subs[i + 1].layout.size:
            raise ValueError(f"adjacent_layouts[{i}] reaches beyond subtensors[{i + 1}]")
    # 7. the dtype's own rules
    for rule in logical_dtype.representation_rules:
        rule(subs, adjacent)
    return TENSOR_CLASS[0]._from_subtensors(logical_dtype, subs, adjacent)
