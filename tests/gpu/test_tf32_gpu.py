"""float32 GEMMs on the GPU: ``ws.dot`` of float32 tiles runs on the tensor cores as tf32
(``wgmma ... m64nNk8.f32.tf32.tf32``), float32 out, against float64.

wgmma reads tf32 operands K-major only: a row-major A and a column-major B (or
``ws.trans`` of an (N, K) tile: ``a @ bt.T``) go straight from the TMA slots; a row-major
B (K, N) is read into registers and written K-major to the operand buffer before each dot
(``passes/layouts.py`` ``_stage_b``; with ``shared_operand_buffer=1`` one buffer that 2
or 3 groups splitting M write together). Fresh random inputs, NaN-poisoned outputs with guard rows, ragged shapes, 1, 2
and 3 consumer groups, persistent and not.

Tolerance: tf32 keeps 10 of fp32's 23 mantissa bits (the tensor cores drop the rest),
so each product is off by up to ~2^-10 relative; over K normal products the error of a
sum is ~sqrt(K) * 2^-10 * E|ab| against a max |ref| of ~4 sqrt(K) E|ab|: about 3e-4 of
max |ref|. ``TF32_TOL = 3e-3`` leaves room, and a wrong descriptor or K step (elements
read from the wrong place) is off by O(1).
"""
import numpy as np
import pytest

import numba_ws as ws
from gemm_checks import column_major
from kernels import matmul, matmul_nt, matmul_persistent

cp = pytest.importorskip("cupy")

TF32_TOL = 3e-3
GUARD = 3


def _inputs(M, N, K, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    base = cp.full((M + GUARD, N), cp.nan, dtype=cp.float32)
    return a, b, base, a.astype(np.float64) @ b.astype(np.float64)


def _check(base, ref, what):
    out = cp.asnumpy(base)
    M = ref.shape[0]
    assert np.isnan(out[M:]).all(), f"{what}: wrote past the last row"
    got = out[:M].astype(np.float64)
    assert not np.isnan(got).any(), f"{what}: {int(np.isnan(got).sum())} outputs never written"
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert err <= TF32_TOL, f"{what}: relative error {err:.3e}"
    # the tensor cores really ran tf32 (coarser than fp32 accumulation of fp32 products)
    assert err > 1e-6, f"{what}: error {err:.1e} is too small for tf32 inputs"


@pytest.fixture
def seed():
    return np.random.SeedSequence().entropy


@pytest.mark.parametrize("shared", [0, 1])
@pytest.mark.parametrize("b_form", ["row_major", "column_major"])
@pytest.mark.parametrize("groups,BM,BN,BK", [(1, 64, 128, 32), (2, 128, 128, 32),
                                             (2, 128, 256, 32), (2, 128, 64, 16),
                                             (3, 192, 128, 32)])
@pytest.mark.parametrize("M,N,K", [(300, 200, 136), (1000, 1000, 1000), (128, 256, 64)])
def test_fp32_gemm(M, N, K, groups, BM, BN, BK, b_form, shared, seed):
    a, b, base, ref = _inputs(M, N, K, seed)
    db = cp.asarray(b) if b_form == "row_major" else column_major(cp.asarray(b))
    grid = (ws.cdiv(M, BM) * ws.cdiv(N, BN),)
    ws.jit(matmul)[grid](cp.asarray(a), db, base[:M], BM=BM, BN=BN, BK=BK,
                         num_consumer_groups=groups, shared_operand_buffer=shared)
    cp.cuda.runtime.deviceSynchronize()
    _check(base, ref, f"seed {seed}, {b_form} b")


@pytest.mark.parametrize("groups", [1, 2])
def test_fp32_gemm_b_transposed_in_the_kernel(groups, seed):
    """``a @ bt.T`` with bt (N, K) row-major: the dot reads ``ws.trans`` of the loaded
    (BN, BK) tile, K-major, without the operand buffer."""
    M, N, K = 260, 136, 200
    a, b, base, ref = _inputs(M, N, K, seed)
    bt = cp.asarray(np.ascontiguousarray(b.T))
    BM = 64 * groups
    grid = (ws.cdiv(M, BM) * ws.cdiv(N, 128),)
    ws.jit(matmul_nt)[grid](cp.asarray(a), bt, base[:M], BM=BM, BN=128, BK=32,
                            num_consumer_groups=groups)
    cp.cuda.runtime.deviceSynchronize()
    _check(base, ref, f"seed {seed}, a @ bt.T")


def test_fp32_persistent_gemm(seed):
    M, N, K = 1000, 520, 264
    a, b, base, ref = _inputs(M, N, K, seed)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    ws.jit(matmul_persistent)[(sms,)](cp.asarray(a), cp.asarray(b), base[:M], BM=128,
                                      BN=128, BK=32, GROUP_M=8)
    cp.cuda.runtime.deviceSynchronize()
    _check(base, ref, f"seed {seed}, persistent")
