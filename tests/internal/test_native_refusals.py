"""`_native` refuses bad arguments with an exception naming the argument, never a panic or
an abort (issue 22 items 4 and 5).

A PyO3 panic surfaces as PanicException, a BaseException that `except Exception` does not
catch, so each check below asserts the exact class. The allocation checks run in a child
process under an 8 GiB RLIMIT_AS: an infallible allocation there aborts the child ("memory
allocation of N bytes failed"), which the test reports with the child's output."""
import os
import subprocess
import sys
import textwrap

import pytest

from strideweave import _native


def operand(count=16, offset=0, strides=(1,)):
    return (_native.HostStorage("f32", count), offset, list(strides))


@pytest.mark.parametrize("extents, strides", [([4], [1, 1]), ([4, 2], [1]), ([], [1]), ([0], [1, 1]),
                                              ([2, 0], [1]), ([0], [])])
def test_sum_f32_with_strides_of_another_rank_is_a_value_error_naming_the_operand(extents, strides):
    with pytest.raises(ValueError, match=r"^a: "):
        _native.sum_f32(extents, operand(strides=strides))


@pytest.mark.parametrize("extents", [[0], [3, 0]])
def test_binary_and_unary_kernels_check_ranks_even_when_empty(extents):
    out = _native.HostStorage("f32", 16)
    with pytest.raises(ValueError, match=r"^b: "):
        _native.binary_f32("add", extents, operand(strides=[1] * len(extents)), operand(strides=[1, 1, 1]), out,
                           [1] * len(extents))
    with pytest.raises(ValueError, match=r"^out: "):
        _native.unary_f32("copy", extents, operand(strides=[1] * len(extents)), out, [])


def test_an_empty_sum_with_matching_ranks_is_zero():
    assert _native.sum_f32([0, 3], operand(strides=[1, 1])) == 0.0


def run_limited(code: str) -> subprocess.CompletedProcess:
    script = "import resource\nresource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)


def assert_child_ok(result):
    assert result.returncode == 0, (result.returncode, result.stdout[-2000:], result.stderr[-4000:])
    assert result.stdout.strip().endswith("ok"), result.stdout


def test_host_storage_many_beyond_memory_is_memory_error():
    assert_child_ok(run_limited("""
        from strideweave import _native
        try:
            _native.HostStorage.many('f32', 0, 2**40)
        except MemoryError as e:
            print('MemoryError', e)
        print('ok')
    """))


def test_file_slab_allocate_beyond_memory_is_memory_error_and_takes_nothing(tmp_path):
    path = tmp_path / "slab.bin"
    assert_child_ok(run_limited(f"""
        import os
        from strideweave import _native
        slab = _native.FileSlab({str(path)!r}, 'f32', 4)
        try:
            slab.allocate(2**31 - 1)
        except MemoryError:
            pass
        else:
            raise SystemExit('allocate(2**31 - 1) did not raise MemoryError')
        assert slab.live == 0, slab.live
        assert not os.path.exists({str(path)!r}) or os.path.getsize({str(path)!r}) == 0
        assert len(slab.allocate(3)) == 3
        print('ok')
    """))


def test_to_list_of_a_file_beyond_memory_is_memory_error(tmp_path):
    path = tmp_path / "sparse.bin"
    assert_child_ok(run_limited(f"""
        from strideweave import _native
        storage = _native.FileStorage({str(path)!r}, 'f32')
        storage.resize(2**31)
        try:
            storage.to_list()
        except MemoryError:
            pass
        else:
            raise SystemExit('to_list() of 2**31 slots did not raise MemoryError')
        storage.set(5, 2.5)
        assert storage.get(5) == 2.5
        storage.release()
        print('ok')
    """))
