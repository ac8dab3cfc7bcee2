"""Each interpreter rule against NumPy, with the edge cases the GPU must match."""
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import numba_ws as ws
from numba_ws import dot, load
from numba_ws.errors import WSUsageError
from numba_ws.interpreter.ops import INTERPRET as OP, to_bfloat16
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


def test_reductions_drop_the_axis_unless_keepdims(rng):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    assert OP["max"](x, 1).shape == (6,) and OP["max"](x, 0).shape == (5,)
    assert OP["max"](x, 1, True).shape == (6, 1) and OP["max"](x, 0, True).shape == (1, 5)
    np.testing.assert_array_equal(OP["max"](x, 1), x.max(axis=1))
    np.testing.assert_allclose(OP["sum"](x, 0, True), x.sum(axis=0, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(x - OP["max"](x, 1, True), x - x.max(axis=1)[:, None])
    assert OP["sum"](x, 1).dtype == np.float32
    assert OP["sum"](np.ones((3, 4), np.int32), 1).dtype == np.int32
    assert OP["max"](x.astype(BF16), 1).dtype == BF16
    assert OP["max"](np.arange(5.0, dtype=np.float32), 0, True).shape == (1,)
    assert OP["max"](np.arange(5.0, dtype=np.float32), 0) == 4.0


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


# -- one rounding to bfloat16 ---------------------------------------------------------

def exact_bf16_bits(v):
    """bf16 bit pattern of ``v`` (a Python float or int, any size) rounded once to nearest
    even, computed on its exact value with Fractions; None for NaN."""
    if isinstance(v, float) and math.isnan(v):
        return None
    negative = math.copysign(1.0, v) < 0 if isinstance(v, float) else v < 0
    sign = 0x8000 if negative else 0
    if isinstance(v, float) and math.isinf(v):
        return sign | 0x7F80
    a = abs(Fraction(v))
    if a == 0:
        return sign
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1                                   # now 2**e <= a < 2**(e + 1)
    e = max(e, -126)                             # subnormals: the step stays 2**-133
    q = a / Fraction(2) ** (e - 7)               # 8 significant bits above the point
    n = math.floor(q)
    if q - n > Fraction(1, 2) or (q - n == Fraction(1, 2) and n % 2):
        n += 1
    if n == 256:
        n, e = 128, e + 1
    if e + 127 >= 255:
        return sign | 0x7F80
    bits = n if n < 128 else ((e + 127) << 7) | (n - 128)   # n < 128: a subnormal
    return sign | bits


def _assert_exact_bf16(x):
    """to_bfloat16(x) against :func:`exact_bf16_bits` of every element."""
    got = to_bfloat16(x)
    assert got.dtype == BF16 and got.shape == np.shape(x)
    got = got.reshape(-1)
    bad = []
    for v, g, bits in zip(np.asarray(x).reshape(-1).tolist(), got, got.view(np.uint16)):
        want = exact_bf16_bits(v)
        if not (np.isnan(float(g)) if want is None else int(bits) == want):
            bad.append(f"{v!r}: got {int(bits):#06x}, want {'NaN' if want is None else hex(want)}")
    assert not bad, f"{len(bad)} of {got.size} wrong, e.g.\n" + "\n".join(bad[:8])


def _bf16_midpoints(rng, n):
    """float64 midpoints between random neighbouring bf16 numbers (subnormals and the tie
    above bf16 max included) and the float64 numbers right next to them."""
    lo = np.concatenate([rng.integers(0, 0x7F7F, n), [0, 1, 0x7F, 0x80, 0x7F7E, 0x7F7F]])
    a = lo.astype(np.uint32).astype(np.uint16).view(BF16).astype(np.float64)
    b = (lo + 1).astype(np.uint32).astype(np.uint16).view(BF16).astype(np.float64)
    b = np.where(np.isinf(b), 2.0 ** 128, b)                # the tie above bf16 max
    mid = (a + b) / 2
    return np.concatenate([mid, np.nextafter(mid, 0), np.nextafter(mid, np.inf)])


def test_to_bfloat16_rounds_float64_once(rng):
    mids = _bf16_midpoints(rng, 800)
    trap = mids[:800] * (1 + rng.choice([-1, 1], 800) * 2.0 ** -40)  # f32 would tie them
    randbits = rng.integers(0, 2 ** 64, 3000, dtype=np.uint64).view(np.float64)
    tiny = np.ldexp(rng.integers(0, 2 ** 12, 300), -133 - 5)      # bf16 subnormal range
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 5e-324, -5e-324, 2.2e-308,
             2.0 ** -126, np.nextafter(2.0 ** -126, 0), 2.0 ** -133, 2.0 ** -134,
             np.nextafter(2.0 ** -134, 1), 1.5 * 2.0 ** -133, 2.5 * 2.0 ** -133,
             127.5 * 2.0 ** -133, 2.0 ** 128, np.nextafter(2.0 ** 128, 0), 1.7e308,
             (2 - 2.0 ** -8) * 2.0 ** 127, np.nextafter((2 - 2.0 ** -8) * 2.0 ** 127, 0),
             1 + 2.0 ** -8 + 2.0 ** -40, float.fromhex("0x1.b2fffffffe4d0p+122")]
    signs = rng.choice([-1.0, 1.0], mids.size + trap.size + tiny.size)
    x = np.concatenate([signs * np.concatenate([mids, trap, tiny]), randbits, edges])
    _assert_exact_bf16(x)


def test_to_bfloat16_of_float32_and_float16_is_ml_dtypes(rng):
    """float32 / float16 -> bf16 rounds once in ml_dtypes too (no wider source)."""
    f32 = np.concatenate([rng.integers(0, 2 ** 32, 3000, dtype=np.uint32).view(np.float32),
                          _bf16_midpoints(rng, 500).astype(np.float32)])
    f16 = np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    for x in (f32, f16):
        _assert_exact_bf16(x[::7] if x.dtype == np.float16 else x)
        with np.errstate(invalid="ignore"):          # signalling NaNs
            got, want = to_bfloat16(x), x.astype(BF16)
        nan = np.isnan(x)
        assert (got.view(np.uint16) == want.view(np.uint16))[~nan].all()
        assert np.isnan(got[nan].astype(np.float32)).all()


def _int_edges(top):
    """Integers just around bf16 midpoints (2**e + 2**(e - 8)), powers of two and their
    neighbours, below 2**top."""
    vals = []
    for e in range(8, top):
        for m in ((1 << e) + (1 << (e - 8)), 1 << e, (1 << e) + 3 * (1 << (e - 8))):
            vals += [m - 1, m, m + 1, -m - 1, -m, -m + 1]
    return vals


def test_to_bfloat16_of_int32(rng):
    info = np.iinfo(np.int32)
    vals = [v for v in _int_edges(31) if info.min <= v <= info.max]
    vals += [info.min, info.max, 0, 1, -1, 2 ** 24 + 1, 2 ** 24 + 2 ** 16 + 1, 0x08080001]
    x = np.concatenate([np.array(vals, np.int32),
                        rng.integers(info.min, info.max, 3000, dtype=np.int32, endpoint=True)])
    _assert_exact_bf16(x)
    for dt in (np.int8, np.int16, np.uint8, np.uint16, np.uint32):
        _assert_exact_bf16(x.astype(dt))


def test_to_bfloat16_of_int64_beyond_2_pow_53(rng):
    """float64 of these is rounded already: 2**60 + 2**52 + 1 -> 2**60 + 2**52, a bf16 tie
    that would then go to 2**60; the exact value rounds to 2**60 + 2**53."""
    info = np.iinfo(np.int64)
    vals = [v for v in _int_edges(63) if info.min <= v <= info.max]
    vals += [info.min, info.max, info.min + 1, 2 ** 53 + 1, 2 ** 53 - 1, 2 ** 60 + 2 ** 52 + 1,
             -(2 ** 60 + 2 ** 52 + 1), 2 ** 62 + 2 ** 54 + 2 ** 11, 2 ** 62 + 2 ** 54 + 1]
    x = np.concatenate([np.array(vals, np.int64),
                        rng.integers(info.min, info.max, 3000, dtype=np.int64, endpoint=True)])
    _assert_exact_bf16(x)
    got = to_bfloat16(np.array([2 ** 60 + 2 ** 52 + 1], np.int64)).astype(np.float64)
    assert got[0] == 2.0 ** 60 + 2.0 ** 53
    u = np.concatenate([np.array([2 ** 64 - 1, 2 ** 63, 2 ** 63 + 2 ** 55, 2 ** 63 + 2 ** 55 + 1],
                                 np.uint64),
                        rng.integers(0, 2 ** 64, 1000, dtype=np.uint64, endpoint=False)])
    _assert_exact_bf16(u)


def test_to_bfloat16_of_scalars_bool_and_python_ints():
    for v in [True, False, 0x08080001, -(2 ** 63), 2 ** 64 + 2 ** 56 + 1, 2 ** 200, -(2 ** 130),
              (2 ** 9 - 1) << 119, ((2 ** 9 - 1) << 119) - 1, 1 + 2.0 ** -8 + 2.0 ** -40]:
        got = to_bfloat16(v)
        assert got.shape == () and got.dtype == BF16
        assert int(got.reshape(1).view(np.uint16)[0]) == exact_bf16_bits(
            int(v) if isinstance(v, bool) else v), v
    assert np.isinf(float(to_bfloat16((2 ** 9 - 1) << 119)))   # the tie above bf16 max
    assert float(to_bfloat16(((2 ** 9 - 1) << 119) - 1)) == float(ml_dtypes.finfo(BF16).max)
    x = np.arange(12.0).reshape(3, 4).T                          # not contiguous
    np.testing.assert_array_equal(to_bfloat16(x).astype(np.float64), x)
    with pytest.raises(WSUsageError, match="complex"):
        to_bfloat16(np.ones(2, np.complex64))


#: float64 / int inputs whose float32 rounding lands on a bf16 tie (a double rounding
#: goes wrong): (value, dtype, bits of the one rounding)
DOUBLE_ROUNDING_TRAPS = [(1 + 2.0 ** -8 + 2.0 ** -40, np.float64, 0x3F81),
                         (float.fromhex("0x1.b2fffffffe4d0p+122"), np.float64, 0x7CD9),
                         (0x08080001, np.int32, 0x4D01), (0x08080001, np.int64, 0x4D01),
                         (2 ** 60 + 2 ** 52 + 1, np.int64, 0x5D81)]


@pytest.mark.parametrize("value,dt,bits", DOUBLE_ROUNDING_TRAPS)
def test_astype_store_full_round_once_to_bf16(value, dt, bits):
    tile = np.full((2, 3), value, dt)
    assert (OP["astype"](tile, ws.bfloat16).view(np.uint16) == bits).all()
    out = np.zeros((2, 3), BF16)
    OP["store"](out, (0, 0), tile)
    assert (out.view(np.uint16) == bits).all()
    full = OP["full"]((4,), value, ws.bfloat16)
    assert full.dtype == BF16 and (full.view(np.uint16) == bits).all()
    assert (OP["full"]((2,), dt(value), ws.bfloat16).view(np.uint16) == bits).all()


def test_scalar_operands_of_bf16_tiles_round_once():
    """The GPU casts a scalar operand to the tile's dtype (one rounding), then computes."""
    value, bits = DOUBLE_ROUNDING_TRAPS[0][0], DOUBLE_ROUNDING_TRAPS[0][2]
    zero = np.zeros(3, BF16)
    for name in ("add", "maximum"):
        assert (OP[name](zero, value).view(np.uint16) == bits).all(), name
        assert (OP[name](value, zero).view(np.uint16) == bits).all(), name
    assert (OP["sub"](zero, -value).view(np.uint16) == bits).all()
    assert (OP["mul"](np.ones(3, BF16), value).view(np.uint16) == bits).all()
    got = OP["where"](np.array([True, False, True]), value, zero)
    assert got.dtype == BF16 and got.view(np.uint16).tolist() == [bits, 0, bits]
    big = OP["add"](zero, 0x08080001)
    assert (big.view(np.uint16) == 0x4D01).all()


def test_map_on_bf16_rounds_its_float64_result_once():
    out = OP["map"](lambda v: v + 2.0 ** -8 + 2.0 ** -40, np.ones(4, BF16))
    assert out.dtype == BF16 and (out.view(np.uint16) == 0x3F81).all()


# -- argument errors of the ops in a kernel ---------------------------------------------

def _bad_keyword(a):
    x = ws.load(a, (0, 0), (4, 4))
    ws.dot(x, x, accumulator=ws.zeros((4, 4), ws.float32))


def _bad_keyword_by_name(a):
    x = load(a, (0, 0), (4, 4))
    dot(x, x, accumulator=None)


def _too_many(a):
    ws.program_id(0, 1)


def _missing(a):
    ws.load(a, (0, 0))


@pytest.mark.parametrize("kernel,match", [
    (_bad_keyword, r"ws\.dot\(a, b, acc=None\) got an unexpected keyword argument "
                   r"'accumulator'"),
    (_bad_keyword_by_name, r"ws\.dot\(a, b, acc=None\) got an unexpected keyword argument "
                           r"'accumulator'"),
    (_too_many, r"ws\.program_id\(axis\): too many positional arguments"),
    (_missing, r"ws\.load\(array, offsets, shape, mask=None, other=0\): missing a required "
               r"argument: 'shape'")])
def test_wrong_arguments_to_an_op_are_a_usage_error(kernel, match):
    """Before: Python's bare TypeError from the stub ("dot() got an unexpected ...")."""
    with pytest.raises(WSUsageError, match=match) as info:
        interpret(kernel, (1,), {"a": np.zeros((4, 4), np.float16)})
    frames = [tb.tb_frame.f_code for tb in _tracebacks(info.tb)]
    assert kernel.__code__ in frames              # the traceback shows the kernel's line


def _tracebacks(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def test_kernel_sees_the_rest_of_the_module_unchanged():
    seen = {}

    def kernel(a):
        seen["dtype"], seen["cdiv"] = ws.float16, ws.cdiv(7, 2)
        seen["tile"] = ws.load(a, (0,), (2,))

    interpret(kernel, (1,), {"a": np.arange(3, dtype=np.float32)})
    assert seen["dtype"] is ws.float16 and seen["cdiv"] == 4
    np.testing.assert_array_equal(seen["tile"], [0.0, 1.0])


def test_offsets_of_the_wrong_length_say_entry_or_entries():
    a = np.zeros((4, 4), np.float32)
    with pytest.raises(WSUsageError, match=r"offsets has 1 entry but the array is 2-D"):
        OP["load"](a, (0,), (4, 4))
    with pytest.raises(WSUsageError, match=r"offsets has 3 entries but the array is 2-D"):
        OP["store"](a, (0, 0, 0), np.ones((2, 2), np.float32))
