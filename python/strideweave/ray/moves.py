"""The exact pairs CPU <-> RayObjectCarrier, registered like the block-device pairs.

Both run as bulk I/O on an engine worker (never on the caller's thread), so `move_async`
returns at once and `ray.put` / `ray.get` (which release the GIL while Ray works) overlap with
the caller. Everything else — validation, claims, growing the destination, autograd node,
profiling events, publish or undo — is the ordinary move path of `carriers/move.py`.

- CPU -> Ray: the cosize span from the tensor's offset (holes included, so stride-0 and
  gapped layouts stay intact) is handed to `ray.put` as a zero-copy view of the CPU memory,
  so the bytes are copied once, into the object store; that put seals the destination.
- Ray -> CPU: `ray.get` on this node (Ray fetches across nodes when needed) returns a
  read-only view of the local object-store buffer, and one checked native copy
  (`_native.copy_buffer_to_host`, GIL released) lands the span in the CPU carrier. While Ray
  fetches, a copy worker faults the destination's pages in (`_native.submit_prefault`, no byte
  changes): a fresh CPU carrier's first touch (the kernel zeroing each page) then overlaps the
  fetch instead of adding to the copy. That copy (and those faults) is all a move pays beyond
  Ray's own put + get: `ray.get` of an ndarray returns the read-only view itself, while a move
  lands writable local memory.
"""
from __future__ import annotations

from typing import cast

import numpy as np

from strideweave import _native
from strideweave.carriers.base import Carrier
from strideweave.carriers.cpu import CPU
from strideweave.carriers.move import WorkerMove, register_move_operation
from strideweave.layout import Layout, Shape, Stride
from strideweave.ray.carrier import NUMPY_DTYPE, RayObjectCarrier
from strideweave.tensor import Tensor

__all__ = ["CpuToRayObjectMoveOperation", "RayObjectToCpuMoveOperation"]


class CpuToRayObjectMoveOperation(WorkerMove):
    """Bulk CPU -> RayObjectCarrier (Float32, Int32): one `ray.put` of the cosize span."""

    source_class: type[Carrier] | None = CPU
    destination_class: type[Carrier] | None = RayObjectCarrier
    _sw_runs_on_worker = True

    def _copy(self, tensor: Tensor, destination: Carrier, output: Tensor, element_count: int) -> None:
        # A zero-copy NumPy view of the span through the CPU carrier's own DLPack export.
        span = Tensor(tensor.carrier, tensor.offset, Layout(Shape(element_count), Stride(1)))
        view = np.from_dlpack(span)
        # destination_class guarantees the class; the cast only tells the type checker.
        cast(RayObjectCarrier, destination)._sw_seal(view)


class RayObjectToCpuMoveOperation(WorkerMove):
    """Bulk RayObjectCarrier -> CPU (Float32, Int32): fetch through Ray, one native copy."""

    source_class: type[Carrier] | None = RayObjectCarrier
    destination_class: type[Carrier] | None = CPU
    _sw_runs_on_worker = True

    def _copy(self, tensor: Tensor, destination: Carrier, output: Tensor, element_count: int) -> None:
        source = cast(RayObjectCarrier, tensor.carrier)
        size = NUMPY_DTYPE[tensor.dtype()].itemsize
        storage = destination._sw_storage()
        if element_count * size >= PREFAULT_MIN_BYTES and not source._sw_is_local():
            # Fault the landing pages in on a copy worker while Ray fetches (bytes unchanged).
            _native.submit_prefault(storage, 0, element_count * size, _ignore)
        source._sw_land(tensor.offset, storage, element_count)


# Below this, faulting the landing pages in ahead is not worth an engine job.
PREFAULT_MIN_BYTES = 4 << 20


def _ignore(_: BaseException | None) -> None:
    """The prefault is advice: its outcome changes nothing."""


def register() -> None:
    """Register both pairs once (importing `strideweave.ray` does)."""
    register_move_operation(CPU, RayObjectCarrier, CpuToRayObjectMoveOperation)
    register_move_operation(RayObjectCarrier, CPU, RayObjectToCpuMoveOperation)
