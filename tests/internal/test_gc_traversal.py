"""The garbage collector may traverse a native base's instance at any allocation, including
while a Python subclass instance is being built; a field that reads a zero-filled object as
"set" crashes there (a zero-filled `OnceLock` did). With collection forced at every
allocation, building and moving many carriers and tensors must not crash (run in a child
process, so a crash is a failed test)."""
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import gc
    import strideweave as sw
    gc.set_threshold(1, 1, 1)
    lay = sw.Layout(sw.Shape(64), sw.Stride(1))
    keep = []
    for i in range(3000):
        t = sw.Tensor(sw.CPU(64), 0, lay)
        keep.append(sw.move(t, sw.CPU(64)) if i % 3 == 0 else t)
        if i % 500 == 0:
            keep.clear()
    print("ok")
""")


def test_collection_at_every_allocation_never_crashes():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.returncode, out.stderr[-2000:])
