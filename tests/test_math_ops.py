"""Issue 15 item 3 without a GPU: more math (sqrt, rsqrt, abs, minimum, sigmoid, tanh,
gelu, fma), ws.min / argmax / argmin, integer operators and the dtype promotion.

- The kernels of tests/kernels_math.py in the interpreter against float64 / exact NumPy
  references (NaN, ±inf, ±0, negative operands of // and %, division by zero, shift
  counts out of range, ties and NaN for argmax), fresh inputs every run.
- The interpreter's rules one by one (the semantic reference): NumPy's results, the
  exact fma, the Tile promotion, errors naming the op.
- The promotion table and the typing rules, and typing errors on the kernel's line.
- ``ws.verify`` (the partitioned program in the CPU simulator, ``num_consumer_groups``
  1 and 2) equal to the interpreter bit for bit; PTX through ptxas for sm_90a and sm_80
  with the instructions the math_ops docstring promises.
"""
import inspect
import math
import re
import warnings
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from numba.cuda import types

import numba_ws as ws
from numba_ws.errors import WSCompileError, WSUsageError
from numba_ws.interpreter import ops
from numba_ws.language import typing as tt
from numba_ws.language.types import TileType

import kernels_math as km
from ptx_tools import assemble

TARGETS = {"sm_90a": (9, 0, "a"), "sm_80": (8, 0)}
ALL = list(km.CASES.values())
FIRST = [c for i, c in enumerate(ALL) if all(d.kernel is not c.kernel for d in ALL[:i])]
OTHERS = [c for c in ALL if c not in FIRST]
BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture
def seed():
    return np.random.SeedSequence().entropy


def make(case, seed):
    args, grid = case.make(np.random.default_rng(seed))
    launch, outs = km.host_args(args)
    return launch, outs, grid


# == the kernels in the interpreter ==========================================================

@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_kernel_matches_reference_in_the_interpreter(case, seed):
    launch, outs, grid = make(case, seed)
    ws.jit(case.kernel)[grid](*launch, **case.meta)
    for i, (out, base) in enumerate(outs):
        out.check(base, f"{case.name} output {i} (seed {seed})")


def test_every_math_kernel_has_a_case():
    kernels = {f for f in vars(km).values() if inspect.isfunction(f)
               and f.__module__ == km.__name__
               and any(p.annotation is ws.constexpr
                       for p in inspect.signature(f).parameters.values())}
    assert len(kernels) >= 12 and kernels <= {c.kernel for c in ALL}


def test_the_check_catches_a_nan_where_the_reference_has_none():
    case = km.CASES["unary-abs-float32"]
    args, _ = case.make(np.random.default_rng(0))
    out = args[1]
    base, view = out.host()
    view[...] = out.ref
    out.check(base)
    view[1, 2] = np.nan if np.isfinite(out.ref[1, 2]) else 1.0
    with pytest.raises(AssertionError, match="differ in being NaN"):
        out.check(base)
    view[...] = out.ref
    view[3, 3] = km.SENTINEL
    with pytest.raises(AssertionError, match="never written"):
        out.check(base)


def test_a_result_equal_to_the_sentinel_is_checked_by_value():
    """fp16 a // b can round to the sentinel (-31337 -> -31344): such an element counts
    as written, is compared with its reference, and other unwritten elements still fail."""
    sentinel = float(np.float16(km.SENTINEL))
    ref = np.arange(12.0).reshape(3, 4)
    ref[1, 1] = sentinel
    out = km.Out((3, 4), "float16", ref, how="exact")
    base, view = out.host()
    view[...] = ref
    out.check(base)                                  # [1, 1] holds the sentinel: its value
    view[1, 1] = 5.0
    with pytest.raises(AssertionError, match="finite elements off"):
        out.check(base)
    view[1, 1] = sentinel
    view[0, 2] = sentinel
    with pytest.raises(AssertionError, match=r"1 of 12 outputs never written, first at \[0, 2\]"):
        out.check(base)


# == interpreter rules =======================================================================

def interp(name, *args):
    return ops.INTERPRET[name](*args)


def test_floor_division_and_remainder_of_ints_follow_numpy():
    a = np.array([7, -7, 7, -7, 0, 5, -5, -2 ** 31, -2 ** 31, 2 ** 31 - 1], np.int32)
    b = np.array([2, 2, -2, -2, 3, 0, 0, -1, 1, -1], np.int32)
    q, r = interp("floordiv", a, b), interp("mod", a, b)
    assert q.dtype == r.dtype == np.int32
    assert q.tolist() == [3, -4, -4, 3, 0, 0, 0, -2 ** 31, -2 ** 31, -(2 ** 31 - 1)]
    assert r.tolist() == [1, 1, -1, -1, 0, 0, 0, 0, 0, 0]
    nz = b != 0
    assert (q[nz] * b[nz] + r[nz] == a[nz]).all()


def test_int_operators_with_python_scalars_keep_the_tile_dtype():
    a = np.array([-9, -1, 0, 8], np.int64)
    assert interp("floordiv", a, -4).tolist() == [2, 0, 0, -2]
    assert interp("mod", a, -4).tolist() == [-1, -1, 0, 0]
    assert interp("lshift", np.int32(1), a.astype(np.int32)[3:]).dtype == np.int32
    x = np.array([3], np.int32)
    assert interp("add", x, 2 ** 40).dtype == np.int32      # the scalar wraps, as on the GPU
    assert interp("add", x, 2 ** 40).tolist() == [3]


def test_shift_counts_outside_the_width_give_numpys_results():
    x = np.array([1, -8, 1, 1, -1, -1, 5], np.int32)
    s = np.array([31, 1, 32, 40, -1, 33, 0], np.int32)
    assert interp("lshift", x, s).tolist() == [-2 ** 31, -16, 0, 0, 0, 0, 5]
    assert interp("rshift", x, s).tolist() == [0, -4, 0, 0, -1, -1, 5]


def test_float_floor_division_and_remainder_follow_numpy():
    a = np.array([7, -7, 7, -7, np.inf, 1, np.nan, 0, -0.0, 3, 1e-30], np.float32)
    b = np.array([2, 2, -2, -2, 2, np.inf, 1, 0, 3, 0, -1], np.float32)
    with np.errstate(all="ignore"):
        want_q, want_r = np.floor_divide(a, b), np.remainder(a, b)
    q, r = interp("floordiv", a, b), interp("mod", a, b)
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(r, want_r)
    assert np.signbit(r[2]) and not np.signbit(r[1])       # the divisor's sign


def test_shifts_of_float_tiles_are_refused():
    with pytest.raises(WSUsageError, match="<< needs integer"):
        interp("lshift", np.ones(3, np.float32), 1)


@pytest.mark.parametrize("name,fn", [("sqrt", np.sqrt), ("tanh", np.tanh),
                                     ("rsqrt", lambda x: 1 / np.sqrt(x)),
                                     ("sigmoid", lambda x: 1 / (1 + np.exp(-x)))])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16])
def test_unary_math_is_the_float64_value_rounded_once(name, fn, dtype):
    x = np.array([0.0, -0.0, 0.5, 2.0, 30.0, -30.0, np.inf, -np.inf, np.nan, 1e-3], dtype)
    with np.errstate(all="ignore"):
        want = ops.to_bfloat16(fn(x.astype(np.float64))) if dtype == BF16 else \
            fn(x.astype(np.float64)).astype(dtype)
        got = interp(name, x)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


def test_sqrt_of_fp32_equals_numpys_fp32_sqrt():
    x = np.random.default_rng(0).uniform(0, 1e6, 10_000).astype(np.float32)
    np.testing.assert_array_equal(interp("sqrt", x), np.sqrt(x))


def test_gelu_is_the_erf_formula():
    x = np.linspace(-6, 6, 97).astype(np.float32)
    want = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(float)])
    np.testing.assert_array_equal(interp("gelu", x), want.astype(np.float32))
    assert interp("gelu", np.array([np.inf], np.float32))[0] == np.inf


def test_math_of_an_int_tile_is_refused_with_the_way_out():
    for name in ("sqrt", "tanh", "gelu"):
        with pytest.raises(WSUsageError, match=rf"ws.{name}\(\): expected a float tile.*astype"):
            interp(name, np.arange(3, dtype=np.int32))


def test_abs_of_ints_and_floats():
    assert interp("abs", np.array([-3, 0, 4, -2 ** 31], np.int32)).tolist() == \
        [3, 0, 4, -2 ** 31]
    got = interp("abs", np.array([-0.0, -np.inf, np.nan, -2.5], np.float16))
    assert got.dtype == np.float16 and not np.signbit(got[0]) and got[1] == np.inf
    assert np.isnan(got[2]) and got[3] == 2.5


def test_minimum_propagates_nan_and_broadcasts():
    a = np.array([[1.0, np.nan, 3.0], [-1.0, 2.0, np.inf]], np.float32)
    v = np.array([2.0, 0.0, np.nan], np.float32)
    got = interp("minimum", a, v)
    np.testing.assert_array_equal(got, np.minimum(a, v[None, :]))
    assert interp("minimum", a, 0.5).dtype == np.float32
    assert interp("minimum", np.array([3, -2], np.int32), 0.5).dtype == np.float32


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.float64])
def test_fma_rounds_the_exact_value_once(dtype):
    """Against Fractions rounded once into the dtype; half the cases cancel the product
    (c = -(a * b) rounded), where the low bits of the exact product decide."""
    rng = np.random.default_rng(7)
    a, b = (rng.uniform(-3, 3, 400).astype(dtype) for _ in range(2))
    c = np.where(rng.random(400) < 0.5, (-(a * b)).astype(np.float64),
                 rng.uniform(-3, 3, 400)).astype(dtype)
    got = interp("fma", a, b, c)
    assert got.dtype == dtype
    name = ws.language.dtypes.from_numpy(np.dtype(dtype)).name
    np.testing.assert_array_equal(got.astype(np.float64), km.fma_reference(a, b, c, name))


def test_round_fraction_reference_rounds_ties_to_even_and_overflows():
    assert km.round_fraction(Fraction(1) + Fraction(1, 2 ** 11), "float16") == 1.0
    assert km.round_fraction(Fraction(1) + Fraction(3, 2 ** 11), "float16") == 1 + 2 ** -9
    assert km.round_fraction(Fraction(65520), "float16") == math.inf
    assert km.round_fraction(Fraction(65519), "float16") == 65504.0
    assert km.round_fraction(Fraction(3, 2 ** 25), "float16") == 2 ** -23   # subnormal tie
    assert km.round_fraction(Fraction(5, 2 ** 26), "float16") == 2 ** -24


def test_fma_differs_from_multiply_then_add_where_it_should():
    """(1 + 2**-12)**2 - 1: the product's 2**-24 is lost by a rounded multiply."""
    x = np.float32(1 + 2 ** -12)
    fused = interp("fma", np.array([x]), x, np.float32(-1.0))[0]
    assert fused == np.float32(2 ** -11 + 2 ** -24)
    assert np.float32(x * x) - np.float32(1) == np.float32(2 ** -11)


def test_fma_refuses_int_tiles():
    with pytest.raises(WSUsageError, match="float tiles or scalars"):
        interp("fma", np.arange(3, dtype=np.int32), 2, 1)


def test_min_and_argmax_follow_numpy_on_shapes_nan_and_ties():
    x = np.array([[1.0, 3.0, 3.0, np.nan, np.nan],
                  [2.0, -1.0, -1.0, 0.0, 2.0],
                  [np.inf, np.inf, -np.inf, -np.inf, 0.0]], np.float32)
    assert interp("argmax", x, 1).tolist() == [3, 0, 0]      # first NaN; first tie
    assert interp("argmin", x, 1, True).tolist() == [[3], [1], [2]]
    assert interp("argmax", x, 0, True).tolist() == [[2, 2, 0, 0, 0]]
    assert interp("argmax", x, 1).dtype == np.int32
    m = interp("min", x, 1, True)
    assert m.shape == (3, 1) and np.isnan(m[0, 0]) and m[1, 0] == -1 and m[2, 0] == -np.inf
    assert interp("min", x, 1).shape == (3,) and np.isnan(interp("min", x))
    assert interp("argmax", np.array([5, 9, 9, 1], np.int32), 0) == 1


def test_argmax_of_a_bool_tile_is_refused():
    with pytest.raises(WSUsageError, match="argmax.*tile of numbers"):
        interp("argmax", np.array([[True, False]]), 1)


# == the interpreter's tiles: promotion, values, astype ======================================

def test_interpreter_tiles_promote_like_the_compiled_language():
    i32 = interp("full", (2, 3), 7, ws.int32)
    f32 = interp("full", (2, 3), 0.5, ws.float32)
    f16 = interp("full", (2, 3), 0.5, ws.float16)
    i64 = interp("full", (2, 3), 1, ws.int64)
    assert isinstance(i32, ops.Tile)
    assert (i32 + f32).dtype == np.float32            # NumPy: float64
    assert (i32 * 1.5).dtype == np.float32            # NumPy: float64
    assert (i32 / i32).dtype == np.float32            # NumPy: float64
    assert (f16 + f32).dtype == np.float32
    assert (f16 * 3.0).dtype == np.float16            # weak scalar
    assert (2 * i32).dtype == np.int32
    assert (i32 + i64).dtype == np.int64
    assert (i32 // 2).dtype == np.int32 and (i32 % 2).dtype == np.int32
    assert ((i32 + f32) * 0.1)[0, 0] == np.float32(np.float32(7.5) * np.float32(0.1))
    assert (i32 < 3).dtype == np.bool_                # comparisons as NumPy's


def test_in_place_operators_make_a_new_tile():
    acc = interp("zeros", (2, 2), ws.int32)
    alias = acc
    acc += 1.5                                       # int tile + float: float32
    assert acc.dtype == np.float32 and acc[0, 0] == 1.5
    assert alias.dtype == np.int32 and (alias == 0).all()


def test_astype_method_rounds_once_to_bf16():
    """int32 2**27 + 2**19 + 1 rounds to 0x4d01 in one rounding (via fp32: 0x4d00)."""
    t = interp("full", (1, 1), 2 ** 27 + 2 ** 19 + 1, ws.int32)
    got = t.astype(ws.bfloat16)
    assert isinstance(got, ops.Tile) and got.view(np.uint16)[0, 0] == 0x4D01


# == promotion table and typing ==============================================================

S_INT, S_FLOAT, S_BOOL = ("scalar", "int"), ("scalar", "float"), ("scalar", "bool")


@pytest.mark.parametrize("a,b,want", [
    ("int32", "float32", "float32"), ("float32", "int32", "float32"),
    ("int32", S_FLOAT, "float32"), ("int64", S_FLOAT, "float32"),
    ("float16", "float32", "float32"), ("bfloat16", "float16", "float32"),
    ("float32", "float64", "float64"), ("float16", S_FLOAT, "float16"),
    ("bfloat16", S_INT, "bfloat16"), ("int32", S_INT, "int32"), ("int32", "int64", "int64"),
    ("int8", "uint8", "int16"), ("int16", "int32", "int32"), ("bool", "int32", "int32"),
    ("bool", S_INT, "int32"), ("bool", S_FLOAT, "float32"), ("float32", S_BOOL, "float32"),
    ("int16", "float16", "float16"), (S_INT, S_FLOAT, None)])
def test_promotion_table(a, b, want):
    assert tt.promote(a, b) == want
    if want is not None:
        assert tt.promote(b, a) == want


def test_true_division_of_ints_is_float32_and_shifts_need_ints():
    assert tt.binary_result("truediv", "int32", "int32") == "float32"
    assert tt.binary_result("truediv", "int64", S_INT) == "float32"
    assert tt.binary_result("truediv", "float16", S_INT) == "float16"
    assert tt.binary_result("floordiv", "int32", S_INT) == "int32"
    assert tt.binary_result("floordiv", "float32", S_INT) == "float32"
    with pytest.raises(ValueError, match=">> needs integer"):
        tt.binary_result("rshift", "int32", S_FLOAT)


def tile(dtype, shape=(64, 64)):
    return TileType(dtype, shape)


@pytest.mark.parametrize("op,a,b,want", [
    ("add", tile(types.int32), tile(types.float32), types.float32),
    ("mul", tile(types.int32), types.float64, types.float32),
    ("mul", tile(types.float16), types.float64, types.float16),
    ("sub", tile(types.int32), tile(types.int64), types.int64),
    ("truediv", tile(types.int32), tile(types.int32), types.float32),
    ("add", tile(types.float16), tile(types.float32), types.float32),
    ("floordiv", tile(types.int64), types.int64, types.int64),
    ("mod", tile(types.float32), types.int64, types.float32),
    ("lshift", tile(types.int32), types.int64, types.int32),
    ("minimum", tile(types.int32), types.float64, types.float32),
    ("maximum", tile(types.float32), tile(types.float16), types.float32)])
def test_typing_rules_promote(op, a, b, want):
    assert tt.TYPING[op](a, b).dtype == want


def test_typing_of_the_new_ops():
    x = tile(types.float16, (64, 32))
    assert tt.TYPING["sqrt"](x) == x
    assert tt.TYPING["argmax"](x, types.IntegerLiteral(1)) == TileType(types.int32, (64,))
    assert tt.TYPING["argmin"](x, types.IntegerLiteral(0), types.BooleanLiteral(True)) == \
        TileType(types.int32, (1, 32))
    assert tt.TYPING["min"](x, types.IntegerLiteral(1)) == TileType(types.float16, (64,))
    assert tt.TYPING["min"](x, types.none) == types.float16
    assert tt.TYPING["abs"](tile(types.int64)) == tile(types.int64)
    fma = tt.TYPING["fma"](tile(types.float32, (64, 1)), types.float64,
                           tile(types.float16, (64, 32)))
    assert fma == TileType(types.float32, (64, 32))
    for bad, call in [("floating-point tile", lambda: tt.TYPING["tanh"](tile(types.int32))),
                      ("fma\\(a\\) must be a float", lambda: tt.TYPING["fma"](
                          tile(types.int32), 1.0, 1.0)),
                      ("<< needs integer", lambda: tt.TYPING["lshift"](
                          tile(types.float32), types.int64)),
                      ("tile of numbers", lambda: tt.TYPING["argmax"](
                          tile(types.boolean), types.IntegerLiteral(1)))]:
        with pytest.raises(Exception, match=bad):
            call()


def test_map_result_dtype_follows_the_tiles_float_dtype():
    assert tt.map_result_dtype(types.float64, [types.float32]) == types.float32
    assert tt.map_result_dtype(types.float64, [types.float16, types.float32]) == types.float32
    assert tt.map_result_dtype(types.float64, [types.int32]) == types.float32
    assert tt.map_result_dtype(types.float64, [types.float64]) == types.float64
    assert tt.map_result_dtype(types.int64, [types.float32]) == types.int64
    assert tt.map_result_dtype(types.boolean, [types.float32]) == types.boolean


def _shift_float(x, y, BM: ws.constexpr):
    t = ws.load(x, (0, 0), (BM, BM))
    ws.store(y, (0, 0), t << 1.5)                    # bad shift


def _sqrt_int(x, y, BM: ws.constexpr):
    t = ws.load(x, (0, 0), (BM, BM))
    ws.store(y, (0, 0), ws.sqrt(t))                  # bad sqrt


def _line_of(fn, marker):
    lines, start = inspect.getsourcelines(fn)
    return start + [i for i, text in enumerate(lines) if marker in text][0]


@pytest.mark.parametrize("fn,marker,match,dtype", [
    (_shift_float, "# bad shift", "<< needs integer .* operands, got a float scalar",
     np.int32),
    (_sqrt_int, "# bad sqrt", r"ws.sqrt\(x\): x must be a floating-point tile", np.int32)])
def test_typing_errors_name_the_kernel_line(fn, marker, match, dtype):
    x = np.zeros((64, 64), dtype)
    with pytest.raises(WSCompileError, match=match) as info:
        ws.jit(fn).inspect_ptx(x, x.copy(), BM=64)
    assert f"line {_line_of(fn, marker)}" in str(info.value)


# == ws.verify and ptxas =====================================================================

@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_verify_is_clean_and_equals_the_interpreter(case, groups):
    launch, _, grid = make(case, 14)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "numba_ws: kernel .*: cannot split")  # column ops
        report = ws.verify(case.kernel, grid, *launch, seeds=2, max_programs=3,
                           exact=case.exact, num_consumer_groups=groups, **case.meta)
    assert report.ok, str(report)
    assert report.comparison.startswith("bitwise")


def ptx_of(case, groups, target):
    launch, _, _ = make(case, 14)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "numba_ws: kernel .*: cannot split")  # column ops
        return ws.jit(case.kernel).inspect_ptx(*launch, cc=TARGETS[target],
                                               num_consumer_groups=groups, **case.meta)


def check_ptx(case, groups, target, tmp_path):
    ptx = ptx_of(case, groups, target)
    assert f".target {target}" in ptx
    log = assemble(ptx, tmp_path, target)
    assert ".local" not in ptx and "0 bytes stack frame" in log, log
    return ptx


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("case", FIRST, ids=[c.name for c in FIRST])
def test_ptx_assembles(case, groups, target, tmp_path):
    check_ptx(case, groups, target, tmp_path)


@pytest.mark.parametrize("case", OTHERS, ids=[c.name for c in OTHERS])
def test_ptx_assembles_other_cases(case, tmp_path):
    k = OTHERS.index(case)
    groups, target = [(1, "sm_90a"), (2, "sm_80")][k % 2]
    check_ptx(case, groups, target, tmp_path)


#: case -> instructions its PTX must contain (math_ops' docstring)
INSTRUCTIONS = {
    "unary-sqrt-float32": ["sqrt.rn.f32"], "unary-sqrt-float64": ["sqrt.rn.f64"],
    "unary-rsqrt-float32": ["rsqrt.approx.f32"], "unary-tanh-float16": ["tanh.approx.f32",
                                                                       "cvt.rn.f16.f32"],
    "unary-sigmoid-float32": ["ex2.approx.ftz.f32", "rcp.approx.ftz.f32"],
    "unary-gelu-float32": ["fma.rn.f32"], "minimum_tiles-float32": ["min.NaN.f32"],
    "minimum_tiles-float64": ["min.f64"], "fma_tiles-float16": ["fma.rn.f16"],
    "fma_tiles-bfloat16": ["fma.rn.bf16"], "fma_tiles-float32": ["fma.rn.f32"],
    "int_binop-floordiv-int32": ["div.s32"], "int_binop-mod-int64": ["rem.s64"],
    "int_binop-rshift-int32": ["shr.s32"], "row_reduce-argmax-float32-N64":
        ["shfl.sync.bfly"], "promote_mix": ["cvt.rn.f32.s32", "div.rn.f32"],
}


@pytest.mark.parametrize("name", list(INSTRUCTIONS))
def test_ptx_uses_the_documented_instructions(name):
    ptx = ptx_of(km.CASES[name], 1, "sm_90a")
    for instr in INSTRUCTIONS[name]:
        assert instr in ptx, f"{name}: no {instr}"


def test_cross_warp_argmax_exchanges_values_then_indices():
    """A column argmax of a (64, 64) fp32 blocked tile spans the 4 warps: two exchanges
    through scratch (4 group barriers), none for the column min (2)."""
    def group_barriers(op):
        case = km.CASES[f"col_reduce-{op}-float32-M64"]
        return len(re.findall(r"bar\.sync\s+%r\d+, 128", ptx_of(case, 1, "sm_90a")))
    assert group_barriers("min") == 2
    assert group_barriers("argmax") == 4
