"""A Numba device function as a GEMM epilogue, compiled by numba_ws and run on the GPU."""
import numpy as np
import pytest

import numba_ws as ws
from kernels import matmul_gelu

cp = pytest.importorskip("cupy")


def test_gelu_epilogue_on_the_gpu():
    M, N, K = 1000, 1000, 512
    rng = np.random.default_rng()
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = cp.full((M, N), cp.nan, dtype=cp.float16)
    grid = (ws.cdiv(M, 128) * ws.cdiv(N, 256),)
    ws.jit(matmul_gelu)[grid](cp.asarray(a), cp.asarray(b), c, BM=128, BN=256, BK=64)
    x = a.astype(np.float64) @ b.astype(np.float64)
    ref = 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))
    out = cp.asnumpy(c).astype(np.float64)
    assert not np.isnan(out).any()
    assert np.max(np.abs(out - ref)) / np.max(np.abs(ref)) <= 1e-2
