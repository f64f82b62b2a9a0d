"""`_native` checks its own arguments: hostile integers and objects raise, never crash.

`native_fuzz.py` runs in a child process so that a crash (a negative return code: the
signal) fails this test with the child's output, and a hang fails it at the timeout."""
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).with_name("native_fuzz.py")


@pytest.mark.parametrize("seed, limit", [(1, []), (2, []), (3, ["--rlimit-as"]), (4, ["--rlimit-as"])])
def test_hostile_arguments_never_crash_native_code(seed, limit):
    """Half the calls are the mismatch family (list arguments of different lengths, sizes
    negative or beyond memory); seeds 3 and 4 run under an 8 GiB RLIMIT_AS, where an
    allocation sized by an argument must raise MemoryError instead of aborting."""
    result = subprocess.run([sys.executable, str(SCRIPT), str(seed), "4000", *limit],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (result.returncode, result.stdout[-2000:], result.stderr[-4000:])
    assert "fuzzed" in result.stdout


def test_the_fuzzer_reaches_every_native_function():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import native_fuzz
    finally:
        sys.path.pop(0)
    from strideweave import _native
    names = {name for name, _ in native_fuzz.TARGETS}
    functions = {n for n in dir(_native) if not n.startswith("__") and callable(getattr(_native, n))
                 and not isinstance(getattr(_native, n), type)}
    assert functions <= names
    assert {"HostStorage.set", "FileStorage.resize", "AwaitResult._succeed", "BlockDeviceHandle"} <= names
