"""``@numba.cuda.jit(device=True)`` functions called on tiles inside a tile program."""
import numpy as np
import pytest

import numba_ws as ws
import kernels
from ptx_tools import assemble, resources


def _gelu64(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def _inputs(M=200, N=300, K=72):
    rng = np.random.default_rng()
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    return a, b, np.full((M, N), np.nan, np.float16)


def test_interpreter_applies_the_device_function_element_wise():
    a, b, c = _inputs()
    grid = (ws.cdiv(200, 64) * ws.cdiv(300, 64),)
    ws.jit(kernels.matmul_gelu)[grid](a, b, c, BM=64, BN=64, BK=32)
    ref = _gelu64(a.astype(np.float64) @ b.astype(np.float64))
    err = np.max(np.abs(c.astype(np.float64) - ref)) / np.max(np.abs(ref))
    assert err <= 1e-2


def test_explicit_map_with_scalars_and_tiles():
    def k(x, y, s, BM: ws.constexpr):
        t = ws.load(x, (0, 0), (BM, BM))
        ws.store(y, (0, 0), ws.map(kernels.gelu, t * s))
    x = np.random.default_rng().standard_normal((16, 16)).astype(np.float32)
    y = np.zeros_like(x)
    ws.jit(k)[(1,)](x, y, 0.5, BM=16)
    assert np.allclose(y, _gelu64(x.astype(np.float64) * 0.5), rtol=1e-5, atol=1e-6)


def test_device_function_epilogue_compiles_for_sm90a(tmp_path):
    a, b, c = _inputs(256, 512, 128)
    state = ws.jit(kernels.matmul_gelu).partition(a, b, c, BM=128, BN=256, BK=64)
    assert state.ws.channels and state.ws.partition_dim == "M"
    ptx = ws.jit(kernels.matmul_gelu).inspect_ptx(a, b, c, BM=128, BN=256, BK=64)
    assert "wgmma.mma_async" in ptx and "call.uni" not in ptx   # inlined per register
    regs, spills, stack = resources(assemble(ptx, tmp_path))
    assert regs <= 168


def test_non_numeric_device_function_is_a_clear_error():
    def k(x, y, BM: ws.constexpr):
        ws.store(y, (0, 0), ws.map(ws.zeros, ws.load(x, (0, 0), (BM, BM))))
    x = np.zeros((16, 16), np.float32)
    with pytest.raises(ws.WSCompileError, match="device=True"):
        ws.jit(k).partition(x, x, BM=16, num_consumer_groups=1)
