"""Issue 17 item 4 on the GPU: a kernel made by exec, and one in a ``python -c`` script,
launch (twice: the second from the in-memory cache) and give the right answer."""
import subprocess
import sys

import numpy as np
import pytest

import numba_ws as ws

cp = pytest.importorskip("cupy")

SOURCE = '''
def scale(x, y, BM: ws.constexpr, BN: ws.constexpr):
    r = ws.program_id(0) * BM
    ws.store(y, (r, 0), ws.load(x, (r, 0), (BM, BN)) * 3.0)
'''


def test_an_exec_kernel_launches_on_the_gpu():
    ns = {"ws": ws}
    exec(SOURCE, ns)
    kernel = ws.jit(ns["scale"])
    for _ in range(2):
        x = cp.asarray(np.random.default_rng().standard_normal((300, 64)).astype(np.float32))
        y = cp.full_like(x, cp.nan)
        kernel[(ws.cdiv(300, 64),)](x, y, BM=64, BN=64)
        assert cp.array_equal(y, x * 3.0)


def test_python_dash_c_on_the_gpu():
    code = ("import cupy as cp, numba_ws as ws\n"
            "def k(x, y, B: ws.constexpr):\n"
            "    i = ws.program_id(0) * B\n"
            "    ws.store(y, (i,), ws.load(x, (i,), (B,)) + 1.0)\n"
            "x = cp.arange(1000, dtype=cp.float32); y = cp.full(1000, cp.nan, cp.float32)\n"
            "ws.jit(k)[(ws.cdiv(1000, 256),)](x, y, B=256)\n"
            "print(bool(cp.array_equal(y, x + 1.0)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("True")
