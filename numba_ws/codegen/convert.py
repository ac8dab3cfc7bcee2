"""Element conversions on the GPU: ``astype`` between any two scalar types of the language.

:func:`cast` converts one LLVM value; :func:`cast_pair` packs two fp32 values into one
``f16x2`` / ``bf16x2`` register; :func:`reference` is the host-side statement of what the
GPU gives, used by the tests. numba_ws emits its own PTX here instead of numba-cuda's
``context.cast``, whose bf16 conversions call C++ shims (``_ZN13__nv_bfloat16C1Ef_nbst``)
that numba_ws kernels do not link, and whose fp16 -> int rounds to nearest (``cvt.rni``)
where NumPy truncates.

Types: ``float16``, ``bfloat16`` (both i16 bit patterns in LLVM), ``float32``,
``float64``, ``boolean`` (i1) and any ``types.Integer`` (the language has int32 and
int64; the codegen also passes uint32 and literal ints). Literal types are unwrapped.

Semantics are NumPy ``astype`` (bf16 as ml_dtypes) wherever NumPy defines the result:

- float -> narrower float: one rounding, to nearest even, subnormals kept (no ``.ftz``);
  overflow gives ±inf. f64 -> bf16 and int -> bf16 also round *once* on sm_80 (see below).
- float -> wider float, bf16 <-> f32/f64: exact. f16 <-> bf16 goes through f32: exact
  widening, then the one rounding -- the same result as a direct conversion.
- int -> float: one rounding to nearest even (int -> f16 overflows to ±inf).
- float -> int: truncation toward zero (NumPy's C cast).
- int -> int: two's complement wrap (truncation) or sign/zero extension, as NumPy.
- bool -> any: 0 or 1. any -> bool: ``x != 0`` (NaN is True, -0.0 False).
- NaN results are *a* NaN, payload and sign unspecified (the narrowing ``cvt.rn``s give
  the canonical ``0x7fff`` / ``0x7fffffff``; NumPy keeps payloads). Only an identity
  conversion (same type) keeps the bits.

Where NumPy's result is implementation-defined -- float -> int of NaN, ±inf or a value
outside the integer's range (x86 gives INT_MIN) -- the GPU *saturates*: +inf and values
above the range give the integer maximum, -inf and values below give the minimum, NaN
gives 0. PTX ``cvt.rzi`` clamps by itself; its NaN result is 0 only when neither the
source is f64 nor the destination 64-bit (otherwise ``1 << (bits - 1)``), so those
cases get one extra ``setp.nan`` + ``selp`` to give 0 as well. :func:`reference` encodes
this rule.

Instructions and minimum targets (PTX ISA notes of ``cvt``; NVVM 13.0 writes PTX ISA
8.x/9.0, above every version below):

- f32 -> bf16: ``cvt.rn.bf16.f32`` -- sm_80, PTX 7.0.
- bf16 -> f32: ``shl.b32`` of the bits by 16 (exact; ``cvt.f32.bf16`` would need PTX 7.1
  and leave a NaN's payload unspecified) -- any sm.
- f64 -> bf16, int -> bf16: with ``cc >= (9, 0)`` the direct ``cvt.rn.bf16.{f64,s32,
  u32,s64,u64}`` -- sm_90, PTX 7.8. Otherwise (sm_80) *round to odd* into f32 and then
  ``cvt.rn.bf16.f32``: ``cvt.rz.f32.*`` truncates, the conversion back tells whether it
  was exact, and an inexact result gets its lowest mantissa bit set. f32 keeps 16 more
  bits than bf16 (at every magnitude, subnormals included), so the final rounding is
  the one correct rounding: no double rounding.
- f16 <-> f32/f64: ``cvt.f32.f16`` / ``cvt.f64.f16`` / ``cvt.rn.f16.f32`` /
  ``cvt.rn.f16.f64``; int -> f16: ``cvt.rn.f16.{s,u}{32,64}`` -- any sm.
- float -> int: ``cvt.rzi.{s,u}{8,16,32,64}.{f32,f64}`` (f16/bf16 widened to f32 first,
  exactly) -- any sm.
- f32 <-> f64, int -> f32/f64, int -> int, bool: plain LLVM (``fpext``, ``fptrunc``,
  ``sitofp``/``uitofp``, ``trunc``/``sext``/``zext``, ``fcmp``/``icmp``), which NVVM
  lowers to ``cvt.f64.f32``, ``cvt.rn.f32.f64``, ``cvt.rn.f32.s32``... (numba_ws compiles
  without fast math, so no ``.ftz``).
- :func:`cast_pair`: ``cvt.rn.f16x2.f32`` / ``cvt.rn.bf16x2.f32`` -- sm_80, PTX 7.0.
"""
import numpy as np
from llvmlite import ir

from numba.cuda import types

from ..errors import WSCompileError
from ._util import F32, I32, asm

I1 = ir.IntType(1)
I16 = ir.IntType(16)
I64 = ir.IntType(64)
F64 = ir.DoubleType()

_FLOAT_KINDS = {types.float16: "f16", types.bfloat16: "bf16", types.float32: "f32",
                types.float64: "f64"}
#: LLVM inline-asm register constraint of each PTX register width / float kind
_CONSTRAINT = {16: "h", 32: "r", 64: "l", "f16": "h", "bf16": "h", "f32": "f", "f64": "d"}
_ONE_BITS = {"f16": 0x3C00, "bf16": 0x3F80}        # 1.0 as an f16 / bf16 bit pattern


def _kind(ty):
    """'bool', 'int', or the float kind ('f16', 'bf16', 'f32', 'f64') of a Numba type."""
    ty = types.unliteral(ty)
    if isinstance(ty, types.Boolean):
        return "bool"
    if isinstance(ty, types.Integer):
        return "int"
    if ty in _FLOAT_KINDS:
        return _FLOAT_KINDS[ty]
    raise WSCompileError(f"astype on the GPU: no conversion for type {ty} (expected "
                         f"float16, bfloat16, float32, float64, an integer or bool)")


def _cvt(builder, text, ret, ret_kind, value, arg_kind):
    """One pure ``text`` instruction ``$0 <- $1`` (LLVM may CSE or drop it)."""
    return asm(builder, text, f"={_CONSTRAINT[ret_kind]},{_CONSTRAINT[arg_kind]}",
               [value], ret=ret, side_effect=False)


def _int_operand(builder, value, ty):
    """An integer as a 32- or 64-bit PTX operand: (value, bits, 's' or 'u'); narrower
    ints are sign/zero-extended to 32 bits (exact)."""
    ty = types.unliteral(ty)
    sign = "s" if ty.signed else "u"
    if ty.bitwidth < 32:
        ext = builder.sext if ty.signed else builder.zext
        return ext(value, I32), 32, sign
    return value, ty.bitwidth, sign


def _sm90(cc):
    return cc is not None and tuple(cc[:2]) >= (9, 0)


# --- floats ------------------------------------------------------------------------------

def _bf16_to_f32(builder, bits):
    """Exact: a bf16 is the upper half of the f32 with the same value."""
    wide = builder.shl(builder.zext(bits, I32), ir.Constant(I32, 16))
    return builder.bitcast(wide, F32)


def _f32_to_bf16(builder, value):
    return _cvt(builder, "cvt.rn.bf16.f32 $0, $1;", I16, "bf16", value, "f32")


def _to_f32_exact(builder, value, kind):
    """An f16 / bf16 / f32 value as f32 (exact)."""
    if kind == "f16":
        return _cvt(builder, "cvt.f32.f16 $0, $1;", F32, "f32", value, "f16")
    if kind == "bf16":
        return _bf16_to_f32(builder, value)
    return value


def _round_to_odd(builder, truncated, inexact):
    """``truncated`` (an f32 rounded toward zero) with its lowest mantissa bit set when
    the rounding was inexact: round-to-odd, which a later rounding to <= 22 bits of
    precision turns into the correctly rounded result. Inf and NaN stay as they are
    (an inexact +-FLT_MAX is odd already and rounds to +-inf in bf16, as it must)."""
    bits = builder.or_(builder.bitcast(truncated, I32), builder.zext(inexact, I32))
    return builder.bitcast(bits, F32)


def _f64_to_bf16(builder, value, cc):
    if _sm90(cc):
        return _cvt(builder, "cvt.rn.bf16.f64 $0, $1;", I16, "bf16", value, "f64")
    truncated = _cvt(builder, "cvt.rz.f32.f64 $0, $1;", F32, "f32", value, "f64")
    inexact = builder.fcmp_unordered("!=", builder.fpext(truncated, F64), value)
    return _f32_to_bf16(builder, _round_to_odd(builder, truncated, inexact))


def _float_to_float(builder, value, src, dst, cc):
    if src == dst:
        return value
    if dst == "bf16":
        if src == "f64":
            return _f64_to_bf16(builder, value, cc)
        return _f32_to_bf16(builder, _to_f32_exact(builder, value, src))
    if dst == "f16":
        if src == "f64":
            return _cvt(builder, "cvt.rn.f16.f64 $0, $1;", I16, "f16", value, "f64")
        value = _to_f32_exact(builder, value, src)
        return _cvt(builder, "cvt.rn.f16.f32 $0, $1;", I16, "f16", value, "f32")
    if src == "f16" and dst == "f64":
        return _cvt(builder, "cvt.f64.f16 $0, $1;", F64, "f64", value, "f16")
    value = _to_f32_exact(builder, value, src)          # now an f32 or an f64
    if dst == "f64" and value.type == F32:
        return builder.fpext(value, F64)
    if dst == "f32" and value.type == F64:
        return builder.fptrunc(value, F32)
    return value


# --- integers ----------------------------------------------------------------------------

def _int_to_float(builder, value, ty, dst, cc):
    ty = types.unliteral(ty)
    if dst in ("f32", "f64"):
        llty = F32 if dst == "f32" else F64
        return builder.sitofp(value, llty) if ty.signed else builder.uitofp(value, llty)
    value, bits, sign = _int_operand(builder, value, ty)
    src = f"{sign}{bits}"
    if dst == "f16":
        return _cvt(builder, f"cvt.rn.f16.{src} $0, $1;", I16, "f16", value, bits)
    if _sm90(cc):
        return _cvt(builder, f"cvt.rn.bf16.{src} $0, $1;", I16, "bf16", value, bits)
    truncated = _cvt(builder, f"cvt.rz.f32.{src} $0, $1;", F32, "f32", value, bits)
    # |truncated| <= |value| and it is an integer: the conversion back is exact
    back = _cvt(builder, f"cvt.rzi.{src}.f32 $0, $1;", value.type, bits, truncated, "f32")
    inexact = builder.icmp_unsigned("!=", back, value)
    return _f32_to_bf16(builder, _round_to_odd(builder, truncated, inexact))


def _float_to_int(builder, value, src, ty):
    """Truncation toward zero, saturating; NaN gives 0 (see the module docstring)."""
    ty = types.unliteral(ty)
    value = _to_f32_exact(builder, value, src)
    src = "f64" if value.type == F64 else "f32"
    bits = max(ty.bitwidth, 32)                  # narrower results in a 32-bit register
    sign = "s" if ty.signed else "u"
    reg = ir.IntType(bits)
    out = _cvt(builder, f"cvt.rzi.{sign}{ty.bitwidth}.{src} $0, $1;", reg, bits, value, src)
    if src == "f64" or bits == 64:               # cvt gives 1 << (bits - 1) for NaN here
        is_nan = builder.fcmp_unordered("uno", value, value)
        out = builder.select(is_nan, ir.Constant(reg, 0), out)
    if ty.bitwidth < bits:
        out = builder.trunc(out, ir.IntType(ty.bitwidth))
    return out


def _int_to_int(builder, value, src_ty, dst_ty):
    src_ty, dst_ty = types.unliteral(src_ty), types.unliteral(dst_ty)
    if dst_ty.bitwidth < src_ty.bitwidth:
        return builder.trunc(value, ir.IntType(dst_ty.bitwidth))
    if dst_ty.bitwidth > src_ty.bitwidth:
        ext = builder.sext if src_ty.signed else builder.zext
        return ext(value, ir.IntType(dst_ty.bitwidth))
    return value


# --- booleans ----------------------------------------------------------------------------

def _from_bool(context, builder, value, dst, to_type):
    if dst in _ONE_BITS:
        return builder.select(value, ir.Constant(I16, _ONE_BITS[dst]), ir.Constant(I16, 0))
    llty = context.get_value_type(to_type)
    if dst == "int":
        return builder.zext(value, llty)
    return builder.uitofp(value, llty)


def _to_bool(builder, value, src):
    if src in ("f16", "bf16"):                   # nonzero apart from the sign bit
        magnitude = builder.and_(value, ir.Constant(I16, 0x7FFF))
        return builder.icmp_unsigned("!=", magnitude, ir.Constant(I16, 0))
    if src in ("f32", "f64"):
        return builder.fcmp_unordered("!=", value, ir.Constant(value.type, 0.0))
    return builder.icmp_unsigned("!=", value, ir.Constant(value.type, 0))


# --- the entry points --------------------------------------------------------------------

def cast(context, builder, value, from_type, to_type, cc=None):
    """``value`` (an LLVM value of Numba type ``from_type``) converted to ``to_type``,
    as NumPy's ``astype`` (module docstring). ``cc``: the target compute capability;
    ``None`` or below (9, 0) emits what assembles on sm_80 (and runs identically on
    sm_90); ``(9, 0)`` and up uses the sm_90 ``cvt.rn.bf16.{f64,int}`` forms."""
    src, dst = _kind(from_type), _kind(to_type)
    if types.unliteral(from_type) == types.unliteral(to_type):
        return value
    if src == "bool":
        return value if dst == "bool" else _from_bool(context, builder, value, dst, to_type)
    if dst == "bool":
        return _to_bool(builder, value, src)
    if src == "int" and dst == "int":
        return _int_to_int(builder, value, from_type, to_type)
    if src == "int":
        return _int_to_float(builder, value, from_type, dst, cc)
    if dst == "int":
        return _float_to_int(builder, value, src, to_type)
    return _float_to_float(builder, value, src, dst, cc)


def cast_pair(context, builder, lo, hi, from_type, to_type, cc=None):
    """Two values converted to ``to_type`` (float16 or bfloat16) and packed into one i32:
    ``lo`` in bits 0-15, ``hi`` in bits 16-31 -- in memory (little-endian) ``lo`` at the
    lower address, i.e. element 0 of a 2-vector bitcast to i32.

    From float32 this is one ``cvt.rn.{f16x2,bf16x2}.f32 d, hi, lo`` (sm_80, PTX 7.0): the
    PTX ISA puts the *first* source operand in the *upper* half of ``d``, so ``hi`` comes
    first. From any other type each value goes through :func:`cast` and the halves are
    packed with ``zext`` / ``shl`` / ``or``. Each half equals ``cast`` of its value."""
    dst = _kind(to_type)
    if dst not in ("f16", "bf16"):
        raise WSCompileError(f"cast_pair: packs float16 or bfloat16, not {to_type}")
    if _kind(from_type) == "f32":
        return asm(builder, f"cvt.rn.{dst}x2.f32 $0, $1, $2;", "=r,f,f", [hi, lo], ret=I32,
                   side_effect=False)
    lo16, hi16 = (builder.zext(cast(context, builder, v, from_type, to_type, cc), I32)
                  for v in (lo, hi))
    return builder.or_(lo16, builder.shl(hi16, ir.Constant(I32, 16)))


# --- the host-side statement of the GPU's results -----------------------------------------

def reference(x, to_dtype):
    """What :func:`cast` gives on the GPU for the elements of ``x`` (a NumPy array of
    float16 / ml_dtypes.bfloat16 / float32 / float64 / an integer / bool dtype): NumPy's
    ``astype``, except that

    - to bfloat16 it is :func:`numba_ws.interpreter.casts.to_bfloat16`, ONE rounding to
      nearest even of the exact value (the GPU's ``cvt.rn.bf16.*`` and the sm_80 round to
      odd). ml_dtypes' ``astype`` from float64 and from integers may round to float32
      first (it did on the H200): int32 2**27 + 2**19 + 1 gave 0x4d00 there, 0x4d01 here;
    - float -> int of NaN gives 0, of +inf or values above the integer range its maximum,
      of -inf or values below its minimum (NumPy leaves these implementation-defined).

    NaN results are only *a* NaN: compare them with ``isnan``, not bit for bit."""
    from ..interpreter.casts import _BF16, to_bfloat16    # ml_dtypes: not on the compile path
    x = np.asarray(x)
    to = np.dtype(to_dtype)
    floats = (np.dtype(np.float16), _BF16, np.dtype(np.float32), np.dtype(np.float64))
    with np.errstate(all="ignore"):
        out = to_bfloat16(x) if to == _BF16 else x.astype(to)
        if x.dtype in floats and to.kind in "iu":
            wide = x.astype(np.float64)                  # exact for every float source
            info = np.iinfo(to)
            out = np.where(wide >= float(info.max), info.max, out)
            out = np.where(wide <= float(info.min), info.min, out)
            out = np.where(np.isnan(wide), 0, out).astype(to)
    return out
