"""docs/spec/interop-movement.md, "Requirement: Await results share one completion contract",
across fork (issue 11, item 6): a pending handle inherited by a child raises there, and a
handle done before the fork still answers.

Each scenario runs in a fresh interpreter (subprocess), so a fork does not disturb the pytest
process."""
import sys

import pytest

from fresh_interpreter import GATED_PROVIDER, run_script

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux /proc and fork")


def test_waiting_on_an_inherited_pending_handle_raises_in_the_child():
    out = run_script(GATED_PROVIDER + """
import os, threading
gate = threading.Event()
gated_slab(gate)
handle = gated_move([1.0, 2.0])
pid = os.fork()
if pid == 0:
    code = 3
    try:
        handle.wait()
        code = 1  # returned: impossible, the work lives in the parent
    except RuntimeError as e:
        code = 0 if "fork" in str(e) and str(os.getpid()) in str(e) else 2
    # The timed waits take the same path: they raise the fork error, never a TimeoutError
    # after the timeout and never a value.
    for timed in (lambda: handle.wait(1.0), lambda: handle.exception(1.0)):
        try:
            timed()
            code = code or 4
        except RuntimeError as e:
            code = code or (0 if "fork" in str(e) else 5)
        except BaseException:
            code = code or 6
    os._exit(code)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
gate.set()
print(handle.wait().tolist())
""")
    assert out.split() == ["0", "[1.0,", "2.0]"]


def test_a_handle_done_before_fork_still_answers_in_the_child():
    out = run_script("""
        import os
        import strideweave as sw
        c = sw.CPU(2)
        c[1] = 5.0
        handle = sw.move_async(sw.Tensor(c, 0, sw.Layout(sw.Shape([2]), sw.Stride([1]))), sw.CPU(2))
        handle.wait()
        pid = os.fork()
        if pid == 0:
            os._exit(0 if handle.wait().tolist() == [0.0, 5.0] else 1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """)
    assert out.split() == ["0"]
