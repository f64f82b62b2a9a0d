"""CPU -> RayObjectCarrier -> CPU on the other node, next to Ray's own put + get (issue 14).

    .venv/bin/python benches/bench_ray.py [--quick]

Starts a two-node Ray cluster on this machine (`ray.cluster_utils.Cluster`, loopback only,
each node with its own object store) and an actor on node B. One round trip, each side:

  strideweave  driver: `sw.move(cpu_tensor, RayObjectCarrier())` (one ray.put), then the actor
               on node B: `sw.move(t, destination)` (ray.get across nodes + one copy into a
               CPU carrier there): a fresh `sw.CPU(n)` each time (its pages are faulted in by
               a copy worker while Ray fetches), and a reused landing carrier (a pipeline
               stage's warm buffer)
  Ray          driver: `ray.put(ndarray)`, then the actor on node B: `ray.get(ref)` of the same
               array (a read-only zero-copy view of node B's object store); printed also with
               `.copy()` of that view, the price of writable local memory, which a move into a
               CPU carrier always pays

Second row, on the driver's node: a TiledEvictable (CPU primary, RayObjectCarrier secondary)
of a (T*4, T*4) Float32 array in a 4x4 grid with every tile evicted to Ray, moved whole to a fresh
CPU carrier (`sw.move(full, sw.CPU(n))`, "tiled.to_cpu": each Ray tile lands with one native
copy from its object-store view, then the tiles are placed in Rust), next to what a user would
otherwise write: `ray.get` of the 16 tile objects (each a `ray.put` of that tile's ndarray) and
a copy of each into its block of one `np.empty` array. Both sides put their tiles before the
clock starts and fetch them inside it (64 MiB; 16 MiB with --quick).

The tensor goes to the actor pickled (only the object reference travels); the array's
reference goes inside a list so that the actor itself calls `ray.get`. Sources are filled
before the clock starts. Each round runs every variant once, in alternating order; a time is
the median over rounds, and "ratio" is the median over rounds of strideweave's time over Ray's
time in the same round (paired, so a load change between rounds does not skew it; issue 14's
goal: <= 1.1 against put + get). The load average is printed: on a shared machine it moves the
figures. `--quick`: 32 MiB, 2 rounds.
Skips (exit 0) when `ray` is not installed.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Resolve this machine's node address to loopback: all cluster traffic stays on 127.0.0.1.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import gc  # noqa: E402
import logging  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

import strideweave as sw  # noqa: E402

MiB = 1 << 20


def main(argv: list[str]) -> int:
    try:
        import ray
        from ray.cluster_utils import Cluster
    except ImportError:
        print("bench_ray: skipped (ray is not installed: pip install -r requirements-ray.txt)")
        return 0
    from strideweave.ray import RayObjectCarrier

    quick = "--quick" in argv
    size_mib = 32 if quick else 256
    repeats = 2 if quick else 7
    n = size_mib * MiB // 4
    store = max(256, 3 * size_mib) * MiB
    node: dict[str, Any] = dict(num_cpus=1, object_store_memory=store, node_ip_address="127.0.0.1")

    @ray.remote(num_cpus=0)
    class Receiver:
        def node_id(self) -> str:
            return ray.get_runtime_context().get_node_id()

        def move_to_cpu(self, t: sw.Tensor, warm: bool) -> tuple:
            if warm:  # a pipeline stage reusing its landing buffer (already faulted in)
                if getattr(self, "landing", None) is None:
                    self.landing = sw.CPU(t.layout.cosize)
                destination = self.landing
            else:
                destination = sw.CPU(t.layout.cosize)
            back = sw.move(t, destination)
            return back[0], back[t.layout.cosize - 1]

        def ray_get(self, refs: list, copy: bool) -> tuple:
            a = ray.get(refs[0])
            if copy:  # what a user needs for writable local memory: ray.get's view is read-only
                a = a.copy()
            return float(a[0]), float(a[-1])

    cluster = Cluster()
    try:
        cluster.add_node(**node, include_dashboard=False)
        cluster.add_node(**node, resources={"node_b": 1})
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
        cluster.wait_for_nodes()
        receiver = Receiver.options(resources={"node_b": 1}).remote()  # type: ignore[attr-defined]  # ray's actor class
        assert ray.get(receiver.node_id.remote()) != ray.get_runtime_context().get_node_id()

        array = (np.arange(n) % 1000).astype(np.float32)
        layout = sw.Layout(sw.Shape(n), sw.Stride(1))

        def ours(warm: bool) -> float:
            c = sw.CPU(n, empty=True)
            np.copyto(np.from_dlpack(sw.Tensor(c, 0, layout)), array)
            gc.collect()
            with sw.no_grad():
                start = time.perf_counter()
                t = sw.move(sw.Tensor(c, 0, layout), RayObjectCarrier())
                ends = ray.get(receiver.move_to_cpu.remote(t, warm))
                elapsed = time.perf_counter() - start
            assert ends == (0.0, float((n - 1) % 1000)), ends
            del t
            return elapsed

        def theirs(copy: bool) -> float:
            gc.collect()
            start = time.perf_counter()
            ref = ray.put(array)
            ends = ray.get(receiver.ray_get.remote([ref], copy))
            elapsed = time.perf_counter() - start
            assert ends == (0.0, float((n - 1) % 1000)), ends
            del ref
            return elapsed

        runs = {"fresh": lambda: ours(False), "warm": lambda: ours(True), "ray": lambda: theirs(False),
                "ray+copy": lambda: theirs(True)}
        for run in runs.values():  # warm-up: worker imports, first object-store mappings
            run()
        load = os.getloadavg()[0]
        times: dict[str, list[float]] = {name: [] for name in runs}
        for k in range(repeats):
            order = list(runs) if k % 2 == 0 else list(reversed(runs))
            for name in order:
                times[name].append(runs[name]())

        def ratio(name: str, base: str) -> float:
            """Paired: the median over rounds of this round's time over the base's."""
            return statistics.median(a / b for a, b in zip(times[name], times[base]))

        tiled_rows(ray, RayObjectCarrier, 16 if quick else 64, repeats)

        print(f"{size_mib} MiB CPU -> Ray -> CPU on node B, {repeats} rounds (load average "
              f"{load:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs); medians, ratios paired per round")
        print(f"  ray.put + ray.get (a read-only view)          {statistics.median(times['ray']) * 1e3:8.1f} ms")
        print(f"  ray.put + ray.get + ndarray.copy()            {statistics.median(times['ray+copy']) * 1e3:8.1f} ms")
        for name, label in (("fresh", "into a fresh CPU carrier"), ("warm", "into a reused CPU carrier")):
            print(f"  strideweave move {label:28s} {statistics.median(times[name]) * 1e3:8.1f} ms   "
                  f"ratio {ratio(name, 'ray'):5.2f}x (goal <= 1.1)   vs get + copy {ratio(name, 'ray+copy'):5.2f}x")
    finally:
        ray.shutdown()
        cluster.shutdown()
    return 0


def tiled_rows(ray: Any, ray_carrier: type, size_mib: int, repeats: int) -> None:
    """The TiledEvictable row: "tiled.to_cpu" of every tile on Ray vs ray.get + block copies."""
    from strideweave.carriers.tiled_evictable import TiledEvictable, TileSelection

    side = int((size_mib * MiB // 4) ** 0.5)
    tile = side // 4
    data = np.asfortranarray((np.arange(side * side) % 1009).astype(np.float32).reshape((side, side), order="F"))
    flat = sw.Layout.canonical(sw.Shape(side * side))
    logical = sw.Layout.canonical(sw.Shape([side, side]))
    blocks = [(slice(i * tile, (i + 1) * tile), slice(j * tile, (j + 1) * tile)) for j in range(4) for i in range(4)]

    def ours() -> float:
        seed = sw.CPU(side * side, empty=True)
        np.copyto(np.from_dlpack(sw.Tensor(seed, 0, flat)), data.ravel(order="F"))
        te = TiledEvictable(seed, ray_carrier(), (4, 4), (tile, tile))
        te.evict(TileSelection([list(range(4)), list(range(4))]))
        gc.collect()
        with sw.no_grad():
            start = time.perf_counter()
            out = sw.move(sw.Tensor(te, 0, logical), sw.CPU(side * side, empty=True))
            elapsed = time.perf_counter() - start
        got = np.from_dlpack(sw.Tensor(out.carrier, 0, flat))
        assert np.array_equal(got, data.ravel(order="F")), "tiled.to_cpu returned wrong values"
        return elapsed

    def theirs() -> float:
        refs = [ray.put(np.asfortranarray(data[b])) for b in blocks]
        gc.collect()
        start = time.perf_counter()
        out = np.empty((side, side), dtype=np.float32, order="F")
        for b, part in zip(blocks, ray.get(refs)):
            out[b] = part
        elapsed = time.perf_counter() - start
        assert np.array_equal(out, data)
        return elapsed

    runs = {"ours": ours, "theirs": theirs}
    for run in runs.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for k in range(repeats):
        for name in (list(runs) if k % 2 == 0 else list(reversed(runs))):
            times[name].append(runs[name]())
    ratio = statistics.median(a / b for a, b in zip(times["ours"], times["theirs"]))
    print(f"{size_mib} MiB TiledEvictable, 4x4 tiles of ({tile}, {tile}) all on Ray, to one CPU array on this node, "
          f"{repeats} rounds (load average {os.getloadavg()[0]:.1f})")
    print(f"  ray.get of the 16 tiles + block copies into np.empty  {statistics.median(times['theirs']) * 1e3:8.1f} ms")
    print(f"  strideweave move(full, CPU) (\"tiled.to_cpu\")          {statistics.median(times['ours']) * 1e3:8.1f} ms"
          f"   ratio {ratio:5.2f}x")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
