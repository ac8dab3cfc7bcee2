"""A dot's B operand held in registers (a masked load, a dequantized weight) is written
to the warp group's operand buffer in shared memory before the dot
(``passes/layouts.py`` ``_stage_b``, ``codegen/operand_stage.py``): ptxas, the schedule
simulator against the interpreter, and the refusal where no swizzle fits."""
import ml_dtypes
import numpy as np
import pytest

import numba_ws as ws
import kernels_masks as km
from ptx_tools import assemble, resources

DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _masked_ab_args(rng, dt, M=200, N=136, K=168):
    a = rng.uniform(-1, 1, (M, K)).astype(dt)
    b = rng.uniform(-1, 1, (K, N)).astype(dt)
    return a, b, np.full((M, N), np.nan, dt)


def _dequant_args(rng, dt, M=200, N=136, K=168):
    a = rng.uniform(-1, 1, (M, K)).astype(dt)
    w = rng.integers(-127, 128, (K, N)).astype(np.int8)
    scale = rng.uniform(0.001, 0.01, N).astype(np.float32)
    return a, w, scale, np.full((M, N), np.nan, dt)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("groups,BM,BN", [(1, 64, 128), (2, 128, 128), (2, 128, 64)])
@pytest.mark.parametrize("kernel", ["masked_ab", "dequant"])
def test_register_b_assembles_without_spills(tmp_path, kernel, groups, BM, BN, dtype):
    rng = np.random.default_rng(0)
    dt = DTYPES[dtype]
    meta = dict(BM=BM, BN=BN, BK=64, num_consumer_groups=groups)
    if kernel == "masked_ab":
        fn, args, meta["KEEP"] = km.gemm_masked_ab, _masked_ab_args(rng, dt), 150
    else:
        fn, args = km.gemm_dequant, _dequant_args(rng, dt)
    kern = ws.jit(fn)
    ptx = kern.inspect_ptx(*args, **meta)
    assert "fence.proxy.async.shared::cta;" in ptx
    assert "wgmma.wait_group.sync.aligned 0;" in ptx
    plan = kern.partition(*args, **meta).ws
    assert any("b is a register tile: written to shared memory" in n for n in plan.notes)
    # one 1024-aligned region per consumer group, after everything else, inside the total
    assert plan.stage_bytes == 64 * BN * 2 and plan.stage_offset % 1024 == 0
    assert plan.stage_offset + groups * plan.stage_bytes <= plan.smem_bytes
    regs, spills, stack = resources(assemble(ptx, tmp_path))
    assert spills == [0, 0] and stack == 0


def test_masked_b_on_sm80_assembles(tmp_path):
    rng = np.random.default_rng(1)
    ptx = ws.jit(km.gemm_masked_ab).inspect_ptx(*_masked_ab_args(rng, np.float16), cc=(8, 0),
                                                KEEP=150, BM=128, BN=128, BK=64)
    assemble(ptx, tmp_path, arch="sm_80")


def test_register_b_too_narrow_for_sm80_is_a_clear_error():
    """sm_80's ldmatrix path reads only the 128-byte swizzle: a 32 x 32 fp16 B (64-byte
    rows either way) is refused, naming the dot's line."""
    rng = np.random.default_rng(2)
    with pytest.raises(ws.WSCompileError, match=r"b in registers \(32, 32\).*multiple of 128"):
        ws.jit(km.gemm_masked_ab).inspect_ptx(*_masked_ab_args(rng, np.float16), cc=(8, 0),
                                              KEEP=150, BM=64, BN=32, BK=32,
                                              num_consumer_groups=1)


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("kernel", ["masked_ab", "dequant"])
def test_register_b_schedule_matches_the_interpreter(kernel, groups):
    """Ragged M, N, K; KEEP inside the last K block."""
    rng = np.random.default_rng(3)
    if kernel == "masked_ab":
        fn, args, extra = km.gemm_masked_ab, _masked_ab_args(rng, np.float16), {"KEEP": 150}
    else:
        fn, args, extra = km.gemm_dequant, _dequant_args(rng, np.float16), {}
    grid = (ws.cdiv(200, 128) * ws.cdiv(136, 128),)
    report = ws.verify(fn, grid, *args, BM=128, BN=128, BK=64, num_consumer_groups=groups,
                       seeds=1, **extra)
    assert report.ok, str(report)
