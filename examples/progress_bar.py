"""Drive a progress bar from a long move: a 1 GiB CPU -> FileBacked move_async, polled
through AwaitMove.bytes_done / bytes_total while the engine copies.

    .venv/bin/python examples/progress_bar.py [MiB]

Uses tqdm when it is installed (`pip install tqdm`) and a plain text line otherwise.
"""
from __future__ import annotations

import importlib.util
import sys
import time

import strideweave as sw


def main(mib: int = 1024) -> None:
    n = mib * (1 << 20) // 4
    source = sw.Tensor(sw.CPU(n), 0, sw.Layout(sw.Shape([n]), sw.Stride([1])))
    source[n - 1] = 42.0
    with sw.no_grad():
        handle = sw.move_async(source, sw.FileBacked(dtype=sw.DType.Float32))
    if importlib.util.find_spec("tqdm") is not None:
        from tqdm import tqdm

        with tqdm(total=handle.bytes_total, unit="B", unit_scale=True, desc="CPU -> FileBacked") as bar:
            while not handle.done:
                bar.update(handle.bytes_done - bar.n)
                time.sleep(0.02)
            bar.update(handle.bytes_done - bar.n)
    else:
        while not handle.done:
            print(f"\r{handle.bytes_done >> 20} / {handle.bytes_total >> 20} MiB", end="", flush=True)
            time.sleep(0.02)
        print(f"\r{handle.bytes_done >> 20} / {handle.bytes_total >> 20} MiB")
    moved = handle.wait()
    assert moved[n - 1] == 42.0 and isinstance(moved.carrier, sw.FileBacked)
    print(f"moved {handle.bytes_total >> 20} MiB to {moved.carrier.path}")
    moved.carrier.release()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1024)
