"""DLPack memory-safety stress: export/consume/drop cycles, for running under valgrind.

Each cycle exports from a fresh or a long-lived tensor and disposes of the capsule one of
four ways: NumPy consumes it (versioned), an unconsumed legacy capsule is dropped, an
unconsumed versioned capsule is dropped, or the capsule is consumed by hand (renamed) and
the managed deleter called through ctypes; or the call fails, in argument binding or in
validation, after the native method has started building its error. At the end the
long-lived tensor's reference count must be back where it started (each producer reference
dropped exactly once). tests/stress/README.md says how to read valgrind's output.

    PYTHONMALLOC=malloc valgrind --leak-check=full --errors-for-leak-kinds=definite \
        --error-exitcode=99 .venv/bin/python tests/stress/dlpack_stress.py 100000
"""
from __future__ import annotations

import gc
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import strideweave as sw  # noqa: E402
from dlpack_structs import call_deleter, consume  # noqa: E402


def main(cycles: int) -> None:
    lay = sw.Layout(sw.Shape([2, [3, 4]]), sw.Stride([1, [2, 6]]))
    carrier = sw.CPU(24)
    for i in range(24):
        carrier[i] = float(i)
    keep = sw.Tensor(carrier, 0, lay)
    base = sys.getrefcount(keep)
    checksum = 0.0
    for i in range(cycles):
        kind = i % 6
        if kind == 0:
            a = np.from_dlpack(keep)
            checksum += float(a[1, 2, 3])
            del a
        elif kind == 1:
            cap = keep.__dlpack__()
            del cap
        elif kind == 2:
            cap = keep.__dlpack__(max_version=(1, 0))
            del cap
        elif kind == 3:
            m = consume(keep.__dlpack__(max_version=(1, 0) if i % 2 else None))
            call_deleter(m)
        elif kind == 4:
            for bad in ({"version": (1, 0)}, {"max_version": (1, 0), "copy": True}):
                try:
                    keep.__dlpack__(**bad)
                except (TypeError, BufferError):
                    pass
                else:
                    raise AssertionError(f"__dlpack__(**{bad}) did not fail")
        else:
            # A temporary producer: the consumer's array is the only thing keeping it alive.
            c = sw.CPU(4, dtype=sw.DType.Int32)
            c[3] = i
            a = np.from_dlpack(sw.Tensor(c, 1, sw.Layout(sw.Shape([3]), sw.Stride([1]))))
            del c
            assert a[2] == i
            del a
    gc.collect()
    after = sys.getrefcount(keep)
    assert after == base, f"producer refcount {base} -> {after}"
    expected = (cycles + 5) // 6 * float(keep[1, [2, 3]])
    assert checksum == expected, (checksum, expected)
    print(f"dlpack stress: {cycles} cycles ok (refcount {base} -> {after})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
