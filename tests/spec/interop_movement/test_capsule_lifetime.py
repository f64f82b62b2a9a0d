"""docs/spec/interop-movement.md, "Requirement: A capsule keeps its producer alive but not released storage":
deleters run once, from any thread, and release, move and finalization are safe with capsules
outstanding."""
from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
import weakref

import numpy as np
import pytest

import strideweave as sw

from dlpack_sources import cpu_tensor
from dlpack_structs import USED_LEGACY, USED_VERSIONED, call_deleter, capsule_name, consume, dims, managed


def test_capsule_keeps_the_tensor_alive():
    t = cpu_tensor([1.0, 2.0])
    ref = weakref.ref(t)
    cap = t.__dlpack__(max_version=(1, 0))
    del t
    gc.collect()
    assert ref() is not None
    del cap
    gc.collect()
    assert ref() is None


def test_consumer_outlives_the_producing_expression():
    a = np.from_dlpack(cpu_tensor([4.0, 5.0, 6.0]))
    gc.collect()
    assert a.tolist() == [4.0, 5.0, 6.0]


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_unconsumed_capsule_runs_deleter_once(max_version):
    t = cpu_tensor([1.0, 2.0])
    ref = weakref.ref(t)
    base = sys.getrefcount(t)
    cap = t.__dlpack__(max_version=max_version)
    assert sys.getrefcount(t) == base + 1  # the managed tensor's strong reference
    cap2 = t.__dlpack__(max_version=max_version)
    assert sys.getrefcount(t) == base + 2
    del cap2
    gc.collect()
    assert sys.getrefcount(t) == base + 1  # dropped exactly once
    del cap
    gc.collect()
    assert sys.getrefcount(t) == base
    del t
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("max_version,used", [(None, USED_LEGACY), ((1, 0), USED_VERSIONED)])
def test_consumed_capsule_leaves_the_deleter_to_the_consumer(max_version, used):
    t = cpu_tensor([1.0, 2.0, 3.0])
    ref = weakref.ref(t)
    cap = t.__dlpack__(max_version=max_version)
    m = consume(cap)
    assert capsule_name(cap) == used
    del t, cap
    gc.collect()
    # The renamed capsule's destructor did nothing: the producer is still referenced.
    assert ref() is not None
    assert dims(m.dl_tensor) == ((3,), (1,))
    call_deleter(m)  # the consumer's single deleter call
    gc.collect()
    assert ref() is None


def test_deleter_called_from_another_thread_without_the_gil():
    # ctypes releases the GIL around foreign calls, so the deleter must attach by itself.
    t = cpu_tensor([1.0, 2.0])
    ref = weakref.ref(t)
    cap = t.__dlpack__(max_version=(1, 0))
    m = consume(cap)
    del t, cap
    worker = threading.Thread(target=call_deleter, args=(m,))
    worker.start()
    worker.join()
    gc.collect()
    assert ref() is None


def test_release_succeeds_while_a_capsule_is_outstanding():
    t = cpu_tensor([1.0, 2.0])
    cap = t.__dlpack__(max_version=(1, 0))
    address = managed(cap).dl_tensor.data
    assert address == t.carrier.pointer()
    assert t.carrier.release() is None
    assert t.carrier.is_released() and t.carrier.pointer() == 0
    del cap  # the deleter still runs cleanly after release
    gc.collect()


def test_move_succeeds_while_a_capsule_is_outstanding():
    t = cpu_tensor([1.0, 2.0])
    source = t.carrier
    cap = t.__dlpack__(max_version=(1, 0))
    address = managed(cap).dl_tensor.data
    moved = sw.move(t, sw.CPU(2))
    assert source.is_released()
    assert moved.carrier.pointer() != address
    assert [moved[0], moved[1]] == [1.0, 2.0]
    del cap
    gc.collect()


def test_finalization_with_outstanding_capsules_is_safe():
    # Unconsumed capsules, a consumed-but-undeleted one, and a daemon thread calling a
    # deleter, all left behind at interpreter exit.
    script = textwrap.dedent("""
        import sys, threading, time
        sys.path.insert(0, {tests!r})
        import numpy as np
        import strideweave as sw
        from dlpack_structs import consume, call_deleter
        c = sw.CPU(4)
        t = sw.Tensor(c, 0, sw.Layout(sw.Shape([4]), sw.Stride([1])))
        KEEP = [t.__dlpack__(), t.__dlpack__(max_version=(1, 0)), np.from_dlpack(t)]
        LEAK = consume(t.__dlpack__(max_version=(1, 0)))
        pending = [consume(t.__dlpack__()) for _ in range(200)]
        def late():
            for m in pending:
                call_deleter(m)
                time.sleep(0.0005)
        threading.Thread(target=late, daemon=True).start()
        del t
        print("ok")
    """).format(tests=str(__import__("pathlib").Path(__file__).parents[2]))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    assert "Fatal" not in proc.stderr and "panic" not in proc.stderr
