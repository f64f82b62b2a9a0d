import strideweave as sw


def test_native_module_loads():
    assert sw.__version__ == "0.1.0"
