"""ws.atomic_add without a GPU: the interpreter's semantics (adds in the array's dtype,
bounds, masks, errors), the schedule simulator on the one-pass split-K GEMM, and the PTX
of both GPU paths (red.global.add per element; the staged bulk reduce of tma_store=1),
assembled by ptxas. tests/gpu/test_atomic_add_gpu.py runs them."""
import numpy as np
import pytest

import numba_ws as ws
from numba_ws.errors import WSCompileError, WSUsageError
from numba_ws.examples import matmul_splitk_atomic

from ptx_tools import assemble, resources


def add_tile(x, y, ROW: ws.constexpr, COL: ws.constexpr):
    t = ws.load(x, (0, 0), (4, 8))
    ws.atomic_add(y, (ROW, COL), t, mask=t > 0)


def add_twice(x, y):
    t = ws.load(x, (0,), (16,))
    ws.atomic_add(y, (0,), t)
    ws.atomic_add(y, (0,), t * 2)


def _interpret(monkeypatch):
    monkeypatch.setenv("NUMBA_WS_INTERPRET", "1")


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int32])
def test_splitk_atomic_gemm_in_the_interpreter(monkeypatch, dtype):
    _interpret(monkeypatch)
    rng = np.random.default_rng(1)
    M, N, K = 200, 136, 330
    a = rng.integers(-3, 4, (M, K)).astype(np.float16)
    b = rng.integers(-3, 4, (K, N)).astype(np.float16)
    c = np.zeros((M, N), dtype)
    grid = (ws.cdiv(M, 128) * ws.cdiv(N, 128) * 3,)
    ws.jit(matmul_splitk_atomic)[grid](a, b, c, BM=128, BN=128, BK=64, SPLIT_K=3)
    ref = a.astype(np.int64) @ b.astype(np.int64)      # small integers: exact in fp16
    np.testing.assert_array_equal(c.astype(np.int64), ref)


def test_masked_and_clipped(monkeypatch):
    _interpret(monkeypatch)
    x = np.arange(-16, 16, dtype=np.float32).reshape(4, 8)
    y = np.full((5, 6), 100.0, np.float32)
    ws.jit(add_tile)[(3,)](x, y, ROW=2, COL=1)        # three programs add the same tile
    want = np.full((5, 6), 100.0, np.float32)
    part = x[:3, :5]                                  # rows 2..4, columns 1..5 of y
    want[2:, 1:] += 3 * np.where(part > 0, part, 0)
    np.testing.assert_array_equal(y, want)


def test_rounds_in_the_array_dtype(monkeypatch):
    _interpret(monkeypatch)
    x = np.full(16, 0.1, np.float16)
    y = np.full(16, 2048.0, np.float16)               # fp16 spacing at 2048 is 2
    ws.jit(add_twice)[(1,)](x, y)
    np.testing.assert_array_equal(y, np.full(16, 2048.0, np.float16))


def test_interpreter_errors(monkeypatch):
    _interpret(monkeypatch)
    x = np.ones(16, np.float32)
    with pytest.raises(WSUsageError, match="atomic_add.*dtype int8"):
        ws.jit(add_twice)[(1,)](x, np.zeros(16, np.int8))
    y = np.zeros(16, np.float32)
    y.flags.writeable = False
    with pytest.raises(WSUsageError, match="read-only"):
        ws.jit(add_twice)[(1,)](x, y)


def test_gpu_compile_names_the_dtype():
    with pytest.raises(WSCompileError, match="atomic_add.*int8.*expected one of"):
        ws.jit(add_twice).inspect_ptx(np.ones(16, np.float32), np.zeros(16, np.int8))


def _gemm_arrays(out=np.float16):
    a = np.zeros((512, 1024), np.float16)
    return a, np.zeros((1024, 512), np.float16), np.zeros((512, 512), out)


@pytest.mark.parametrize("out,red", [(np.float16, "red.global.add.noftz.f16"),
                                     (np.float32, "red.global.add.f32")])
def test_direct_ptx(tmp_path, out, red):
    ptx = ws.jit(matmul_splitk_atomic).inspect_ptx(*_gemm_arrays(out), BM=128, BN=128, BK=64,
                                                   SPLIT_K=2)
    assert ptx.count(red) == 64            # 64x128 per group: 64 elements per thread
    assert "cp.reduce.async.bulk" not in ptx
    regs, spills, stack = resources(assemble(ptx, tmp_path))
    assert spills == [0, 0] and stack == 0


def test_staged_ptx_is_a_bulk_reduce(tmp_path):
    ptx = ws.jit(matmul_splitk_atomic).inspect_ptx(*_gemm_arrays(), BM=128, BN=256, BK=64,
                                                   SPLIT_K=2, tma_store=1)
    assert ptx.count("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile") == 4
    assert "red.global" not in ptx and "cp.async.bulk.tensor.2d.global.shared" not in ptx
    assemble(ptx, tmp_path)


def test_bf16_needs_sm90():
    a = np.zeros((512, 1024), np.float16)
    import ml_dtypes
    a16 = a.astype(ml_dtypes.bfloat16)
    c = np.zeros((512, 512), ml_dtypes.bfloat16)
    with pytest.raises(WSCompileError, match="bfloat16 needs sm_90"):
        ws.jit(matmul_splitk_atomic).inspect_ptx(a16, a16.T.copy(), c, BM=128, BN=128,
                                                 BK=64, SPLIT_K=2, cc=(8, 0))


def test_simulator_finds_no_race():
    a, b, c = _gemm_arrays()
    report = ws.verify(matmul_splitk_atomic, (4,), a, b, c, seeds=1, max_programs=2,
                       exact=False, BM=128, BN=128, BK=64, SPLIT_K=2)
    assert report.ok, report
