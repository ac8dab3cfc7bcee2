"""GPU forms of the issue-15 math on register tiles: sqrt, rsqrt, abs, sigmoid, tanh,
gelu, minimum, fma, the integer operators ``// % << >>`` (and float ``//`` / ``%``), and
the dtype promotion every element-wise op on register tiles follows.

Register by register in any layout (:mod:`numba_ws.codegen.layouts`), constant indices,
no local memory; operands come in the result's layout or as vectors in its slice
(:func:`numba_ws.codegen.frag_math.frag_values`). fp16 / bf16 values (i16 bit patterns)
are widened to fp32 exactly, computed in fp32 and rounded once to their dtype, except
``fma`` (native ``fma.rn.f16`` / ``.bf16``: one rounding of the exact value). Any sm from
sm_80 (``min.NaN.f32``, ``fma.rn.bf16``: sm_80; ``tanh.approx.f32``: sm_75).

Result dtypes: :func:`numba_ws.language.promotion.binary_result` (Triton's promotion:
int32 tile + float32 tile is float32, an int tile with a float scalar float32, int / int
float32, a float tile with a scalar keeps its dtype), the rule the typing and the
interpreter use too.

Accuracy of fp32 (the interpreter computes in float64 and rounds once: the reference):

- ``sqrt``: ``sqrt.rn.f32`` / ``sqrt.rn.f64``, correctly rounded (fp16 / bf16 through
  fp32 are correctly rounded as well: 24 >= 2 * 11 + 2 bits). Bit-exact with NumPy.
- ``rsqrt``: ``rsqrt.approx.f32`` (no ``.ftz``: subnormal inputs are honoured), relative
  error below 2**-22.9 (PTX ISA); float64: ``1 / sqrt.rn.f64`` (two correct roundings,
  within 1.5 ulp; libdevice's ``__nv_rsqrt`` is a bare ``rsqrt.approx.f64``).
  ``rsqrt(0) = +inf``, ``rsqrt(-0) = -inf``, ``rsqrt(x < 0) = NaN``.
- ``sigmoid``: ``rcp.approx.ftz.f32(1 + ex2.approx.ftz.f32(-x * log2(e)))``: the error
  of ``__expf`` (2 + floor(|1.173 x|) ulp) plus 1 ulp; results below 2**-126 (x < -87.3)
  flush to +0; ``sigmoid(-inf) = 0``, ``sigmoid(+inf) = 1``. float64: libdevice
  ``exp`` and an IEEE division.
- ``tanh``: ``tanh.approx.f32`` (MUFU.TANH, sm_75+): about 16.5 correct bits, a
  maximum relative error of about 1.1e-5 (2**-16.4); ``tanh(±inf) = ±1``. float64:
  libdevice ``__nv_tanh``.
- ``gelu``: ``0.5 * x * (1 + erf(x * 2**-0.5))`` with libdevice ``__nv_erff`` (2 ulp,
  CUDA's ``erff``) / ``__nv_erf``; a few ulp in all (the products round; near the
  negative tail, where ``1 + erf`` cancels, the relative error grows as in any
  evaluation of this formula). ``gelu(+inf) = inf``; ``gelu(-inf)`` is
  ``-inf * 0 = NaN``, as the formula gives in NumPy too.
- ``abs``: clears the sign bit (exact, NaN stays NaN); ints ``|x|`` (``abs`` of the most
  negative value is itself, as NumPy).
- ``minimum``: ``min.NaN.f32`` (a NaN operand gives NaN, as ``np.minimum``); float64:
  ``min.f64`` with a NaN select; ints ``min.s`` / ``min.u`` (a select). ``maximum`` keeps
  ``max.f32`` (``llvm.maxnum``: a NaN operand yields the other one; frag_math).
- ``fma``: ``fma.rn.{f16,bf16,f32,f64}``, one rounding (bit-exact with the
  interpreter's exact fma).

Integer operators (any int width, signed or unsigned as the dtype says), exact and
equal to NumPy's results:

- ``a // b`` floors and ``a % b`` takes the divisor's sign (``-7 // 2 = -4``,
  ``-7 % 2 = 1``): ``div.s`` / ``rem.s`` truncate, then one correction where the
  remainder is nonzero and its sign differs from ``b``'s. Division by zero gives 0 for
  both (NumPy's result; PTX leaves ``div`` by zero unspecified, so the divisor is
  replaced by 1 and the result selected); ``INT_MIN // -1`` wraps to ``INT_MIN`` (and
  ``% -1`` is 0), as NumPy.
- ``a << b``, ``a >> b`` (arithmetic for signed types): a shift count outside
  ``[0, bits)`` (negative counts included, compared unsigned) gives 0 for ``<<`` and
  ``>>`` of unsigned values, the sign fill (0 or -1) for ``>>`` of signed ones -- NumPy's
  results (LLVM leaves such shifts undefined, so the count is clamped first).
- float ``//`` and ``%``: NumPy's ``npy_divmod`` (libdevice ``fmodf`` / ``fmod``, which
  is exact, then the same sign fix-up and snapping of the quotient); ``x // 0`` is
  ``x / 0`` (±inf, NaN for 0 / 0), ``x % 0`` NaN.
"""
import math

from llvmlite import ir

from numba.cuda import types
from numba.cuda.core.errors import TypingError
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ..language import typing as tt
from ..language.types import FragType
from ._util import F32, asm
from .convert import cast

F64 = ir.DoubleType()
LOG2E = 1.4426950408889634
SQRT1_2 = 0.7071067811865476
_NARROW = (types.float16, types.bfloat16)


def is_float(dtype):
    return isinstance(dtype, types.Float) or dtype == types.bfloat16


def _pure(builder, text, constraints, args, ret):
    """One side-effect-free instruction (LLVM may CSE or drop it)."""
    return asm(builder, text, constraints, list(args), ret=ret, side_effect=False)


def _libm(context, builder, fn, dtype, *args):
    """``fn`` (a ``math`` function or a ``numba.cuda.libdevice`` one) of ``args`` of the
    float ``dtype`` through Numba's CUDA lowering (libdevice, as numba's math calls)."""
    impl = context.get_function(fn, signature(dtype, *([dtype] * len(args))))
    return impl(builder, list(args))


def _const(dtype, value):
    return ir.Constant(F64 if dtype == types.float64 else F32, value)


# --- unary functions: fp32 and fp64 forms ------------------------------------------------

def _sqrt(context, builder, x, dtype):
    if dtype == types.float64:
        return _pure(builder, "sqrt.rn.f64 $0, $1;", "=d,d", [x], F64)
    return _pure(builder, "sqrt.rn.f32 $0, $1;", "=f,f", [x], F32)


def _rsqrt(context, builder, x, dtype):
    if dtype == types.float64:      # libdevice's __nv_rsqrt is one rsqrt.approx.f64
        return builder.fdiv(_const(dtype, 1.0), _sqrt(context, builder, x, dtype))
    return _pure(builder, "rsqrt.approx.f32 $0, $1;", "=f,f", [x], F32)


def _tanh(context, builder, x, dtype):
    if dtype == types.float64:
        return _libm(context, builder, math.tanh, dtype, x)
    return _pure(builder, "tanh.approx.f32 $0, $1;", "=f,f", [x], F32)


def _sigmoid(context, builder, x, dtype):
    one = _const(dtype, 1.0)
    if dtype == types.float64:
        e = _libm(context, builder, math.exp, dtype, builder.fsub(_const(dtype, -0.0), x))
        return builder.fdiv(one, builder.fadd(one, e))
    e = _pure(builder, "ex2.approx.ftz.f32 $0, $1;", "=f,f",
              [builder.fmul(x, ir.Constant(F32, -LOG2E))], F32)
    return _pure(builder, "rcp.approx.ftz.f32 $0, $1;", "=f,f", [builder.fadd(one, e)], F32)


def _gelu(context, builder, x, dtype):
    erf = _libm(context, builder, math.erf, dtype, builder.fmul(x, _const(dtype, SQRT1_2)))
    half_x = builder.fmul(x, _const(dtype, 0.5))
    return builder.fmul(half_x, builder.fadd(_const(dtype, 1.0), erf))


UNARY = {"sqrt": _sqrt, "rsqrt": _rsqrt, "tanh": _tanh, "sigmoid": _sigmoid, "gelu": _gelu}


def unary_value(context, builder, name, x, dtype):
    """``ws.{name}`` of one value of float ``dtype`` (fp16 / bf16 through fp32)."""
    fn = UNARY[name]
    if dtype in _NARROW:
        wide = cast(context, builder, x, dtype, types.float32)
        return cast(context, builder, fn(context, builder, wide, types.float32),
                    types.float32, dtype)
    return fn(context, builder, x, dtype)


def abs_value(builder, x, dtype):
    """|x|: the sign bit cleared for floats (exact), a select for signed ints."""
    if isinstance(dtype, types.Integer):
        if not dtype.signed:
            return x
        zero = ir.Constant(x.type, 0)
        return builder.select(builder.icmp_signed("<", x, zero), builder.sub(zero, x), x)
    bits = {types.float64: 64, types.float32: 32}.get(dtype, 16)
    ity = ir.IntType(bits)
    raw = x if isinstance(x.type, ir.IntType) else builder.bitcast(x, ity)
    cleared = builder.and_(raw, ir.Constant(ity, (1 << (bits - 1)) - 1))
    return cleared if isinstance(x.type, ir.IntType) else builder.bitcast(cleared, x.type)


def _unary_intrinsic(name):
    def template(typingctx, frag):
        if not isinstance(frag, FragType) or not is_float(frag.dtype):
            raise TypingError(f"ws.{name} on the GPU needs a floating-point register tile, "
                              f"got {frag}")

        def codegen(context, builder, sig, args):
            vals = [builder.extract_value(args[0], i) for i in range(frag.count)]
            return _pack(context, builder, frag,
                         [unary_value(context, builder, name, v, frag.dtype) for v in vals])

        return signature(frag, frag), codegen

    template.__name__ = f"gpu_frag_{name}"
    template.__doc__ = (f"Element-wise ``ws.{name}`` of a float register tile (the module "
                        "docstring gives its PTX and accuracy).")
    return intrinsic(template)


gpu_frag_sqrt = _unary_intrinsic("sqrt")
gpu_frag_rsqrt = _unary_intrinsic("rsqrt")
gpu_frag_sigmoid = _unary_intrinsic("sigmoid")
gpu_frag_tanh = _unary_intrinsic("tanh")
gpu_frag_gelu = _unary_intrinsic("gelu")


@intrinsic
def gpu_frag_abs(typingctx, frag):
    """Element-wise ``ws.abs`` of a float or int register tile (exact)."""
    if not isinstance(frag, FragType) or not (is_float(frag.dtype)
                                              or isinstance(frag.dtype, types.Integer)):
        raise TypingError(f"ws.abs on the GPU needs a register tile of numbers, got {frag}")

    def codegen(context, builder, sig, args):
        vals = [builder.extract_value(args[0], i) for i in range(frag.count)]
        return _pack(context, builder, frag, [abs_value(builder, v, frag.dtype) for v in vals])

    return signature(frag, frag), codegen


def _pack(context, builder, ty, values):
    out = ir.Constant(context.get_value_type(ty), ir.Undefined)
    for i, v in enumerate(values):
        out = builder.insert_value(out, v, i)
    return out


# --- minimum / maximum ---------------------------------------------------------------------

def min_value(context, builder, x, y, dtype, which="min"):
    """``which`` ('min' or 'max') of two values of ``dtype`` with NumPy's NaN rule (a NaN
    operand gives NaN): ``{min,max}.NaN.f32`` (sm_80; fp16 / bf16 exact through fp32),
    ``{min,max}.f64`` plus a select of ``x + y`` where either is NaN; ints a compare and
    a select, signed or unsigned by the dtype."""
    if isinstance(dtype, (types.Integer, types.Boolean)):
        signed = isinstance(dtype, types.Integer) and dtype.signed
        cmp = builder.icmp_signed if signed else builder.icmp_unsigned
        return builder.select(cmp("<" if which == "min" else ">", x, y), x, y)
    if dtype == types.float64:
        m = _pure(builder, f"{which}.f64 $0, $1, $2;", "=d,d,d", [x, y], F64)
        return builder.select(builder.fcmp_unordered("uno", x, y), builder.fadd(x, y), m)
    if dtype in _NARROW:
        wide = [cast(context, builder, v, dtype, types.float32) for v in (x, y)]
        return cast(context, builder, min_value(context, builder, *wide, types.float32, which),
                    types.float32, dtype)
    return _pure(builder, f"{which}.NaN.f32 $0, $1, $2;", "=f,f,f", [x, y], F32)


def _operands_type(name, operands):
    """FragType of an element-wise op on register tiles / scalars ``operands``: dtype
    by the language's promotion, shape and layout of the widest tile (the others equal
    or vectors in its slice)."""
    from .frag_math import broadcast_axis
    kinds = [tt.operand_kind(t) for t in operands]
    if None in kinds or not any(isinstance(t, FragType) for t in operands):
        raise TypingError(f"ws.{name} on the GPU needs register tiles or scalars, got "
                          f"{list(operands)}")
    dtype = kinds[0]
    for k in kinds[1:]:
        dtype = tt.promote(dtype, k) if not (isinstance(dtype, tuple) and
                                             isinstance(k, tuple)) else dtype
    frags = [t for t in operands if isinstance(t, FragType)]
    wide = max(frags, key=lambda t: t.layout.shape[0] * t.layout.shape[1])
    for t in frags:
        if t.layout != wide.layout and broadcast_axis(t, wide) is None:
            raise TypingError(f"ws.{name} on the GPU: {t} and {wide} do not share a layout "
                              "(a layouts pass bug)")
    return FragType(tt.from_name(dtype).numba, wide.shape, wide.layout)


@intrinsic
def gpu_frag_minimum(typingctx, a, b):
    """Element-wise ``ws.minimum`` of register tiles / a tile and a scalar (broadcast by
    register selection); NaN-propagating (:func:`min_value`)."""
    resty = _operands_type("minimum", (a, b))

    def codegen(context, builder, sig, args):
        from .frag_math import frag_values
        xs, ys = (frag_values(context, builder, t, v, resty) for t, v in zip(sig.args, args))
        return _pack(context, builder, resty,
                     [min_value(context, builder, x, y, resty.dtype) for x, y in zip(xs, ys)])

    return signature(resty, a, b), codegen


_FMA = {types.float16: ("f16", "h"), types.bfloat16: ("bf16", "h"),
        types.float32: ("f32", "f"), types.float64: ("f64", "d")}


@intrinsic
def gpu_frag_fma(typingctx, a, b, c):
    """Element-wise ``ws.fma(a, b, c)``: ``fma.rn.{f16,bf16,f32,f64}`` per register (one
    rounding; bf16 needs sm_80), operands converted to the promoted float dtype first
    (scalars exactly or rounded once)."""
    resty = _operands_type("fma", (a, b, c))
    if resty.dtype not in _FMA:
        raise TypingError(f"ws.fma on the GPU needs float operands, got {a}, {b}, {c}")
    suffix, con = _FMA[resty.dtype]

    def codegen(context, builder, sig, args):
        from .frag_math import frag_values
        cols = [frag_values(context, builder, t, v, resty) for t, v in zip(sig.args, args)]
        lty = cols[0][0].type
        out = [_pure(builder, f"fma.rn.{suffix} $0, $1, $2, $3;", ",".join([f"={con}"]
                                                                           + [con] * 3),
                     list(vals), lty) for vals in zip(*cols)]
        return _pack(context, builder, resty, out)

    return signature(resty, a, b, c), codegen


# --- integer operators and float // % ------------------------------------------------------

#: the ``elementwise`` instructions of tile_ops this module computes
BINARY = ("floordiv", "mod", "lshift", "rshift")


def binary_value(context, builder, op, x, y, dtype):
    """``x op y`` for two values of the result ``dtype`` (module docstring)."""
    if op in ("lshift", "rshift"):
        return _shift(builder, op, x, y, dtype)
    if isinstance(dtype, types.Integer):
        return _int_divmod(builder, x, y, dtype)[0 if op == "floordiv" else 1]
    if dtype in _NARROW:
        wide = [cast(context, builder, v, dtype, types.float32) for v in (x, y)]
        out = binary_value(context, builder, op, *wide, types.float32)
        return cast(context, builder, out, types.float32, dtype)
    return _float_divmod(context, builder, x, y, dtype)[0 if op == "floordiv" else 1]


def _shift(builder, op, x, y, dtype):
    if not isinstance(dtype, types.Integer):
        raise TypingError(f"{'<<' if op == 'lshift' else '>>'} needs integer tiles, got "
                          f"{dtype}")
    bits = x.type.width
    width = ir.Constant(x.type, bits)
    out_of_range = builder.icmp_unsigned(">=", y, width)
    if op == "lshift":
        return builder.select(out_of_range, ir.Constant(x.type, 0), builder.shl(x, y))
    if dtype.signed:
        return builder.ashr(x, builder.select(out_of_range, ir.Constant(x.type, bits - 1), y))
    return builder.select(out_of_range, ir.Constant(x.type, 0), builder.lshr(x, y))


def _int_divmod(builder, a, b, dtype):
    """(a // b, a % b) with floor semantics; 0 for b == 0; INT_MIN // -1 = INT_MIN."""
    ty = a.type
    zero, one = ir.Constant(ty, 0), ir.Constant(ty, 1)
    by_zero = builder.icmp_signed("==", b, zero)
    if not dtype.signed:
        safe = builder.select(by_zero, one, b)
        q, r = builder.udiv(a, safe), builder.urem(a, safe)
        return builder.select(by_zero, zero, q), builder.select(by_zero, zero, r)
    minus_one = builder.icmp_signed("==", b, ir.Constant(ty, -1))
    safe = builder.select(builder.or_(by_zero, minus_one), one, b)
    q, r = builder.sdiv(a, safe), builder.srem(a, safe)   # r == 0 when safe is 1
    fix = builder.and_(builder.icmp_signed("!=", r, zero),
                       builder.icmp_signed("<", builder.xor(r, b), zero))
    q = builder.select(fix, builder.sub(q, one), q)
    r = builder.select(fix, builder.add(r, b), r)
    q = builder.select(minus_one, builder.sub(zero, a), q)  # wraps: INT_MIN stays
    return builder.select(by_zero, zero, q), r


def _copysign(builder, magnitude, sign, dtype):
    bits = 64 if dtype == types.float64 else 32
    ity = ir.IntType(bits)
    top = ir.Constant(ity, 1 << (bits - 1))
    m = builder.and_(builder.bitcast(magnitude, ity), ir.Constant(ity, (1 << (bits - 1)) - 1))
    s = builder.and_(builder.bitcast(sign, ity), top)
    return builder.bitcast(builder.or_(m, s), magnitude.type)


def _float_divmod(context, builder, a, b, dtype):
    """(a // b, a % b) of fp32 / fp64 values: NumPy's ``npy_divmod``."""
    zero, one, half = (_const(dtype, v) for v in (0.0, 1.0, 0.5))
    mod = _libm(context, builder, math.fmod, dtype, a, b)
    quotient = builder.fdiv(a, b)
    div = builder.fdiv(builder.fsub(a, mod), b)
    nonzero_mod = builder.fcmp_unordered("!=", mod, zero)
    signs_differ = builder.xor(builder.fcmp_ordered("<", b, zero),
                               builder.fcmp_ordered("<", mod, zero))
    fix = builder.and_(nonzero_mod, signs_differ)
    mod = builder.select(fix, builder.fadd(mod, b), mod)
    div = builder.select(fix, builder.fsub(div, one), div)
    mod = builder.select(nonzero_mod, mod, _copysign(builder, zero, b, dtype))
    floor = _libm(context, builder, math.floor, dtype, div)
    floor = builder.select(builder.fcmp_ordered(">", builder.fsub(div, floor), half),
                           builder.fadd(floor, one), floor)
    floor = builder.select(builder.fcmp_unordered("!=", div, zero), floor,
                           _copysign(builder, zero, quotient, dtype))
    by_zero = builder.fcmp_ordered("==", b, zero)
    return builder.select(by_zero, quotient, floor), mod


__all__ = ["gpu_frag_sqrt", "gpu_frag_rsqrt", "gpu_frag_abs", "gpu_frag_sigmoid",
           "gpu_frag_tanh", "gpu_frag_gelu", "gpu_frag_minimum", "gpu_frag_fma",
           "binary_value", "min_value", "BINARY"]
