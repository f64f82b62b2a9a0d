"""Pickling a Tensor whose carrier is a RayObjectCarrier into a Ray task or actor.

Only the object reference, dtype, slot count, offset and layout travel: the carrier reduces to
its `ray.ObjectRef` (which Ray's serializer tracks, so the receiver borrows the object), and
the Tensor to that carrier plus its offset and layout. The receiver then reads the object
through Ray on its own node, e.g. `sw.move(t, sw.CPU(n))`.

The reduction is registered with `copyreg` for exactly `Tensor` when `strideweave.ray` is
imported. A Tensor on any other carrier keeps Python's default reduction (its fields; e.g. a
Generic tensor pickles, a CPU tensor's native storage refuses with TypeError), so importing
this package changes nothing for them.
"""
from __future__ import annotations

import copyreg
from typing import Any

from strideweave.layout import Layout
from strideweave.ray.carrier import RayObjectCarrier
from strideweave.tensor import Tensor

__all__: list[str] = []


def _reduce_tensor(t: Tensor) -> Any:
    if len(t.subtensors) != 1 or not isinstance(t.carrier, RayObjectCarrier):
        return t.__reduce_ex__(4)  # the default, as if nothing were registered
    # Not the autograd state, the gradient or anything else a Tensor refers to.
    return (_rebuild_tensor, (t.carrier, t.offset, t.layout))


def _rebuild_tensor(carrier: Any, offset: int, layout: Layout) -> Tensor:
    return Tensor(carrier, offset, layout)


def register() -> None:
    copyreg.pickle(Tensor, _reduce_tensor)
