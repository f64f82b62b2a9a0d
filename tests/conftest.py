"""Shared fixtures. Test modules import strideweave as `sw` and build what they need."""
import gc

import pytest


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
