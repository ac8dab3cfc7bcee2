"""Flash-attention forward (tests/kernels.py ``attention_fwd``) compiled by numba_ws, on the
GPU, against a float64 reference.

``o = softmax(q k^T * sm_scale) v`` per head, fp16 in and out; every case draws fresh
random inputs and NaN-poisons ``o`` first. Check: ``max|o - ref| / max|ref| <= 2e-2``
with ``ref`` computed in float64 from the rounded fp16 inputs. The kernel runs the
softmax with ex2.approx (codegen/frag_math.py) and feeds p to the second GEMM as fp16
from registers (codegen/wgmma_rs.py).
"""
import numpy as np
import pytest

import numba_ws as ws
from kernels import attention_fwd, matmul_nt
from test_frag_math import chained_gemm

cp = pytest.importorskip("cupy")
attention = ws.jit(attention_fwd)
TOL = 2e-2


def reference(q, k, v, heads, seq_len, sm_scale):
    """softmax(q k^T * sm_scale) v per head, in float64 (q, k, v: (heads*seq_len, D))."""
    D = q.shape[1]
    q, k, v = (x.astype(np.float64).reshape(heads, seq_len, D) for x in (q, k, v))
    s = np.einsum("hqd,hkd->hqk", q, k) * sm_scale
    s -= s.max(axis=2, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=2, keepdims=True)
    return np.einsum("hqk,hkd->hqd", p, v).reshape(heads * seq_len, D)


def run(heads, seq_len, D, sm_scale, BM=128, BN=64, **options):
    rng = np.random.default_rng()
    host = [rng.standard_normal((heads * seq_len, D)).astype(np.float16) for _ in range(3)]
    q, k, v = (cp.asarray(x) for x in host)
    o = cp.full((heads * seq_len, D), cp.nan, dtype=cp.float16)
    attention[(seq_len // BM, heads)](q, k, v, o, seq_len, sm_scale, BM=BM, BN=BN, D=D,
                                      **options)
    cp.cuda.runtime.deviceSynchronize()
    out = cp.asnumpy(o).astype(np.float64)
    ref = reference(*host, heads, seq_len, sm_scale)
    assert not np.isnan(out).any(), f"{np.isnan(out).sum()} outputs NaN (never written?)"
    err = np.max(np.abs(out - ref)) / np.max(np.abs(ref))
    bad = np.argwhere(np.abs(out - ref) > TOL * np.max(np.abs(ref)))
    assert err <= TOL, f"relative error {err:.3e}; first bad (row, col): {bad[:5].tolist()}"
    return err


def test_attention_heads4_seq1024_d64():
    run(heads=4, seq_len=1024, D=64, sm_scale=0.125)


@pytest.mark.parametrize("BN,D", [(64, 64), (128, 64), (64, 128), (128, 128)])
def test_attention_tiles(BN, D):
    run(heads=2, seq_len=512, D=D, sm_scale=1 / np.sqrt(D), BN=BN)


def test_attention_sharp_softmax():
    """Large logits: the running max changes a lot between blocks (alpha far from 1)."""
    run(heads=2, seq_len=1024, D=64, sm_scale=1.0)


@pytest.mark.parametrize("buffers", [1, 2, 4])
def test_attention_buffers(buffers):
    run(heads=2, seq_len=512, D=64, sm_scale=0.125, num_buffers_warp_spec=buffers)


# --- the two halves of the attention kernel on their own, to localise a failure --------

def _check(out, ref, tol=1e-2):
    out = cp.asnumpy(out).astype(np.float64)
    assert not np.isnan(out).any(), f"{np.isnan(out).sum()} outputs NaN (never written?)"
    err = np.max(np.abs(out - ref)) / np.max(np.abs(ref))
    assert err <= tol, f"relative error {err:.3e}"


def test_trans_b_dot_sm90():
    """q k^T's form: wgmma with a K-major B (``ws.trans`` of a loaded (BN, BK) tile)."""
    rng = np.random.default_rng()
    a = rng.standard_normal((512, 128)).astype(np.float16)
    bt = rng.standard_normal((256, 128)).astype(np.float16)
    c = cp.full((512, 256), cp.nan, dtype=cp.float16)
    ws.jit(matmul_nt)[(4 * 2,)](cp.asarray(a), cp.asarray(bt), c, BM=128, BN=128, BK=64)
    cp.cuda.runtime.deviceSynchronize()
    _check(c, a.astype(np.float64) @ bt.astype(np.float64).T)


@pytest.mark.parametrize("BN,D", [(64, 64), (128, 64), (64, 128)])
def test_register_a_dot(BN, D):
    """p v's form alone: o = (a @ b).astype(fp16) @ c, the second dot with A in registers."""
    rng = np.random.default_rng()
    M, N = 256, 512
    a = (rng.standard_normal((M, D)) / 4).astype(np.float16)
    b = (rng.standard_normal((D, N)) / 4).astype(np.float16)
    c = rng.standard_normal((N, D)).astype(np.float16)
    o = cp.full((M, D), cp.nan, dtype=cp.float16)
    ws.jit(chained_gemm)[(M // 128,)](cp.asarray(a), cp.asarray(b), cp.asarray(c), o,
                                      BM=128, BN=BN, D=D)
    cp.cuda.runtime.deviceSynchronize()
    s = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16).astype(np.float64)
    _check(o, s @ c.astype(np.float64))
