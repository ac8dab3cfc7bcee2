"""GEMM + activation chosen by constexprs (a string, a bool, a float), on the GPU.

The untaken activation branches are never compiled (passes/constexpr_branches.py); the
string and float constexprs are constants in the code, not kernel parameters, so the
launch packs only the arrays and int constexprs. Fresh random inputs, NaN-poisoned
outputs, shapes that are not multiples of the tile, one and two consumer groups; checked
against float64 with ``max|c - ref| / max|ref| <= 1e-2``.
"""
import numpy as np
import pytest

import numba_ws as ws

cp = pytest.importorskip("cupy")


def matmul_act(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr,
               ACT: ws.constexpr, ALPHA: ws.constexpr, DOUBLE: ws.constexpr):
    M, K = a.shape
    N = b.shape[1]
    pid = ws.program_id(0)
    pid_m = pid // ws.cdiv(N, BN)
    pid_n = pid % ws.cdiv(N, BN)
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(K, BK)):
        x = ws.load(a, (pid_m * BM, k * BK), (BM, BK))
        y = ws.load(b, (k * BK, pid_n * BN), (BK, BN))
        acc = ws.dot(x, y, acc)
    if ACT == "leaky_relu":
        acc = ws.maximum(acc, acc * ALPHA)
    elif ACT == "relu":
        acc = ws.maximum(acc, 0.0)
    if DOUBLE:
        acc = acc * 2.0
    ws.store(c, (pid_m * BM, pid_n * BN), acc.astype(ws.float16))


def _reference(x, act, alpha, double):
    if act == "leaky_relu":
        x = np.maximum(x, x * alpha)
    elif act == "relu":
        x = np.maximum(x, 0.0)
    return 2.0 * x if double else x


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("act,double", [("leaky_relu", False), ("relu", True),
                                        ("none", False)])
def test_activation_chosen_by_constexprs(act, double, groups):
    M, N, K = 300, 520, 200
    rng = np.random.default_rng()
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = cp.full((M, N), cp.nan, dtype=cp.float16)
    BM, BN = 128, 256 if groups == 2 else 128
    grid = (ws.cdiv(M, BM) * ws.cdiv(N, BN),)
    ws.jit(matmul_act)[grid](cp.asarray(a), cp.asarray(b), c, BM=BM, BN=BN, BK=64,
                             ACT=act, ALPHA=0.1, DOUBLE=double, num_consumer_groups=groups)
    cp.cuda.runtime.deviceSynchronize()
    ref = _reference(a.astype(np.float64) @ b.astype(np.float64), act, 0.1, double)
    out = cp.asnumpy(c).astype(np.float64)
    assert not np.isnan(out).any(), f"{np.isnan(out).sum()} outputs never written"
    assert np.max(np.abs(out - ref)) / np.max(np.abs(ref)) <= 1e-2
