"""Whole kernels in the interpreter against float64 NumPy references.

Inputs are fresh random numbers each run (the seed is in every failure message) and
outputs start as NaN, so an element the kernel forgets to write fails the test.
"""
import numpy as np
import pytest

import numba_ws as ws
from numba_ws.__main__ import main, relative_error
from numba_ws.errors import WSUsageError
from numba_ws.interpreter.run import InterpretedKernel

import kernels

TOL = 1e-2


@pytest.fixture
def seed():
    return np.random.SeedSequence().entropy


@pytest.fixture
def rng(seed):
    return np.random.default_rng(seed)


def gemm_grid(M, N):
    return lambda meta: (ws.cdiv(M, meta["BM"]) * ws.cdiv(N, meta["BN"]),)


def poisoned(shape, pad=3):
    """A NaN-filled fp16 output view with a NaN border around it that must stay NaN."""
    base = np.full((shape[0] + 2 * pad, shape[1] + 2 * pad), np.nan, np.float16)
    return base, base[pad:-pad, pad:-pad]


def assert_border_untouched(base, pad=3):
    inner = base.copy()
    inner[pad:-pad, pad:-pad] = np.nan
    assert np.isnan(inner).all(), "the kernel wrote outside its output"


@pytest.mark.parametrize("M,N,K", [(200, 136, 72), (1, 1, 1), (64, 64, 32), (129, 65, 33),
                                   (17, 200, 130)])
@pytest.mark.parametrize("tiles", [(64, 64, 32), (32, 16, 16)])
def test_matmul(rng, seed, M, N, K, tiles):
    BM, BN, BK = tiles
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    base, c = poisoned((M, N))
    InterpretedKernel(kernels.matmul)[gemm_grid(M, N)](a, b, c, BM=BM, BN=BN, BK=BK)
    assert not np.isnan(c).any(), f"unwritten output (seed {seed})"
    err = relative_error(c, a.astype(np.float64) @ b.astype(np.float64))
    assert err <= TOL, f"relative error {err} (seed {seed})"
    assert_border_untouched(base)


def test_matmul_constexprs_positionally_and_options(rng):
    a = rng.standard_normal((70, 40)).astype(np.float16)
    b = rng.standard_normal((40, 50)).astype(np.float16)
    c = np.full((70, 50), np.nan, np.float16)
    InterpretedKernel(kernels.matmul)[(ws.cdiv(70, 32) * ws.cdiv(50, 32),)](
        a, b, c, 32, 32, 16, num_consumer_groups=1, num_buffers_warp_spec=4, stream=None)
    assert relative_error(c, a.astype(np.float64) @ b.astype(np.float64)) <= TOL


@pytest.mark.parametrize("M,N,K", [(150, 100, 70), (64, 128, 64)])
def test_matmul_bias_relu(rng, seed, M, N, K):
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    bias = rng.standard_normal(N).astype(np.float16)
    base, c = poisoned((M, N))
    InterpretedKernel(kernels.matmul_bias_relu)[gemm_grid(M, N)](
        a, b, bias, c, BM=64, BN=64, BK=32)
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias.astype(np.float64), 0)
    assert not np.isnan(c).any(), f"unwritten output (seed {seed})"
    assert (c >= 0).all()
    err = relative_error(c, ref)
    assert err <= TOL, f"relative error {err} (seed {seed})"
    assert_border_untouched(base)


@pytest.mark.parametrize("M,N,BM", [(100, 64, 16), (7, 32, 8), (64, 128, 64)])
@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_softmax_rows(rng, seed, M, N, BM, dt):
    x = (rng.standard_normal((M, N)) * 4).astype(dt)
    y = np.full((M, N), np.nan, np.float32)
    InterpretedKernel(kernels.softmax_rows)[(ws.cdiv(M, BM),)](x, y, BM=BM, BN=N)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    err = relative_error(y, ref)
    assert err <= 1e-5, f"relative error {err} (seed {seed})"
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("heads,seq,D,BM,BN", [(3, 128, 64, 64, 32), (2, 64, 32, 16, 64)])
def test_attention_fwd(rng, seed, heads, seq, D, BM, BN):
    q, k, v = (rng.standard_normal((heads * seq, D)).astype(np.float16) for _ in range(3))
    o = np.full((heads * seq, D), np.nan, np.float16)
    scale = 1.0 / np.sqrt(D)
    InterpretedKernel(kernels.attention_fwd)[(seq // BM, heads)](
        q, k, v, o, seq, scale, BM=BM, BN=BN, D=D)
    ref = np.empty((heads * seq, D))
    for h in range(heads):
        rows = slice(h * seq, (h + 1) * seq)
        s = q[rows].astype(np.float64) @ k[rows].astype(np.float64).T * scale
        p = np.exp(s - s.max(axis=1, keepdims=True))
        ref[rows] = (p / p.sum(axis=1, keepdims=True)) @ v[rows].astype(np.float64)
    assert not np.isnan(o).any(), f"unwritten output (seed {seed})"
    err = relative_error(o, ref)
    assert err <= TOL, f"relative error {err} (seed {seed})"


def test_print_inside_a_kernel(capsys):
    def show(x, BM: ws.constexpr):
        t = ws.load(x, (ws.program_id(0) * BM,), (BM,))
        print("pid", ws.program_id(0), t.tolist())

    InterpretedKernel(show)[(2,)](np.arange(3, dtype=np.float32), BM=2)
    assert capsys.readouterr().out.splitlines() == ["pid 0 [0.0, 1.0]", "pid 1 [2.0, 0.0]"]


def test_launch_errors_come_before_running():
    calls = []

    def kernel(x, BM: ws.constexpr):
        calls.append(1)

    k = InterpretedKernel(kernel)
    with pytest.raises(WSUsageError, match="BN"):
        k[(2,)](np.zeros(2), BM=4, BN=4)
    with pytest.raises(WSUsageError, match="grid"):
        k[lambda meta: (0,)](np.zeros(2), BM=4)
    with pytest.raises(WSUsageError, match=r"kernel\[grid\]"):
        k(np.zeros(2), BM=4)
    assert calls == []
    assert k.__name__ == "kernel"


def test_numpy_scalar_arguments_do_not_widen_tiles():
    seen = []

    def scale(x, s, BM: ws.constexpr):
        seen.append((ws.load(x, (0,), (BM,)) * s).dtype)

    InterpretedKernel(scale)[(1,)](np.ones(4, np.float32), np.float64(0.5), BM=4)
    assert seen == [np.float32]


def test_kernel_must_not_return_a_value():
    def kernel(x):
        return 1

    with pytest.raises(WSUsageError, match="return"):
        InterpretedKernel(kernel)[(1,)](np.zeros(2))


def test_main_runs_the_gemm(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "max relative error" in out and out.splitlines()[-1] == "OK"
