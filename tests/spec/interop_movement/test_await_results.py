"""docs/spec/interop-movement.md, "Requirement: Await results share one completion contract",
and the progress of a move a caller can poll (issue 13): AwaitMove.bytes_done and
bytes_total."""
import threading

import pytest

import strideweave as sw
from strideweave import CPU, FileBacked, Layout, Shape, Stride, Tensor

from gated_moves import GateCompletion, start


def L(shape, stride):
    return Layout(Shape(shape), Stride(stride))


def test_wait_for_a_move_more_than_once_from_two_threads():
    completion = GateCompletion()
    t, dest, handle = start([1.0, 2.0], completion)
    seen = []
    barrier = threading.Barrier(3)

    def waiter():
        barrier.wait()
        seen.append(handle.wait())

    threads = [threading.Thread(target=waiter) for _ in range(2)]
    for th in threads:
        th.start()
    barrier.wait()
    completion.gate.set()
    for th in threads:
        th.join(10)
    assert len(seen) == 2 and seen[0] is seen[1] is handle.wait()


# ----- the completion interface ---------------------------------------------------------------

def test_completion_interface_has_no_coroutine_protocol():
    handle = sw.move_async(Tensor(CPU(1), 0, L(1, 1)), CPU(1))
    assert not hasattr(handle, "__await__") and not hasattr(handle, "await")
    assert handle.wait() is handle.wait()
    with pytest.raises(TypeError):
        sw.AwaitMove()
    with pytest.raises(TypeError):
        sw.AwaitResult()
    assert sw.AwaitMove[sw.Tensor] is not None


def test_handles_are_read_only():
    handle = sw.move_async(Tensor(CPU(1), 0, L(1, 1)), CPU(1))
    handle.wait()
    with pytest.raises(AttributeError):
        handle.done = False


F32 = sw.DType.Float32
CHUNK = 8 << 20


def flat(n):
    return Layout(Shape([n]), Stride([1]))


def test_a_bulk_move_counts_its_chunks_up_to_the_total():
    n = 10 << 20  # 40 MiB: five 8 MiB chunks
    t = Tensor(CPU(n), 0, flat(n))
    t[n - 1] = 3.0
    seen = []
    with sw.no_grad():
        handle = sw.move_async(t, FileBacked(dtype=F32))
        assert handle.bytes_total == 4 * n
        while not handle.done:
            seen.append(handle.bytes_done)
        result = handle.wait()
    assert result[n - 1] == 3.0
    assert handle.bytes_done == handle.bytes_total == 4 * n
    assert seen == sorted(seen), "progress never goes backwards"
    assert all(v % CHUNK == 0 or v == 4 * n for v in seen), "progress moves chunk by chunk"


def test_the_total_is_the_cosize_span_in_bytes_and_small_moves_finish_at_the_total():
    layout = Layout(Shape([3, 2]), Stride([1, 5]))  # cosize 8
    t = Tensor(CPU(8), 0, layout)
    handle = sw.move_async(t, CPU(8))
    handle.wait()
    assert (handle.bytes_done, handle.bytes_total) == (32, 32)
    g = Tensor(sw.Generic([1, 2], dtype=sw.DType.Int32), 0, flat(2))
    h2 = sw.move_async(g, sw.Generic([0, 0], dtype=sw.DType.Int32))
    h2.wait()
    assert (h2.bytes_done, h2.bytes_total) == (8, 8)


def test_a_failed_move_never_reports_completion():
    class Failing(sw.MoveOperation):
        def _copy(self, tensor, destination, output, element_count):
            raise OSError("device lost")

    class Src(CPU):
        pass

    with sw.registered_move_operation(Src, CPU, Failing):
        handle = sw.move_async(Tensor(Src(4), 0, flat(4)), CPU(4))
        with pytest.raises(OSError):
            handle.wait()
    assert handle.bytes_done == 0 and handle.bytes_total == 16


def test_progress_is_read_only():
    handle = sw.move_async(Tensor(CPU(4), 0, flat(4)), CPU(4))
    with pytest.raises(AttributeError):
        handle.bytes_done = 5
    handle.wait()


def test_the_progress_bar_example_runs():
    import pathlib
    import subprocess
    import sys
    script = pathlib.Path(__file__).parents[3] / "examples" / "progress_bar.py"
    result = subprocess.run([sys.executable, str(script), "32"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "moved 32 MiB" in result.stdout
