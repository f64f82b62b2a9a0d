"""Shared fixtures. Test modules import strideweave as `sw` and build what they need.

The suite is laid out by purpose: `spec/` holds the specification's scenarios and the
behaviours the issues ask for, through public API only, one folder per document of docs/spec/
and one file per section (`spec/tensor_and_carriers/test_s3_2_evictable.py`); `internal/`
tests the native pieces (`_native` functions, the element fast path, the engine); `typing/`
the typed user script and stub checks; `interop/` third-party consumers (run by `make
test-interop`); `stress/` and `wheel/` are scripts run by their own make targets. Helpers
several test files share (`blockdev_fixture`, `dlpack_structs`, `gated_moves`, ...) live here
in `tests/`, which is put on `sys.path` for every test module."""
import gc
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))


@pytest.fixture
def collect():
    """Run a full garbage collection (for finalizer and capsule lifetime tests)."""
    def run():
        for _ in range(3):
            gc.collect()
    return run


_INTEROP = __import__("pathlib").Path(__file__).parent / "interop"


def pytest_ignore_collect(collection_path, config):
    """tests/interop (third-party consumers such as PyTorch) runs only when asked for by path,
    as `make test-interop` does; plain `pytest` (make test) skips the directory, so nothing
    runs twice when both targets run on one machine."""
    if collection_path != _INTEROP:
        return None
    import pathlib

    for arg in config.args:
        target = pathlib.Path(str(arg).split("::")[0]).resolve()
        if target == _INTEROP or _INTEROP in target.parents:
            return None
    return True
