"""Stream the weights of a linear stack from files through NumPy matmuls, one layer ahead.

    .venv/bin/python examples/stream_weights.py [--layers 16] [--size 512] [--passes 3]

Each layer's weights (size × size Float32) live in an `Evictable` whose secondary tier is a
file (`FileBacked`) and whose primary is host memory (`CPU`). With `retain_clean=True`,
`promote()` copies the file into memory and keeps the file as a clean copy, so evicting a
layer that was only read frees its memory without writing anything back. `promote_async()`
starts bringing the next layer in on an engine thread while this one is multiplied, so the
I/O overlaps the compute; `wait()` on its handle before reading the layer. (A layer of 4 MiB
or more is copied lazily: the primary maps the file copy-on-write, reading the page cache as
`np.memmap` does, and reads the file into memory only when it is not all cached. A write to
the primary never reaches the file.)

At the issue's size (`--layers 16 --size 2048`, 256 MiB of weights) a pass with a warm page
cache costs about what it costs with every weight in RAM (benches/bench_stream_weights.py
measures it). The default is small, so the example runs in a second or two.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import numpy.typing as npt

import strideweave as sw

F32 = sw.DType.Float32


def weights_of(ev: sw.Evictable, size: int) -> npt.NDArray[np.float32]:
    """A read-only NumPy view of a promoted layer's weights (DLPack, no copy)."""
    flat = sw.Tensor(ev.primary, 0, sw.Layout.canonical(sw.Shape(size * size)))
    view: npt.NDArray[np.float32] = np.asarray(np.from_dlpack(flat), dtype=np.float32)  # no copy
    return view.reshape(size, size)


def make_layers(layers: int, size: int, seed: int = 0) -> list[sw.Evictable]:
    """One evicted Evictable per layer: random weights written to their own file."""
    rng = np.random.default_rng(seed)
    stack = []
    for _ in range(layers):
        primary = sw.CPU(size * size, dtype=F32)
        flat = sw.Tensor(primary, 0, sw.Layout.canonical(sw.Shape(size * size)))
        np.from_dlpack(flat)[:] = rng.standard_normal(size * size, dtype=np.float32) / np.sqrt(size)
        ev = sw.Evictable(primary, sw.FileBacked(dtype=F32), retain_clean=True)
        ev.evict()  # the first eviction writes the file; later ones of unchanged weights do not
        stack.append(ev)
    return stack


def forward(stack: list[sw.Evictable], x: npt.NDArray[np.float32], size: int) -> npt.NDArray[np.float32]:
    """One pass: layer k is multiplied while layer k + 1 is being read."""
    pending = stack[0].promote_async()
    for k, ev in enumerate(stack):
        pending.wait()
        if k + 1 < len(stack):
            pending = stack[k + 1].promote_async()  # prefetch the next layer
        w = weights_of(ev, size)
        x = np.tanh(x @ w)
        del w  # no view may outlive the layer's memory
        ev.evict()  # clean: frees the memory, writes nothing
    return x


def main() -> None:
    parser = argparse.ArgumentParser(description="Stream layer weights from files through NumPy matmuls.")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    stack = make_layers(args.layers, args.size)
    x0 = np.random.default_rng(1).standard_normal((args.batch, args.size), dtype=np.float32)
    # The same pass with every weight in RAM, to check the streamed result.
    in_ram = []
    for ev in stack:
        ev.promote()
        in_ram.append(weights_of(ev, args.size).copy())
        ev.evict()
    expected = x0
    for w in in_ram:
        expected = np.tanh(expected @ w)
    try:
        for p in range(args.passes):
            start = time.perf_counter()
            y = forward(stack, x0, args.size)
            elapsed = time.perf_counter() - start
            assert np.allclose(y, expected, rtol=1e-5, atol=1e-6)
            print(f"pass {p}: {args.layers} layers of {args.size}x{args.size} Float32 streamed "
                  f"in {elapsed * 1000:.1f} ms")
    finally:
        for ev in stack:
            ev.release()


if __name__ == "__main__":
    main()
