"""Each interpreter rule against NumPy, with the edge cases the GPU must match."""
import ml_dtypes
import numpy as np
import pytest

import numba_ws as ws
from numba_ws.errors import WSUsageError
from numba_ws.interpreter.ops import INTERPRET as OP
from numba_ws.interpreter.run import Interpreter, interpret

BF16 = ml_dtypes.bfloat16


@pytest.fixture
def rng():
    return np.random.default_rng()


def ref_load(array, offsets, shape):
    """Element by element: array[i] if every index is in bounds, else 0."""
    out = np.zeros(shape, array.dtype)
    for idx in np.ndindex(*shape):
        src = tuple(o + i for o, i in zip(offsets, idx))
        if all(0 <= s < n for s, n in zip(src, array.shape)):
            out[idx] = array[src]
    return out


def bf16_rne(x):
    """float32 -> bfloat16 by bit arithmetic (round to nearest even), finite inputs."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def tf32_ref(x):
    """float32 -> tf32 (11 significant bits) through frexp and NumPy's half-to-even round."""
    m, e = np.frexp(np.asarray(x, np.float64))
    return np.ldexp(np.round(m * 2.0**11) / 2.0**11, e).astype(np.float32)


# -- program ids, cdiv, constructors ------------------------------------------------

def test_program_id_and_num_programs_row_major():
    seen = []

    def kernel():
        seen.append(tuple(ws.program_id(a) for a in range(3))
                    + tuple(ws.num_programs(a) for a in range(3)))

    interpret(kernel, (2, 3, 2), {})
    pids = [s[:3] for s in seen]
    assert pids == [(i, j, k) for i in range(2) for j in range(3) for k in range(2)]
    assert {s[3:] for s in seen} == {(2, 3, 2)}


def test_missing_grid_axes_read_as_on_gpu():
    interp = Interpreter((4,))
    with interp.program((3,)):
        assert (ws.program_id(0), ws.program_id(1), ws.program_id(2)) == (3, 0, 0)
        assert (ws.num_programs(0), ws.num_programs(1), ws.num_programs(2)) == (4, 1, 1)
        with pytest.raises(WSUsageError, match="axis"):
            ws.program_id(3)


def test_ops_outside_a_kernel():
    with pytest.raises(WSUsageError, match="inside"):
        ws.program_id(0)
    with pytest.raises(WSUsageError, match="program instance"):
        OP["num_programs"](0)
    assert ws.cdiv(7, 2) == 4  # the host path


@pytest.mark.parametrize("a,b", [(0, 4), (1, 4), (4, 4), (5, 4), (200, 64), (-5, 2), (7, 1)])
def test_cdiv(a, b):
    assert OP["cdiv"](a, b) == int(np.ceil(a / b))
    assert OP["cdiv"](np.int64(a), b) == int(np.ceil(a / b))


def test_cdiv_errors():
    with pytest.raises(WSUsageError, match="ints"):
        OP["cdiv"](5.0, 2)
    with pytest.raises(WSUsageError, match="zero"):
        OP["cdiv"](5, 0)


@pytest.mark.parametrize("dt", [ws.float16, ws.bfloat16, ws.float32, ws.int32])
def test_zeros_full(dt):
    z = OP["zeros"]((3, 5), dt)
    assert z.shape == (3, 5) and z.dtype == dt.dtype and not z.any()
    f = OP["full"]((4,), 2.5 if dt is not ws.int32 else 7, dt)
    assert f.dtype == dt.dtype and np.all(f == (2.5 if dt is not ws.int32 else 7))
    assert np.isneginf(OP["full"]((2, 2), -np.inf, ws.float32)).all()


@pytest.mark.parametrize("shape", [(0, 4), (4, -1), (), 4, [4, 4], (2.0, 2), (True, 2)])
def test_bad_shapes(shape):
    with pytest.raises(WSUsageError, match="shape"):
        OP["zeros"](shape, ws.float32)
    with pytest.raises(WSUsageError, match="shape"):
        OP["full"](shape, 1.0, ws.float32)


def test_bad_dtype_and_value():
    with pytest.raises(WSUsageError, match="dtype"):
        OP["zeros"]((2, 2), np.float32)
    with pytest.raises(WSUsageError, match="value"):
        OP["full"]((2, 2), np.ones(2), ws.float32)


# -- load / store ---------------------------------------------------------------------

LOAD_CASES = [((0, 0), (8, 8)), ((32, 24), (8, 8)), ((-3, -5), (8, 8)), ((35, 27), (4, 4)),
              ((40, 0), (8, 8)), ((-8, 0), (8, 8)), ((5, -2), (16, 40)), ((-4, -4), (48, 40))]


@pytest.mark.parametrize("layout", ["c", "fortran", "strided", "transposed"])
@pytest.mark.parametrize("offsets,shape", LOAD_CASES)
def test_load_2d(rng, layout, offsets, shape):
    base = rng.standard_normal((74, 90)).astype(np.float16)
    array = {"c": base[:37, :29].copy(), "fortran": np.asfortranarray(base[:37, :29]),
             "strided": base[::2, ::3][:37, :29], "transposed": base[:29, :37].T}[layout]
    assert array.shape == (37, 29)
    tile = OP["load"](array, offsets, shape)
    assert tile.shape == shape and tile.dtype == np.float16
    np.testing.assert_array_equal(tile, ref_load(array, offsets, shape))


@pytest.mark.parametrize("dt", [np.float32, BF16, np.int32, np.float64])
@pytest.mark.parametrize("offset", [-7, -1, 0, 10, 19, 20, 25])
def test_load_1d(rng, dt, offset):
    array = (rng.standard_normal(20) * 10).astype(dt)
    tile = OP["load"](array, (offset,), (8,))
    assert tile.dtype == array.dtype
    np.testing.assert_array_equal(tile, ref_load(array, (offset,), (8,)))


def test_load_returns_a_fresh_array():
    array = np.arange(16, dtype=np.float32).reshape(4, 4)
    tile = OP["load"](array, (0, 0), (4, 4))
    tile[:] = -1
    assert array[0, 0] == 0


def test_load_errors():
    a = np.zeros((4, 4), np.float32)
    with pytest.raises(WSUsageError, match="offsets"):
        OP["load"](a, (0,), (4, 4))
    with pytest.raises(WSUsageError, match="offsets"):
        OP["load"](a, (0, 1.5), (4, 4))
    with pytest.raises(WSUsageError, match="shape"):
        OP["load"](a, (0, 0), (4,))
    with pytest.raises(WSUsageError, match="array"):
        OP["load"](a.tolist(), (0, 0), (4, 4))
    with pytest.raises(WSUsageError, match="array"):
        OP["load"](np.zeros((2, 2, 2)), (0, 0, 0), (2, 2, 2))


@pytest.mark.parametrize("offsets", [(0, 0), (30, 20), (-3, -6), (-10, 25), (40, 0), (0, 30)])
def test_store_in_bounds_only(rng, offsets):
    base = np.full((50, 50), np.nan, np.float32)
    array = base[5:42, 7:36]  # (37, 29) view: the border must stay NaN
    tile = rng.standard_normal((12, 10)).astype(np.float32)
    OP["store"](array, offsets, tile)
    expected = np.full((37, 29), np.nan, np.float32)
    for idx in np.ndindex(*tile.shape):
        r, c = offsets[0] + idx[0], offsets[1] + idx[1]
        if 0 <= r < 37 and 0 <= c < 29:
            expected[r, c] = tile[idx]
    np.testing.assert_array_equal(array, expected)
    border = base.copy()
    border[5:42, 7:36] = np.nan
    assert np.isnan(border).all()


def test_store_casts_fp16_round_to_nearest_even():
    a = np.zeros(4, np.float16)
    vals = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, 65504.0, 1e-8], np.float32)
    OP["store"](a, (0,), vals)
    np.testing.assert_array_equal(a, np.array([1.0, 1 + 2.0**-9, 65504.0, 0.0], np.float16))


def test_store_bf16_round_to_nearest_even(rng):
    ties = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8, -(1 + 2.0**-8), 2 + 2.0**-7], np.float32)
    a = np.zeros(4, BF16)
    OP["store"](a, (0,), ties)
    np.testing.assert_array_equal(a.astype(np.float32), [1.0, 1 + 2.0**-6, -1.0, 2.0])
    x = (rng.standard_normal((33, 17)) * 100).astype(np.float32)
    out = np.zeros((33, 17), BF16)
    OP["store"](out, (0, 0), x)
    np.testing.assert_array_equal(out, x.astype(BF16))
    np.testing.assert_array_equal(out.astype(np.float32), bf16_rne(x))


def test_store_errors():
    a = np.zeros((4, 4), np.float32)
    with pytest.raises(WSUsageError, match="tile"):
        OP["store"](a, (0, 0), np.ones(4, np.float32))
    with pytest.raises(WSUsageError, match="tile"):
        OP["store"](a, (0, 0), 1.0)
    with pytest.raises(WSUsageError, match="offsets"):
        OP["store"](a, (0, 0, 0), np.ones((2, 2), np.float32))
    ro = np.zeros((4, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(WSUsageError, match="read-only"):
        OP["store"](ro, (0, 0), np.ones((2, 2), np.float32))


# -- dot ------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", [np.float16, BF16])
def test_dot_half_inputs(rng, dt):
    a = rng.standard_normal((48, 40)).astype(dt)
    b = rng.standard_normal((40, 24)).astype(dt)
    acc = rng.standard_normal((48, 24)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    out = OP["dot"](a, b)
    assert out.dtype == np.float32 and out.shape == (48, 24)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(OP["dot"](a, b, acc), ref + acc, rtol=1e-5, atol=1e-4)


def test_dot_fp16_accumulates_in_fp32():
    big = OP["dot"](np.full((1, 256), 300, np.float16), np.full((256, 1), 300, np.float16))
    assert big[0, 0] == 300.0 * 300.0 * 256  # fp16 would overflow past 65504
    a = np.full((1, 1025), 2.0**-11, np.float16)
    a[0, 0] = 1.0
    small = OP["dot"](a, np.ones((1025, 1), np.float16))
    assert small[0, 0] == 1.5  # an fp16 accumulator would stay at 1.0


def test_dot_fp32_runs_as_tf32(rng):
    x = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-12, -(1 + 2.0**-11)], np.float32)
    got = np.diag(OP["dot"](np.diag(x), np.eye(4, dtype=np.float32)))
    np.testing.assert_array_equal(got, [1.0, 1 + 2.0**-9, 1.0, -1.0])
    a = rng.standard_normal((32, 48)).astype(np.float32)
    b = rng.standard_normal((48, 16)).astype(np.float32)
    ref = tf32_ref(a).astype(np.float64) @ tf32_ref(b).astype(np.float64)
    out = OP["dot"](a, b)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    full_fp32 = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(out - full_fp32).max() > 1e-5  # tf32 really is coarser


def test_dot_fp32_keeps_inf_and_nan():
    a = np.array([[np.inf, 1.0], [np.nan, 1.0]], np.float32)
    out = OP["dot"](a, np.ones((2, 1), np.float32))
    assert np.isposinf(out[0, 0]) and np.isnan(out[1, 0])


def test_dot_errors():
    h = np.ones((4, 8), np.float16)
    with pytest.raises(WSUsageError, match="K"):
        OP["dot"](h, h)
    with pytest.raises(WSUsageError, match="same dtype"):
        OP["dot"](h, np.ones((8, 4), BF16))
    with pytest.raises(WSUsageError, match="dtype int32"):
        OP["dot"](np.ones((4, 8), np.int32), np.ones((8, 4), np.int32))
    with pytest.raises(WSUsageError, match="2-D"):
        OP["dot"](np.ones(8, np.float16), np.ones((8, 4), np.float16))
    with pytest.raises(WSUsageError, match="acc"):
        OP["dot"](h, h.T.copy(), np.zeros((4, 4), np.float16))
    with pytest.raises(WSUsageError, match="acc"):
        OP["dot"](h, h.T.copy(), np.zeros((4, 5), np.float32))


# -- element-wise and conversions -----------------------------------------------------

def test_astype(rng):
    x = (rng.standard_normal((9, 7)) * 50).astype(np.float32)
    np.testing.assert_array_equal(OP["astype"](x, ws.bfloat16), x.astype(BF16))
    np.testing.assert_array_equal(OP["astype"](x, ws.bfloat16).astype(np.float32), bf16_rne(x))
    np.testing.assert_array_equal(OP["astype"](x, ws.float16), x.astype(np.float16))
    assert x.astype(ws.bfloat16).dtype == BF16  # the method form users write
    with pytest.raises(WSUsageError, match="dtype"):
        OP["astype"](x, "float16")


@pytest.mark.parametrize("name,fn", [("exp", np.exp), ("exp2", np.exp2), ("log", np.log)])
@pytest.mark.parametrize("dt", [np.float16, BF16, np.float32, np.float64])
def test_unary(rng, name, fn, dt):
    x = rng.uniform(0.1, 4.0, (5, 6)).astype(dt)
    out = OP[name](x)
    assert out.dtype == x.dtype
    expected = fn(x.astype(np.float32)).astype(dt) if x.itemsize == 2 else fn(x)
    np.testing.assert_array_equal(out, expected)
    with pytest.raises(WSUsageError, match="float"):
        OP[name](np.ones(3, np.int32))


def test_binary_ops_broadcast_and_keep_dtype(rng):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    row = rng.uniform(1, 2, (6, 1)).astype(np.float32)
    col = rng.uniform(1, 2, (5,)).astype(np.float32)
    for name, fn in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                     ("truediv", np.true_divide), ("maximum", np.maximum)]:
        np.testing.assert_array_equal(OP[name](x, row), fn(x, row))
        np.testing.assert_array_equal(OP[name](x, col), fn(x, col))
        for dt in (np.float16, BF16):
            assert OP[name](x.astype(dt), 2.0).dtype == dt
            assert OP[name](3, x.astype(dt)).dtype == dt
            assert OP[name](x.astype(dt), np.float64(0.5)).dtype == dt
    np.testing.assert_array_equal(OP["neg"](x), -x)
    assert OP["neg"](x.astype(BF16)).dtype == BF16
    with pytest.raises(WSUsageError, match="b"):
        OP["add"](x, [1.0])


def test_where(rng):
    x = rng.standard_normal((6, 5)).astype(np.float16)
    out = OP["where"](x > 0, x, 0.0)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    cond = np.array([True, False, True, False, True])
    np.testing.assert_array_equal(OP["where"](cond, x, -x), np.where(cond, x, -x))
    with pytest.raises(WSUsageError, match="cond"):
        OP["where"](x, x, x)


def test_reductions_keep_the_axis(rng):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    assert OP["max"](x, 1).shape == (6, 1) and OP["max"](x, 0).shape == (1, 5)
    np.testing.assert_array_equal(OP["max"](x, 1), x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(OP["sum"](x, 0), x.sum(axis=0, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(x - OP["max"](x, 1), x - x.max(axis=1)[:, None])
    assert OP["sum"](x, 1).dtype == np.float32
    assert OP["sum"](np.ones((3, 4), np.int32), 1).dtype == np.int32
    assert OP["max"](x.astype(BF16), 1).dtype == BF16
    assert OP["max"](np.arange(5.0, dtype=np.float32), 0).shape == (1,)


@pytest.mark.parametrize("dt", [np.float16, BF16])
def test_sum_of_half_accumulates_in_fp32(dt):
    out = OP["sum"](np.ones((2, 4096), dt), 1)
    assert out.dtype == np.float32 and np.all(out == 4096.0)  # 16-bit adds stop at 2048/256
    big = OP["sum"](np.full((256, 3), 300, dt), 0)
    assert np.all(big == 76800.0)  # past fp16's largest value, 65504


def test_reduction_errors():
    x = np.ones((4, 4), np.float32)
    for name in ("max", "sum"):
        with pytest.raises(WSUsageError, match="axis"):
            OP[name](x, 2)
        with pytest.raises(WSUsageError, match="axis"):
            OP[name](x, -1)
        with pytest.raises(WSUsageError, match="tile"):
            OP[name](1.0, 0)


def test_trans(rng):
    x = rng.standard_normal((3, 7)).astype(np.float16)
    t = OP["trans"](x)
    np.testing.assert_array_equal(t, x.T)
    assert t.flags.c_contiguous and not np.shares_memory(t, x)
    with pytest.raises(WSUsageError, match="2-D"):
        OP["trans"](np.ones(3, np.float16))


def test_interpreter_call_unknown_op():
    with pytest.raises(WSUsageError, match="no op"):
        Interpreter((1,)).call("matmul", 1)
