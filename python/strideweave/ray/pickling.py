"""Pickling a Tensor whose carrier is a RayObjectCarrier into a Ray task or actor.

Only the object reference, dtype, slot count, offset and layout travel: the carrier reduces to
its `ray.ObjectRef` (which Ray's serializer tracks, so the receiver borrows the object), and
the Tensor to that carrier plus its offset and layout. The receiver then reads the object
through Ray on its own node, e.g. `sw.move(t, sw.CPU(n))`.

`Tensor` is a native class with no general pickle support (most carriers hold process-local
memory), so the reduction is registered with `copyreg` for exactly `Tensor` when
`strideweave.ray` is imported; pickling a Tensor on any other carrier raises TypeError.
"""
from __future__ import annotations

import copyreg
from typing import Any

from strideweave.layout import Layout
from strideweave.ray.carrier import RayObjectCarrier
from strideweave.tensor import Tensor

__all__: list[str] = []


def _reduce_tensor(t: Tensor) -> tuple:
    if len(t.subtensors) != 1:
        raise TypeError("cannot pickle a multi-subtensor Tensor")
    carrier = t.carrier
    if not isinstance(carrier, RayObjectCarrier):
        raise TypeError(f"cannot pickle a Tensor on a {type(carrier).__name__} carrier: only Tensors on a "
                        "RayObjectCarrier pickle (move it to one first)")
    return (_rebuild_tensor, (carrier, t.offset, t.layout))


def _rebuild_tensor(carrier: Any, offset: int, layout: Layout) -> Tensor:
    return Tensor(carrier, offset, layout)


def register() -> None:
    copyreg.pickle(Tensor, _reduce_tensor)
