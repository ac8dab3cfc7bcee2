"""What ``import numba_ws`` loads (issue 17: import <= 0.3 s): neither numba-cuda nor
NumPy, whose import alone is 0.2-0.28 s on the H200 host; NumPy objects are still
recognised once a user has NumPy loaded."""
import os
import subprocess
import sys

import numpy as np
import pytest

from numba_ws.language.dtypes import numpy_instance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = """
import sys
import numba_ws as ws

@ws.jit
def copy(x, y, B: ws.constexpr):
    ws.store(y, (0,), ws.load(x, (0,), (B,)))

print(repr(ws.float16), ws.cdiv(7, 2), sorted(m for m in ("numpy", "numba", "numba.cuda",
                                                         "ml_dtypes") if m in sys.modules))
"""


def test_import_and_decorating_a_kernel_load_neither_numpy_nor_numba():
    res = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["ws.float16", "4", "[]"]


def test_numpy_objects_are_recognised_once_numpy_is_loaded():
    assert numpy_instance(np.float32(2), "generic")
    assert numpy_instance(np.bool_(True), "bool_") and not numpy_instance(True, "bool_")
    assert numpy_instance(np.zeros(2), "ndarray", "generic")
    assert not numpy_instance(2.0, "floating") and not numpy_instance([1], "ndarray")
    assert numpy_instance(np.dtype("f2"), "dtype")


COMPILE = """
import sys
import numpy as np
import numba_ws as ws

@ws.jit
def copy(x, y, B: ws.constexpr):
    ws.store(y, (0,), ws.load(x, (0,), (B,)))

x = np.zeros(64, np.float32)
assert ".entry" in copy.inspect_ptx(x, x, B=64)
from numba.cuda.np import arraymath, linalg
print("scipy.linalg" in sys.modules, arraymath._HAVE_BLAS, linalg.ensure_blas.__name__,
      "ml_dtypes" in sys.modules)
"""


def test_the_first_compile_imports_neither_scipy_nor_ml_dtypes():
    """numba-cuda's np.arraymath probes host BLAS (importing scipy.linalg) when the CUDA
    target first loads it; compiler.py answers the probe "none" for that import only.
    ml_dtypes (0.5 s to load) waits for a user of it (numba_ws/defer_ml_dtypes.py)."""
    res = subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["False", "False", "ensure_blas", "False"]


LATER = """
import sys
{first}
import numba_ws
import numba.cuda
from numba.cuda.np import numpy_support
from numba.cuda.typing.typeof import typeof
import cuda.core._memoryview as core_view
import numpy as np
loaded_with_numba = "ml_dtypes" in sys.modules
import ml_dtypes
print(loaded_with_numba, numpy_support.FROM_DTYPE[np.dtype(ml_dtypes.bfloat16)],
      numpy_support.ml_dtypes is ml_dtypes, core_view.bfloat16 is ml_dtypes.bfloat16,
      typeof(np.zeros(3, ml_dtypes.bfloat16)))
"""


@pytest.mark.parametrize("first, defer, loaded_with_numba", [
    ("", "1", "False"),                     # deferred, then imported by the user
    ("", "0", "True"),                      # NUMBA_WS_DEFER_ML_DTYPES=0: as without numba_ws
    ("import ml_dtypes", "1", "True"),      # already loaded: nothing to defer
])
def test_numba_cuda_and_cuda_core_see_ml_dtypes_once_it_is_imported(first, defer,
                                                                  loaded_with_numba):
    res = subprocess.run([sys.executable, "-c", LATER.format(first=first)],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": ROOT,
                              "NUMBA_WS_DEFER_ML_DTYPES": defer})
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == [loaded_with_numba, "__nv_bfloat16", "True", "True",
                                  "array(__nv_bfloat16,", "1d,", "C)"]
