"""Element conversions (codegen/convert.py) without a GPU.

- Every (from, to) pair of the language's dtypes and bool, through a one-line Numba CUDA
  kernel whose conversion is an intrinsic calling ``convert.cast``: the PTX has no
  external call (numba-cuda's bf16 shims, ``_nbst``) and assembles with ptxas for
  sm_90a and sm_80, for both forms of ``cast`` (``cc`` below or from (9, 0)).
- The instruction chosen for the conversions where the choice matters (single rounding
  for f64 / int -> bf16 on sm_80, truncation for f16 -> int, NaN -> 0 selects...), and
  that the sm_90 forms really do not assemble for sm_80.
- ``cast_pair``: one ``cvt.rn.{f16x2,bf16x2}.f32`` with ``hi`` as the first operand.
- ``reference``: NumPy's astype where NumPy defines the result, saturation otherwise, and
  to bfloat16 one rounding of the exact value (``to_bfloat16``; ml_dtypes' astype rounds
  float64 and integers through float32 first on the H200), checked on the H200's results.

tests/gpu/test_convert_gpu.py runs the same harness (``cast_kernel`` / ``multi_cast_kernel``
below) on the GPU against ``reference``.
"""
import functools
import re
import subprocess

import ml_dtypes
import numpy as np
import pytest
from llvmlite import ir
from numba import cuda
from numba.cuda import types
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ptx_tools import PTXAS, assemble
from numba_ws.codegen import convert
from numba_ws.errors import WSCompileError
from numba_ws.interpreter.ops import to_bfloat16

TYPES = {"float16": types.float16, "bfloat16": types.bfloat16, "float32": types.float32,
         "float64": types.float64, "int32": types.int32, "int64": types.int64,
         "bool": types.boolean}
NP_DTYPES = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16),
             "float32": np.dtype(np.float32), "float64": np.dtype(np.float64),
             "int32": np.dtype(np.int32), "int64": np.dtype(np.int64),
             "bool": np.dtype(np.bool_)}
PTX_NAMES = {"float64": "f64", "int64": "s64", "int32": "s32"}
PAIRS = [(f, t) for f in TYPES for t in TYPES]
SM90 = (9, 0, "a")
SM80 = (8, 0)
CCS = {"sm_90a": SM90, "sm_80": SM80}


# --- the harness (also used by tests/gpu/test_convert_gpu.py) ---------------------------

def storage(ty):
    """The array element type a kernel reads/writes for ``ty``: f16 and bf16 as their
    uint16 bits (the same i16 LLVM value), the rest as themselves."""
    return types.uint16 if ty in (types.float16, types.bfloat16) else ty


def cast_intrinsic(from_ty, to_tys, cc):
    """An intrinsic taking a ``storage(from_ty)`` scalar and returning the tuple of its
    ``convert.cast`` to each of ``to_tys`` (as storage types)."""
    resty = types.Tuple([storage(t) for t in to_tys])

    @intrinsic
    def convert_all(typingctx, x):
        def codegen(context, builder, sig, args):
            vals = [convert.cast(context, builder, args[0], from_ty, t, cc=cc) for t in to_tys]
            return context.make_tuple(builder, resty, vals)
        return signature(resty, storage(from_ty)), codegen

    return convert_all


def cast_kernel(from_ty, to_ty, cc):
    """(kernel, signature): ``dst[i] = cast(src[i])`` for ``from_ty -> to_ty``."""
    conv = cast_intrinsic(from_ty, [to_ty], cc)

    def kernel(src, dst):
        i = cuda.grid(1)
        if i < src.size:
            dst[i] = conv(src[i])[0]

    return kernel, (storage(from_ty)[::1], storage(to_ty)[::1])


def multi_cast_kernel(from_ty, cc):
    """(kernel, signature): ``outs[k][i] = cast(src[i])`` to the k-th of ``TYPES``."""
    to_tys = list(TYPES.values())
    assert len(to_tys) == 7
    conv = cast_intrinsic(from_ty, to_tys, cc)

    def kernel(src, o0, o1, o2, o3, o4, o5, o6):
        i = cuda.grid(1)
        if i < src.size:
            r = conv(src[i])
            o0[i] = r[0]
            o1[i] = r[1]
            o2[i] = r[2]
            o3[i] = r[3]
            o4[i] = r[4]
            o5[i] = r[5]
            o6[i] = r[6]

    return kernel, (storage(from_ty)[::1],) + tuple(storage(t)[::1] for t in to_tys)


def pair_intrinsic(from_ty, to_ty, cc=None):
    """``cast_pair(lo, hi)`` as an intrinsic returning the packed uint32."""
    @intrinsic
    def convert_pair(typingctx, lo, hi):
        def codegen(context, builder, sig, args):
            return convert.cast_pair(context, builder, args[0], args[1], from_ty, to_ty, cc=cc)
        return signature(types.uint32, storage(from_ty), storage(from_ty)), codegen

    return convert_pair


def pair_kernel(from_ty, to_ty):
    conv = pair_intrinsic(from_ty, to_ty)

    def kernel(lo, hi, dst):
        i = cuda.grid(1)
        if i < lo.size:
            dst[i] = conv(lo[i], hi[i])

    return kernel, (storage(from_ty)[::1], storage(from_ty)[::1], types.uint32[::1])


# --- PTX of every pair -----------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def pair_ptx(frm, to, cast_cc, compile_cc):
    kernel, sig = cast_kernel(TYPES[frm], TYPES[to], cast_cc)
    ptx, _ = cuda.compile_ptx(kernel, sig, cc=compile_cc)
    return ptx


def _no_external_calls(ptx):
    assert "_nbst" not in ptx
    assert ".extern" not in ptx and not re.search(r"^\s*call", ptx, re.M), ptx


@pytest.mark.skipif(PTXAS is None, reason="needs ptxas")
@pytest.mark.parametrize("frm,to", PAIRS, ids=[f"{f}-{t}" for f, t in PAIRS])
def test_every_pair_assembles_for_sm90a_and_sm80(tmp_path, frm, to):
    for arch, cc in CCS.items():
        ptx = pair_ptx(frm, to, cc, cc)
        _no_external_calls(ptx)
        assert f".target {arch}" in ptx
        assemble(ptx, tmp_path, arch)


def test_sm80_forms_assemble_on_sm90a(tmp_path):
    """cast(cc=None) -- what a caller that does not know the target emits -- on sm_90a."""
    for frm, to in (("float64", "bfloat16"), ("int64", "bfloat16"), ("int32", "bfloat16")):
        ptx = pair_ptx(frm, to, None, SM90)
        assert "cvt.rz.f32." in ptx
        assemble(ptx, tmp_path, "sm_90a")


@pytest.mark.skipif(PTXAS is None, reason="needs ptxas")
@pytest.mark.parametrize("frm", ["float64", "int64", "int32"])
def test_sm90_bf16_forms_do_not_assemble_for_sm80(tmp_path, frm):
    """Why ``cc`` matters: ``cvt.rn.bf16.{f64,s64,s32}`` is sm_90+ (PTX ISA notes)."""
    ptx = pair_ptx(frm, "bfloat16", SM90, SM80)
    assert f"cvt.rn.bf16.{PTX_NAMES[frm]}" in ptx
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    res = subprocess.run([PTXAS, "-arch=sm_80", str(src), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True)
    assert res.returncode != 0 and "sm_90" in res.stderr, res.stderr


# --- the instruction chosen --------------------------------------------------------------

_SHL16 = r"shl\.b32\s+%r\d+, %r\d+, 16;"      # bf16 bits -> f32 bits
BOTH = (SM80, SM90)
# (from, to): [(ccs, patterns that must appear, patterns that must not)]
EXPECTED = {
    ("float32", "bfloat16"): [(BOTH, [r"cvt\.rn\.bf16\.f32"], [])],
    ("float16", "bfloat16"): [(BOTH, [r"cvt\.f32\.f16", r"cvt\.rn\.bf16\.f32"], [])],
    ("bfloat16", "float16"): [(BOTH, [_SHL16, r"cvt\.rn\.f16\.f32"], [])],
    ("bfloat16", "float32"): [(BOTH, [_SHL16], [r"cvt\.f32\.bf16"])],
    ("bfloat16", "float64"): [(BOTH, [_SHL16, r"cvt\.f64\.f32"], [])],
    ("float64", "bfloat16"): [
        ((SM80,), [r"cvt\.rz\.f32\.f64", r"cvt\.f64\.f32", r"setp\.neu\.f64",
                   r"or\.b32", r"cvt\.rn\.bf16\.f32"],
         [r"cvt\.rn\.bf16\.f64", r"cvt\.rn\.f32\.f64"]),
        ((SM90,), [r"cvt\.rn\.bf16\.f64"], [r"cvt\.rz\.f32\.f64", r"cvt\.rn\.bf16\.f32"])],
    ("int32", "bfloat16"): [
        ((SM80,), [r"cvt\.rz\.f32\.s32", r"cvt\.rzi\.s32\.f32", r"cvt\.rn\.bf16\.f32"],
         [r"cvt\.rn\.f32\.s32", r"cvt\.rn\.bf16\.s32"]),
        ((SM90,), [r"cvt\.rn\.bf16\.s32"], [r"cvt\.rz\.f32\.s32"])],
    ("int64", "bfloat16"): [
        ((SM80,), [r"cvt\.rz\.f32\.s64", r"cvt\.rzi\.s64\.f32", r"cvt\.rn\.bf16\.f32"],
         [r"cvt\.rn\.f32\.s64", r"cvt\.rn\.bf16\.s64"]),
        ((SM90,), [r"cvt\.rn\.bf16\.s64"], [r"cvt\.rz\.f32\.s64"])],
    ("float64", "float16"): [(BOTH, [r"cvt\.rn\.f16\.f64"], [r"cvt\.rn\.f32\.f64"])],
    ("float32", "float16"): [(BOTH, [r"cvt\.rn\.f16\.f32"], [])],
    ("int32", "float16"): [(BOTH, [r"cvt\.rn\.f16\.s32"], [])],
    ("int64", "float16"): [(BOTH, [r"cvt\.rn\.f16\.s64"], [r"cvt\.rn\.f32\.s64"])],
    ("float16", "float32"): [(BOTH, [r"cvt\.f32\.f16"], [])],
    ("float16", "float64"): [(BOTH, [r"cvt\.f64\.f16"], [])],
    ("float16", "int32"): [(BOTH, [r"cvt\.f32\.f16", r"cvt\.rzi\.s32\.f32"],
                            [r"cvt\.rni", r"setp\.nan"])],
    ("bfloat16", "int64"): [(BOTH, [_SHL16, r"cvt\.rzi\.s64\.f32", r"setp\.nan\.f32"], [])],
    ("float32", "int32"): [(BOTH, [r"cvt\.rzi\.s32\.f32"], [r"setp\.nan"])],
    ("float32", "int64"): [(BOTH, [r"cvt\.rzi\.s64\.f32", r"setp\.nan\.f32", r"selp"], [])],
    ("float64", "int32"): [(BOTH, [r"cvt\.rzi\.s32\.f64", r"setp\.nan\.f64", r"selp"], [])],
    ("float64", "int64"): [(BOTH, [r"cvt\.rzi\.s64\.f64", r"setp\.nan\.f64", r"selp"], [])],
    ("float64", "float32"): [(BOTH, [r"cvt\.rn\.f32\.f64"], [])],
    ("float32", "float64"): [(BOTH, [r"cvt\.f64\.f32"], [])],
    ("int32", "float32"): [(BOTH, [r"cvt\.rn\.f32\.s32"], [])],
    ("int64", "float32"): [(BOTH, [r"cvt\.rn\.f32\.s64"], [r"cvt\.rn\.f64"])],
    ("int64", "float64"): [(BOTH, [r"cvt\.rn\.f64\.s64"], [])],
    ("float32", "bool"): [(BOTH, [r"setp\.neu\.f32"], [])],
    ("float16", "bool"): [(BOTH, [r"and\.b16\s+%rs\d+, %rs\d+, 32767"], [r"cvt\.f32\.f16"])],
    ("bool", "bfloat16"): [(BOTH, [r"selp\.b16\s+%rs\d+, 0, 16256"], [])],
    ("bool", "float16"): [(BOTH, [r"selp\.b16\s+%rs\d+, 0, 15360"], [])],
}


def _asm_body(ptx):
    """The instructions of the entry, without the index arithmetic's own cvt.s64.s32."""
    return ptx[ptx.index(".entry"):]


@pytest.mark.parametrize("frm,to", list(EXPECTED), ids=[f"{f}-{t}" for f, t in EXPECTED])
def test_instruction_chosen(frm, to):
    for ccs, present, absent in EXPECTED[(frm, to)]:
        for cc in ccs:
            body = _asm_body(pair_ptx(frm, to, cc, cc))
            for pat in present:
                assert re.search(pat, body), f"{frm}->{to} on {cc}: no {pat!r}\n{body}"
            for pat in absent:
                assert not re.search(pat, body), f"{frm}->{to} on {cc}: has {pat!r}\n{body}"


def test_identity_emits_no_conversion():
    for name in ("bfloat16", "float32", "int64"):
        body = _asm_body(pair_ptx(name, name, SM90, SM90))
        assert not re.search(r"cvt\.(rn|rz|rzi)|shl\.b32|setp\.(neu|nan)", body), body


# --- cast_pair -----------------------------------------------------------------------------

@pytest.mark.skipif(PTXAS is None, reason="needs ptxas")
@pytest.mark.parametrize("to", ["float16", "bfloat16"])
def test_cast_pair_is_one_packed_cvt_with_hi_first(tmp_path, to):
    """lo = 1.0, hi = 2.0 as constants: the first source of the cvt must hold 2.0."""
    conv = pair_intrinsic(types.float32, TYPES[to])

    def kernel(dst):
        dst[0] = conv(np.float32(1.0), np.float32(2.0))

    short = {"float16": "f16", "bfloat16": "bf16"}[to]
    for arch, cc in CCS.items():
        ptx, _ = cuda.compile_ptx(kernel, (types.uint32[::1],), cc=cc)
        m = re.search(rf"cvt\.rn\.{short}x2\.f32 (%r\d+), (%f\d+), (%f\d+);", ptx)
        assert m, ptx
        consts = dict(re.findall(r"mov\.f32\s+(%f\d+), (0f[0-9A-F]{8});", ptx))
        assert consts[m.group(2)] == "0f40000000" and consts[m.group(3)] == "0f3F800000", ptx
        assert ptx.count(f"cvt.rn.{short}") == 1     # no scalar conversions besides
        assemble(ptx, tmp_path, arch)


@pytest.mark.skipif(PTXAS is None, reason="needs ptxas")
@pytest.mark.parametrize("frm", ["float32", "float64", "bfloat16", "int32"])
def test_cast_pair_kernel_assembles(tmp_path, frm):
    """The GPU test's pair kernel; only an f32 source gives the packed cvt."""
    kernel, sig = pair_kernel(TYPES[frm], types.bfloat16)
    for arch, cc in CCS.items():
        ptx, _ = cuda.compile_ptx(kernel, sig, cc=cc)
        _no_external_calls(ptx)
        assert ("cvt.rn.bf16x2.f32" in ptx) == (frm == "float32")
        assemble(ptx, tmp_path, arch)


@pytest.mark.skipif(PTXAS is None, reason="needs ptxas")
@pytest.mark.parametrize("frm", list(TYPES))
def test_multi_cast_kernel_assembles(tmp_path, frm):
    """The GPU test's kernel (one source to all seven types), both forms of cast."""
    for cast_cc in (None, SM90):
        kernel, sig = multi_cast_kernel(TYPES[frm], cast_cc)
        ptx, _ = cuda.compile_ptx(kernel, sig, cc=SM90)
        _no_external_calls(ptx)
        assemble(ptx, tmp_path, "sm_90a")


def test_cast_pair_refuses_a_non_16_bit_result():
    builder = _scratch_builder(ir.FloatType())
    x = builder.function.args[0]
    with pytest.raises(WSCompileError, match="float16 or bfloat16"):
        convert.cast_pair(None, builder, x, x, types.float32, types.float64)


def _scratch_builder(argty):
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [argty]), "f")
    return ir.IRBuilder(fn.append_basic_block())


def test_unsupported_type_is_a_compile_error_naming_it():
    builder = _scratch_builder(ir.FloatType())
    x = builder.function.args[0]
    with pytest.raises(WSCompileError, match="complex64"):
        convert.cast(None, builder, x, types.float32, types.complex64)


# --- reference -----------------------------------------------------------------------------

def test_reference_is_numpy_astype_where_numpy_defines_it():
    """... with to_bfloat16 for bfloat16 results (tests/test_interpreter_ops.py checks it
    against the exact rounding, with Fractions)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(4096) * 1e4
    for frm in ("float16", "bfloat16", "float32", "float64", "int32", "int64"):
        src = x.astype(NP_DTYPES[frm])
        for to in TYPES:
            ref = convert.reference(src, NP_DTYPES[to])
            with np.errstate(all="ignore"):
                want = to_bfloat16(src) if to == "bfloat16" else src.astype(NP_DTYPES[to])
            assert ref.dtype == NP_DTYPES[to]
            same = (ref == want) | (np.isnan(ref.astype(np.float64)) &
                                    np.isnan(want.astype(np.float64)))
            assert same.all(), (frm, to)


def test_reference_saturates_float_to_int():
    x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2.0 ** 31, -2.0 ** 31, 2.7, -2.7,
                  1e300, -1e300, 2.0 ** 63], np.float64)
    i32 = np.iinfo(np.int32)
    i64 = np.iinfo(np.int64)
    assert convert.reference(x, np.int32).tolist() == [
        0, i32.max, i32.min, i32.max, i32.min, i32.max, i32.min, 2, -2, i32.max, i32.min,
        i32.max]
    assert convert.reference(x, np.int64).tolist() == [
        0, i64.max, i64.min, 3000000000, -3000000000, 2 ** 31, -2 ** 31, 2, -2, i64.max,
        i64.min, i64.max]
    bf = np.array([np.nan, -np.inf, 3e38, -1.5], ml_dtypes.bfloat16)
    assert convert.reference(bf, np.int32).tolist() == [0, i32.min, i32.max, -1]
    assert convert.reference(bf, np.uint32).tolist() == [0, 0, 2 ** 32 - 1, 0]


def test_reference_rounds_once_to_bf16():
    """int64, int32 and f64 round to bf16 once (what the GPU's round-to-odd path and the
    sm_90 cvt give; a double rounding through f32 gives 2**24 here)."""
    v = 2 ** 24 + 2 ** 16 + 1
    for dt in (np.int64, np.int32, np.float64):
        out = convert.reference(np.array([v], dt), ml_dtypes.bfloat16).astype(np.float64)
        assert out[0] == 2 ** 24 + 2 ** 17


#: inputs of tests/gpu/test_convert_gpu.py where the H200 (2026-12-03, cast with both
#: forms, and cast_pair f64 -> bf16) and the ml_dtypes astype there disagreed:
#: (dtype, bits of the input, bf16 the GPU gave, bf16 of a rounding through float32)
H200_BF16 = [(np.int32, 0x08080001, 0x4D01, 0x4D00),      # 2**27 + 2**19 + 1
             (np.int64, 0x08080001, 0x4D01, 0x4D00),
             (np.float64, 0x479B2FFFFFFFE4D0, 0x7CD9, 0x7CDA)]   # 9.034596533842383e+36


@pytest.mark.parametrize("dt,bits,gpu,twice", H200_BF16)
def test_reference_gives_what_the_h200_gave(dt, bits, gpu, twice):
    x = np.array([bits], {4: np.uint32, 8: np.uint64}[np.dtype(dt).itemsize]).view(dt)
    assert int(convert.reference(x, ml_dtypes.bfloat16).view(np.uint16)[0]) == gpu
    through_f32 = x.astype(np.float32).astype(ml_dtypes.bfloat16)   # the double rounding
    assert int(through_f32.view(np.uint16)[0]) == twice


def _bf16_edge_f64(rng, n):
    """f64 values at and just off the midpoints between bf16 neighbours (where a double
    rounding through f32 goes wrong), plus random bit patterns and the f32 range edges."""
    lo = rng.integers(0, 0x7F80, n, dtype=np.int64).astype(np.uint32)
    mid = ((lo << 16) | 0x8000).view(np.float32).astype(np.float64)   # exact midpoints
    nudge = rng.choice([-1, 1], n) * np.ldexp(np.abs(mid), -40)
    signs = rng.choice([-1.0, 1.0], n)
    bits = rng.integers(0, 2 ** 63, n, dtype=np.int64).view(np.float64)
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4028234663852886e38, 1e39,
                      -1e39, 3.3895313892515355e38, 3.3961775292304043e38, 1e-50, -1e-50,
                      np.ldexp(1.5, -133), np.ldexp(1.25, -140)])
    return np.concatenate([signs * mid, signs * (mid + nudge), bits, edges])


def test_round_to_odd_model_rounds_f64_once():
    """The sm_80 f64 -> bf16 construction (cvt.rz.f32.f64, sticky bit when the f32 is not
    exact, cvt.rn.bf16.f32), modelled in NumPy, equals the reference's single rounding."""
    x = _bf16_edge_f64(np.random.default_rng(2), 20000)
    with np.errstate(all="ignore"):
        r = x.astype(np.float32)
        toward_zero = np.abs(r.astype(np.float64)) > np.abs(x)        # RNE went outward
        r = np.where(toward_zero, np.nextafter(r, np.float32(0)), r)  # now cvt.rz.f32.f64
        inexact = r.astype(np.float64) != x                           # NaN: True
        odd = (r.view(np.uint32) | inexact.astype(np.uint32)).view(np.float32)
        got = odd.astype(ml_dtypes.bfloat16)
        want = convert.reference(x, ml_dtypes.bfloat16)
        twice = x.astype(np.float32).astype(ml_dtypes.bfloat16)
    nan = np.isnan(x)
    assert (got.view(np.uint16) == want.view(np.uint16))[~nan].all()
    assert np.isnan(got[nan].astype(np.float32)).all()
    assert (twice.view(np.uint16) != want.view(np.uint16)).sum() > 1000  # the cases matter


def test_round_to_odd_model_rounds_int64_once():
    """The same for int64 -> bf16 (cvt.rz.f32.s64, the exactness test by converting back)."""
    rng = np.random.default_rng(3)
    e = rng.integers(8, 63, 5000)
    ints = [(1 << int(k)) + (1 << int(k - 8)) + int(d) for k, d in
            zip(e, rng.choice([-1, 0, 1], 5000))]                     # bf16 midpoints +-1
    ints += [int(v) for v in rng.integers(-2 ** 63, 2 ** 63 - 1, 5000, dtype=np.int64)]
    ints += [-2 ** 63, 2 ** 63 - 1, 0, 1, -1]
    ints = [v if v < 2 ** 63 else 2 ** 63 - 1 for v in ints]
    x = np.array(ints, np.int64)
    got = []
    for v in ints:
        r = np.float32(v)                                             # RNE
        if abs(int(r)) > abs(v):
            r = np.nextafter(r, np.float32(0))                        # cvt.rz.f32.s64
        bits = np.array([r]).view(np.uint32) | np.uint32(int(r) != v)
        got.append(bits.view(np.float32).astype(ml_dtypes.bfloat16)[0])
    got = np.array(got, ml_dtypes.bfloat16)
    want = convert.reference(x, ml_dtypes.bfloat16)
    assert (got.view(np.uint16) == want.view(np.uint16)).all()
