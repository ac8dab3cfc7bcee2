"""tests/gpu needs a CUDA GPU (and CuPy); every test here is skipped without one."""
import pytest


def _gpu_available():
    try:
        from numba import cuda
        return cuda.is_available()
    except Exception:
        return False


GPU = _gpu_available()


def pytest_collection_modifyitems(config, items):
    if GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (numba.cuda.is_available() is False)")
    for item in items:
        if "tests/gpu" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)
