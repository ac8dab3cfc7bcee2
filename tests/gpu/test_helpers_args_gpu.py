"""Issue 15 items 5 and 7 on the GPU: kernels calling helper functions (twice, nested,
with constexprs, a ``@ws.jit`` one), ``ws.static_range`` inside a helper, scalar loads
``array[i]``; int8 / uint8 / int16 (and bool) arrays loaded, converted and stored.

Fresh random inputs, outputs poisoned (NaN for floats, a sentinel for integers, the
negation for booleans), ragged shapes, one and two consumer groups; float results against
float64 with ``max|out - ref| <= tol * max|ref|``, integer results exactly."""
import numpy as np
import pytest

import numba_ws as ws
from numba_ws.language import dtypes
import helpers_inline_lib as hl
import test_arguments as targs

cp = pytest.importorskip("cupy")


def _run(fn, grid, host_args, meta):
    dev = [cp.asarray(a) for a in host_args]
    ws.jit(fn)[grid](*dev, **meta)
    cp.cuda.runtime.deviceSynchronize()
    return [cp.asnumpy(d) for d in dev]


def _close(out, ref, tol):
    out = out.astype(np.float64)
    assert not np.isnan(out).any(), f"{np.isnan(out).sum()} outputs never written"
    err = np.max(np.abs(out - ref)) / max(np.max(np.abs(ref)), 1e-30)
    assert err <= tol, err


@pytest.mark.parametrize("groups", [1, 2])
def test_gemm_epilogue_calls_helpers(groups):
    """leaky twice (once through leaky_affine, a helper calling helpers) and doubled (a
    @ws.jit function) in a GEMM epilogue; M and N not multiples of the tile."""
    rng = np.random.default_rng()
    M, N, K = 300, 520, 192
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float16)
    BM, BN = 128, (256 if groups == 2 else 128)
    grid = (ws.cdiv(M, BM), ws.cdiv(N, BN))
    out = _run(hl.gemm_helpers, grid, (a, b, c),
               dict(BM=BM, BN=BN, BK=64, ALPHA=0.1, num_consumer_groups=groups))[2]
    _close(out, hl.gemm_helpers_ref(a, b, 0.1), 1e-2)


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("act", ["relu", "none"])
def test_softmax_helper_called_twice(act, groups):
    rng = np.random.default_rng()
    x = (3 * rng.standard_normal((300, 64))).astype(np.float16)
    y = (3 * rng.standard_normal((300, 64))).astype(np.float16)
    out = np.full((300, 64), np.nan, np.float32)
    got = _run(hl.two_softmaxes, (ws.cdiv(300, 128),), (x, y, out),
               dict(BM=128, BN=64, ACT=act, num_consumer_groups=groups))[2]
    _close(got, hl.two_softmaxes_ref(x, y, act), 1e-3)


@pytest.mark.parametrize("groups", [1, 2])
def test_static_range_in_a_helper_called_twice(groups):
    rng = np.random.default_rng()
    a = rng.standard_normal((300, 256)).astype(np.float16)
    c = np.full((300, 64), np.nan, np.float32)
    got = _run(hl.unrolled_blocks, (ws.cdiv(300, 128),), (a, c),
               dict(BM=128, BN=64, NB=4, num_consumer_groups=groups))[1]
    _close(got, hl.unrolled_blocks_ref(a, 64, 4), 1e-5)


def test_scalar_loads():
    rng = np.random.default_rng()
    a = rng.standard_normal((300, 64)).astype(np.float16)
    scale = rng.standard_normal(3).astype(np.float32)
    bias = np.array([rng.standard_normal()], np.float32)
    c = np.full((300, 64), np.nan, np.float32)
    got = _run(hl.row_scale, (3,), (a, scale, bias, c), dict(BM=128, BN=64))[3]
    _close(got, hl.row_scale_ref(a, scale, bias, 128), 1e-6)


@pytest.mark.parametrize("shape", [(128, 64), (70, 45)])   # TMA-readable / ragged pitch
@pytest.mark.parametrize("name", ["int8", "uint8", "int16"])
def test_narrow_integer_arrays(name, shape):
    """Copied as is, as float32 * 2, and round-tripped through float32 back to the dtype."""
    rng = np.random.default_rng()
    a = targs._narrow_input(name, shape, rng)
    sentinel = np.iinfo(a.dtype).max
    same, back = np.full(shape, sentinel, a.dtype), np.full(shape, sentinel, a.dtype)
    as_f32 = np.full(shape, np.nan, np.float32)
    grid = (ws.cdiv(shape[0], 32), ws.cdiv(shape[1], 16))
    s, f, bk = _run(targs.copy_and_convert, grid, (a, same, as_f32, back),
                    dict(BM=32, BN=16, DT=dtypes.ALL[name]))[1:]
    np.testing.assert_array_equal(s, a)
    np.testing.assert_array_equal(f, a.astype(np.float64) * 2)
    np.testing.assert_array_equal(bk, a)


@pytest.mark.parametrize("name", ["int8", "uint8", "int16"])
def test_gemm_stored_into_narrow_integers_saturates(name):
    """Small-integer fp16 inputs: the fp32 accumulator is an exact integer; the store
    converts toward zero and saturates at the dtype's range."""
    rng = np.random.default_rng()
    a = rng.integers(-3, 4, (128, 128)).astype(np.float16)
    b = rng.integers(-3, 4, (128, 128)).astype(np.float16)
    info = np.iinfo(targs.NARROW[name])
    c = np.full((128, 128), 7, targs.NARROW[name])
    got = _run(targs.narrow_epilogue, (1,), (a, b, c),
               dict(BM=128, BN=128, BK=64, DT=dtypes.ALL[name]))[2]
    acc = a.astype(np.float64) @ b.astype(np.float64)
    assert (acc > info.max).any() or (acc < info.min).any() or name == "int16"
    np.testing.assert_array_equal(got, np.clip(acc, info.min, info.max).astype(c.dtype))


def test_bool_arrays():
    rng = np.random.default_rng()
    a = rng.random((70, 45)) < 0.5
    same, back = ~a, ~a
    as_f32 = np.full((70, 45), np.nan, np.float32)
    grid = (ws.cdiv(70, 32), ws.cdiv(45, 16))
    s, f, bk = _run(targs.copy_and_convert, grid, (a, same, as_f32, back),
                    dict(BM=32, BN=16, DT=ws.bool_))[1:]
    np.testing.assert_array_equal(s, a)
    np.testing.assert_array_equal(f, a * 2.0)
    np.testing.assert_array_equal(bk, a)
