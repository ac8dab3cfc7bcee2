"""Flash-attention forward (tests/kernels.py ``attention_fwd``) compiled for sm_80 on the
GPU: every launch here is compiled for compute capability 8.0 (``NUMBA_WS_CC=8.0``),
which an H200 runs as well as an A100, against a float64 reference.

On sm_80 both GEMMs are ``mma.sync.m16n8k16``: q k^T with A (q) and B (a transposed
view of k) read by ldmatrix (codegen/mma_sync.py ``gpu_dot_sm80``), p v with A =
``p.astype(fp16)`` straight from the registers (``gpu_dot_rs_sm80``). Every case draws
fresh random inputs and NaN-poisons the output first; the check is
``max|o - ref| / max|ref| <= 2e-2`` (1e-2 for the chained GEMM), as tests/gpu/
test_attention.py does for sm_90a.
"""
import numpy as np
import pytest

import numba_ws as ws
from numba_ws import knobs
from kernels import attention_fwd
from test_attention import TOL, reference
from test_frag_math import chained_gemm

cp = pytest.importorskip("cupy")
attention = ws.jit(attention_fwd)
chained = ws.jit(chained_gemm)


@pytest.fixture(autouse=True)
def _sm80():
    with knobs.scope(NUMBA_WS_CC="8.0"):
        yield


def _compiled_for_sm80(kernel):
    """Every specialization the launches loaded is sm_80 PTX with mma.sync, no wgmma."""
    ptx = [loaded.art.ptx for loaded in kernel._loaded.values()]
    return bool(ptx) and all(".target sm_80" in p and "mma.sync.aligned.m16n8k16" in p
                             and "wgmma" not in p and "setmaxnreg" not in p for p in ptx)


def _check(out, ref, tol):
    out = cp.asnumpy(out).astype(np.float64)
    assert not np.isnan(out).any(), f"{np.isnan(out).sum()} outputs NaN (never written?)"
    err = np.max(np.abs(out - ref)) / np.max(np.abs(ref))
    bad = np.argwhere(np.abs(out - ref) > tol * np.max(np.abs(ref)))
    assert err <= tol, f"relative error {err:.3e}; first bad (row, col): {bad[:5].tolist()}"


def run(heads, seq_len, D, sm_scale, BM=128, BN=64, **options):
    rng = np.random.default_rng()
    host = [rng.standard_normal((heads * seq_len, D)).astype(np.float16) for _ in range(3)]
    q, k, v = (cp.asarray(x) for x in host)
    o = cp.full((heads * seq_len, D), cp.nan, dtype=cp.float16)
    attention[(seq_len // BM, heads)](q, k, v, o, seq_len, sm_scale, BM=BM, BN=BN, D=D,
                                      **options)
    cp.cuda.runtime.deviceSynchronize()
    _check(o, reference(*host, heads, seq_len, sm_scale), TOL)
    assert _compiled_for_sm80(attention)


def test_attention_sm80_heads4_seq1024_d64():
    run(heads=4, seq_len=1024, D=64, sm_scale=0.125)


@pytest.mark.parametrize("BN,D", [(64, 64), (128, 64), (64, 128)])
def test_attention_sm80_tiles(BN, D):
    run(heads=2, seq_len=512, D=D, sm_scale=1 / np.sqrt(D), BN=BN)


def test_attention_sm80_sharp_softmax():
    """Large logits: the running max changes a lot between blocks (alpha far from 1)."""
    run(heads=2, seq_len=1024, D=64, sm_scale=1.0)


@pytest.mark.parametrize("buffers", [1, 2])
def test_attention_sm80_buffers(buffers):
    run(heads=2, seq_len=512, D=64, sm_scale=0.125, num_buffers_warp_spec=buffers)


@pytest.mark.parametrize("BN,D", [(64, 64), (128, 64), (64, 128)])
def test_register_a_dot_sm80(BN, D):
    """p v's form alone: o = (a @ b).astype(fp16) @ c, the second dot with A in registers."""
    rng = np.random.default_rng()
    M, N = 256, 512
    a = (rng.standard_normal((M, D)) / 4).astype(np.float16)
    b = (rng.standard_normal((D, N)) / 4).astype(np.float16)
    c = rng.standard_normal((N, D)).astype(np.float16)
    o = cp.full((M, D), cp.nan, dtype=cp.float16)
    chained[(M // 128,)](cp.asarray(a), cp.asarray(b), cp.asarray(c), o, BM=128, BN=BN, D=D)
    cp.cuda.runtime.deviceSynchronize()
    s = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16).astype(np.float64)
    _check(o, s @ c.astype(np.float64), 1e-2)
    assert _compiled_for_sm80(chained)
