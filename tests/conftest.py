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
