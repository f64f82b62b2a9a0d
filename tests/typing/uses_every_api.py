"""A typed user script touching the public API, checked by `make typecheck` with
`mypy --strict` and pyright, and run by tests/internal/test_typing_surface.py (block devices need a device, so
their part is type-checked only). When a public name is added, use it here: the checks then
cover its annotations as a user would meet them."""
from __future__ import annotations

import concurrent.futures
import os
import tempfile
from typing import Any

import numpy as np

import strideweave as sw
from strideweave import carriers

F32 = sw.DType.Float32


def layouts() -> sw.Layout:
    shape = sw.Shape([2, [3, 4]])
    stride = sw.Stride([1, [10, 100]])
    layout = sw.Layout(shape, stride)
    size: int = layout.size + layout.cosize + layout.depth + len(layout)
    assert size > 0 and layout.is_injective() and not layout.is_leaf
    markers: list[sw.Node] = layout.profile
    assert markers[0] is sw.Node.Push or markers[0] is sw.Node.Leaf
    leaves: tuple[int, ...] = layout.leaf_shape + layout.leaf_stride
    pairs: list[tuple[int, int]] = layout.infix()
    assert len(leaves) == 2 * len(pairs)
    assert layout([1, [2, 3]]) == layout.index(1 + 2 * 2 + 3 * 6) == sw.Layout.get_index(layout, 23)
    flat = sw.Layout.canonical(sw.Shape(4))
    both = (flat + flat).concat(flat).append(flat).permute(1, 0, 2, 3)
    assert both[0].shape == sw.Shape(4) and shape.decode(1) == (1, (0, 0)) and shape.encode(1) == 1
    # The CuTe algebra (layout-and-dtype §9): static and instance forms, every tiler kind.
    a = sw.Layout(sw.Shape(4, 2, 3), sw.Stride(2, 1, 8))
    tile = sw.Layout(sw.Shape(4), sw.Stride(2))
    parts = [sw.Layout.compose(a, tile), a.compose(sw.Shape(2)), a.compose((2, None, tile)), a.complement(),
             a.complement(96), a.divide(tile), a.zipped_divide((2, 2)), a.tiled_divide([tile]), a.product(tile),
             a.blocked_product(tile), a.raked_product(2), a.right_inverse(), a.left_inverse(), a.filter(),
             a.coalesce(), a.coalesce((1, 1)), a.coalesce(sw.Shape(1))]
    assert all(isinstance(p, sw.Layout) for p in parts)
    nested = sw.Layout(sw.Shape((4, 6), 8), sw.Stride((1, 4), 24))
    assert nested.zipped_divide(((2, 3), 4)).size == nested.size
    out = sw.Tree(sw.Node.id(1), sw.Node.Leaf, sw.Tree(sw.Node.id(0)))
    assert a.rearrange(out).size == 8 and a.rearrange(sw.Node.id(0), selection=[(1,), 2]).size == 2
    extent: int | None = a.uniform_preimage_extent(sw.Shape(3))
    assert extent is None and out.children[0] == sw.NodeId(1) and sw.NodeId(1).index == 1
    return flat.broadcast_to(sw.Shape(4))


def dtypes() -> None:
    for d in (sw.DType.Any, sw.DType.Floating, sw.DType.Integer, sw.DType.Float32, sw.DType.Float64,
              sw.DType.Int32, sw.DType.Bool, sw.DType.E2M1, sw.DType.E8M0):
        assert sw.DType.from_name(d.name) is d and d.value == d.name
    simple: sw.SimpleDType = sw.DType.Float32
    category: sw.DTypeCategory = sw.DType.Floating
    compound: sw.BlockScaledDType = sw.DType.MXFP4
    parts: tuple[sw.DType, ...] = sw.storage_schema(compound)
    assert isinstance(compound, sw.CompoundDType) and compound.num_carriers == len(parts)
    assert simple.bits == 32 and simple.is_subtype_of(category) and sw.storage_zero(simple) == 0.0


def tensors_and_ops() -> float:
    carrier = sw.CPU(6)
    t = sw.Tensor(carrier, 0, sw.Layout(sw.Shape([2, 3]), sw.Stride([1, 2])))
    t[1, 2] = 5.0
    version: int = t.version
    values: list[Any] = t.tolist()
    g = sw.Tensor(sw.Generic([1.0, 2.0, 3.0]), 0, sw.Layout(sw.Shape(3), sw.Stride(1)))
    with sw.no_grad():
        doubled = sw.mul(g, 2.0)
    total = sw.sum(sw.add(g, g) * g)
    total.backward()
    grad = g.grad
    assert grad is not None and sw.is_grad_enabled() and version == 1 and len(values) == 6
    sw.set_grad_enabled(True)
    wide = sw.broadcast_to(sw.Tensor(sw.CPU(1), 0, sw.Layout(sw.Shape(1), sw.Stride(1))), sw.Shape(3))
    product = sw.elementwise_mul(doubled, g)
    assert wide.size() == product.size() == 3 and isinstance(product, sw.Tensor)
    value: float = total[0]
    return value


def moves() -> None:
    source = sw.Tensor(sw.CPU(4), 0, sw.Layout(sw.Shape(4), sw.Stride(1)))
    handle: sw.AwaitMove = sw.move_async(source, sw.FileBacked(dtype=F32))
    on_file: sw.Tensor = handle.wait()
    assert handle.done and isinstance(on_file.carrier, sw.FileBacked) and on_file.carrier.path.exists()
    with sw.profile() as prof:
        back = sw.move(on_file, sw.CPU(4))
    events: list[sw.ProfilerEvent] = prof.events()
    assert all(e.duration_ns >= 0 for e in events) and isinstance(prof, sw.Profiler)
    op_class: type[sw.MoveOperation] = sw.dispatch_move(sw.CPU, sw.FileBacked)
    assert op_class is sw.CpuToFileBackedMoveOperation and issubclass(sw.FileBackedToCpuMoveOperation, sw.Operation)

    class Copy(sw.ElementwiseMoveOperation):
        pass

    with sw.registered_move_operation(sw.Generic, sw.Generic, Copy) as registered:
        assert registered is Copy
    sw.register_move_operation(sw.Generic, sw.Generic, Copy)
    assert sw.unregister_move_operation(sw.Generic, sw.Generic) is Copy
    tiers = sw.Evictable(sw.CPU(4), sw.CPU(4))
    tiers.evict()
    tiers.promote()
    assert not tiers.is_evicted() and back.carrier.size() == 4
    clean = sw.Evictable(sw.CPU(4), sw.CPU(4), retain_clean=True)
    evicting: sw.AwaitResidency = clean.evict_async()
    evicting.wait(timeout=10.0)
    clean.promote_async().wait()
    assert clean.retain_clean and clean.is_clean()


class Slab(sw.Carrier):
    pass


class Marker(sw.CarrierFacet):
    pass


def definitions() -> None:
    def supports(c: Slab, d: sw.DType) -> bool:
        return d is F32

    def allocate(c: Slab, n: int) -> None:
        c.__dict__["slots"] = [0.0] * n

    def read(c: Slab, i: int) -> float:
        slots: list[float] = c.__dict__["slots"]
        return slots[i]

    def write(c: Slab, i: int, v: float) -> None:
        c.__dict__["slots"][i] = v

    def prepare(request: sw.TransferRequest) -> sw.PreparedTransfer | sw.Unsupported:
        return sw.Unsupported(f"{request.physical_span} slots at {request.offset}: not today")

    storage = sw.StorageProvider(supports, lambda c: len(c.__dict__.get("slots", ())), allocate,
                                 lambda c: None, read, write, elementwise_fallback=True)
    route = sw.TransferRoute(Slab, Slab, "slab-copy", sw.TransferProvider(prepare))
    sw.register_carrier_definition(Slab, sw.CarrierDefinition(storage, transfers=[route], facets=[Marker()]))
    slab = Slab(3, dtype=F32)
    slab[0] = 1.0
    marker: Marker | None = slab.facet(Marker)
    assert marker is not None and slab.require_facet(Marker) is marker
    assert sw.PreparedTransfer(lambda: None).submit() is None
    assert not isinstance(object(), sw.ProviderCompletion)


def tiles() -> None:
    tiled = sw.TiledEvictable(sw.CPU(16), sw.FileBacked(dtype=F32), grid_shape=(2, 2), tile_shape=(2, 2))
    selection = sw.TileSelection([[0], [0, 1]])
    residency: sw.AwaitResidency = tiled.evict_async(selection)
    residency.wait()
    tiled.promote(sw.TileSet([(0, 0), (0, 1)]))
    facet: sw.TiledResidencyFacet = tiled.require_facet(sw.TiledResidencyFacet)
    full = sw.Tensor(tiled, 0, sw.Layout.canonical(sw.Shape([4, 4])))
    with sw.no_grad():
        projection: sw.AwaitProjection = facet.project(tiled, full, selection)
    compact: sw.Tensor = projection.wait()
    assert compact.size() == 8 and tiled.grid_shape == (2, 2) and len(tiled.primary_tiles) == 4
    policy = sw.ResidencyPolicy(budget=2 * 4 * 4)
    budgeted = sw.TiledEvictable(sw.CPU(0, dtype=F32), sw.FileBacked(dtype=F32).new_like([0.0] * 16, dtype=F32),
                                 (2, 2), (2, 2), residency_policy=policy)
    plan: sw.ResidencyPlan = budgeted.residency_plan([sw.TileSet([(0, 0)]), selection])
    steps: list[sw.TileSet] = list(plan)
    assert len(steps) == 2 and budgeted.residency_policy == policy and policy.budget == 32


def arrays_and_handles() -> None:
    t = sw.Tensor(sw.CPU(6), 0, sw.Layout(sw.Shape([2, 3]), sw.Stride([1, 2])))
    shape: tuple[int, ...] = t.shape
    ndim: int = t.ndim
    array = np.asarray(t)
    assert shape == (2, 3) and ndim == 2 and array.shape == shape
    views: list[sw.Tensor] = [t.tile((2, 1)), t.compose(sw.Shape(2)), t.permute(1, 0), t.reshape((3, 2)),
                              t.squeeze(), t.unsqueeze(0), t.broadcast_in_dim((4, 2, 3), (1, 2)),
                              t.as_strided((2,), (1,), offset=0)]
    assert all(v.carrier is t.carrier for v in views)
    with sw.CPU(4) as carrier:
        source = sw.Tensor(carrier, 0, sw.Layout(sw.Shape(4), sw.Stride(1)))
        with sw.profile() as prof:
            handle: sw.AwaitMove = sw.move_async(source, sw.CPU(4))
            seen: list[sw.AwaitResult[sw.Tensor]] = []
            handle.add_done_callback(seen.append)
            moved: sw.Tensor = handle.wait(timeout=60.0)
        error: BaseException | None = handle.exception(timeout=60.0)
        future: concurrent.futures.Future[sw.Tensor] = handle.future()
        done: int = handle.bytes_done
        total: int = handle.bytes_total
        assert error is None and future.result() is moved and done == total and seen == [handle]
        result: sw.Tensor = handle.result(timeout=60.0)
        cancelled: bool = handle.cancel() or handle.cancelled()
        assert result is moved and not cancelled
        # A handle is a Future to type checkers, so the standard waiting functions take it.
        again = sw.move_async(moved, sw.CPU(4))
        finished, pending = concurrent.futures.wait([again], timeout=60.0)
        first: list[sw.Tensor] = [f.result() for f in concurrent.futures.as_completed([again], timeout=60.0)]
        assert not pending and {f.result() for f in finished} == set(first)
    with tempfile.TemporaryDirectory() as directory:
        prof.export_chrome_trace(os.path.join(directory, "trace.json"))


def ray_objects() -> int:
    """Type-checked only (needs a running Ray; tests/spec/test_ray_carrier.py runs it)."""
    import ray

    from strideweave.ray import (CpuToRayObjectMoveOperation, RayObjectCarrier, RayObjectLostError,
                                 RayObjectToCpuMoveOperation)

    ray.init(num_cpus=1)
    on_ray = sw.move(sw.Tensor(sw.CPU(4), 0, sw.Layout(sw.Shape(4), sw.Stride(1))), RayObjectCarrier())
    carrier = on_ray.carrier
    assert isinstance(carrier, RayObjectCarrier) and carrier.is_sealed() and carrier.object_ref is not None
    ops: tuple[type[sw.MoveOperation], ...] = (CpuToRayObjectMoveOperation, RayObjectToCpuMoveOperation)
    assert issubclass(RayObjectLostError, RuntimeError) and len(ops) == 2
    return carrier.size()


def block_devices(path: str) -> float:
    """Type-checked only (needs a disposable block device)."""
    device = sw.BlockDevice(path)
    carrier: sw.BlockDeviceCarrier = device.allocate(4)
    carrier[0] = 1.0
    value: float = carrier.get_value(0)
    moved = sw.move(sw.Tensor(carrier, 0, sw.Layout(sw.Shape(4), sw.Stride(1))), sw.CPU(4))
    op: type[sw.MoveOperation] = sw.CpuToBlockDeviceMoveOperation
    assert op is not sw.BlockDeviceToCpuMoveOperation and moved.size() == 4
    return value


def namespaces() -> list[str]:
    op: type[sw.Operation] = sw.BroadcastOperation
    result: sw.AwaitResult[sw.Tensor] | None = None
    assert op is not None and result is None
    return list(carriers.__all__)


def main() -> None:
    layouts()
    dtypes()
    tensors_and_ops()
    moves()
    definitions()
    tiles()
    arrays_and_handles()
    namespaces()


if __name__ == "__main__":
    main()
    print("uses_every_api: ok")
