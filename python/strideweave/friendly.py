"""strideweave.friendly: convenience entry points."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only
    from strideweave.tensor import Tensor

__all__ = ["sum"]


def sum(tensor: Tensor) -> Tensor:  # noqa: A001 - the specification names it `sum`
    """Total over every logical coordinate of `tensor`, flat or hierarchical, with layout
    `[1]:[1]` (dispatch name ``reduce_sum``). On CPU Float32 the Rust kernel accumulates in
    float64 and rounds once to float32. Recorded for autograd: the backward hands `g[0]` to
    every coordinate."""
    from strideweave.operation import reduce_sum

    return reduce_sum(tensor)
