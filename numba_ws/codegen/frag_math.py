"""GPU forms of the element-wise tile math on register tiles: exp/exp2/log/neg, maximum,
and broadcasting between tiles of different shapes.

Element-wise ops work register by register, in any layout (codegen/layouts.py): both
operands come in the result's layout, or one is a *vector* -- a (R, 1), (1, C) or (C,)
tile -- in the result's slice along the stretched axis, and then the broadcast is the
compile-time register selection ``layouts.broadcast_index`` (no data movement). The
layouts pass (passes/layouts.py) arranges that; reductions, conversions and stores are in
codegen/regtile.py.

Accuracy (fp32, ``.ftz``: subnormal inputs and results flush to sign-preserving zero).
These are the constructions of CUDA's fast intrinsics, whose bounds the CUDA C++
Programming Guide (intrinsic-functions accuracy table) states:

- ``exp2(x)``: one ``ex2.approx.ftz.f32`` (MUFU.EX2), as ``exp2f`` under fast math:
  maximum error 2 ulp over the full range.
- ``exp(x)``: ``ex2.approx.ftz.f32(x * log2(e))``, as ``__expf``: maximum error
  ``2 + floor(|1.173 x|)`` ulp. The growth with |x| is the fp32 rounding of x*log2(e)
  (relative 2^-24 of the exponent). For softmax (x <= 0 after the running-max
  subtraction) that is ~1.2e-6 relative at x = -20, where exp(x) ~ 2e-9 no longer moves
  a row sum of >= 1: three orders of magnitude below the fp16 rounding (2^-11) of p.
- ``log(x)``: ``lg2.approx.ftz.f32(x) * ln(2)``, as ``__logf``: maximum absolute error
  about 2^-21.4 for x in [0.5, 2], a few ulp elsewhere.
- ``exp(-inf) = +0``, ``exp(+inf) = +inf``, ``log(0) = -inf``, NaN propagates.

fp16/bf16 fragments are widened to fp32 for these functions and rounded back (nearest
even). ``maximum`` is ``max.f32`` (``llvm.maxnum``: a NaN operand yields the other one,
where the interpreter's ``np.maximum`` propagates NaN: a known difference, kept because
changing it changes the GEMM / attention PTX). Comparisons, boolean ops and ``ws.where``
are in codegen/index_ops.py; the other math in codegen/math_ops.py.
"""
import math
import operator

from llvmlite import ir

from numba.cuda import types
from numba.cuda.core.errors import TypingError
from numba.cuda.core.imputils import lower_builtin
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature
from numba.cuda.typing.templates import AbstractTemplate, infer_global

from ..language.types import FragType
from . import layouts as lay
from . import tile_ops as to
from ._util import F32, asm, shfl_bfly
from .convert import cast

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


# --- broadcasting between register tiles --------------------------------------------

def is_float(dtype):
    """Whether ``dtype`` is a floating-point element type (numba-cuda's bfloat16 is a
    Number, not a types.Float)."""
    return isinstance(dtype, types.Float) or dtype == types.bfloat16


def _unify(da, db):
    """Result dtype of an element-wise op on two register tiles: the language's promotion
    (:func:`numba_ws.language.promotion.promote`: int32 with float32 is float32, fp16 with
    bf16 float32, int32 with int64 int64 ...); None for a dtype the language lacks."""
    if da == db:
        return da
    from ..language import dtypes, typing as tt
    na, nb = dtypes.from_numba(da), dtypes.from_numba(db)
    if na is None or nb is None:
        return None
    return dtypes.from_name(tt.promote(na.name, nb.name)).numba


def broadcast_type(a, b):
    """Result type of an element-wise op on register tiles ``a`` and ``b`` (or None).

    Equal shapes and layouts; or a tile and a vector (a (R, 1), (1, C) or (C,) tile) whose
    layout is the tile's slice along the stretched axis (``layouts.broadcast_index``), in
    either order: the vector is then a compile-time register selection. Dtypes unify as
    the language's typing does.
    """
    if not (isinstance(a, FragType) and isinstance(b, FragType)):
        return None
    dtype = _unify(a.dtype, b.dtype)
    if dtype is None:
        return None
    if a.layout == b.layout and a.shape == b.shape:
        return a if dtype == a.dtype else FragType(dtype, a.shape, a.layout)
    for wide, vec in ((a, b), (b, a)):
        if broadcast_axis(vec, wide) is not None:
            return wide if dtype == wide.dtype else FragType(dtype, wide.shape, wide.layout)
    return None


def broadcast_axis(vec, wide):
    """The axis along which register tile ``vec`` broadcasts onto ``wide`` by register
    selection ("both" for a (1, 1) tile), or None."""
    vs, ws_ = lay.shape2d(vec.shape), lay.shape2d(wide.shape)
    if vs == ws_:
        return None
    if vs == (1, 1):
        return "both"           # any (1, 1) layout: every thread holds the element
    axis = 1 if vs == (ws_[0], 1) else 0 if vs == (1, ws_[1]) else None
    if axis is None or lay.broadcast_index(vec.layout, wide.layout, axis) is None:
        return None
    return axis


def frag_values(context, builder, ty, val, resty):
    """``resty.count`` LLVM values of operand ``val`` (type ``ty``) lined up with the
    registers of ``resty``: a tile of the same layout as is, a vector broadcast by
    register selection, a scalar or a (1, 1) tile (``ws.max(x, keepdims=True)``) cast to
    ``resty.dtype`` and repeated."""
    n = resty.count
    if not isinstance(ty, FragType):
        return [cast(context, builder, val, ty, resty.dtype)] * n
    vals = [builder.extract_value(val, i) for i in range(ty.count)]
    axis = broadcast_axis(ty, resty)
    if axis == "both":
        vals = [vals[0]] * n
    elif axis is not None:
        index = lay.broadcast_index(ty.layout, resty.layout, axis)
        vals = [vals[j] for j in index]
    return [cast(context, builder, v, ty.dtype, resty.dtype) for v in vals]


def _pack(context, builder, fragty, values):
    return to._pack(context, builder, fragty, values)


def _maxnum_fn(builder, kind="f32", llty=F32):
    """``llvm.maxnum.{f32|f64}`` (``max.f32`` / ``max.f64``), declared with both operands."""
    name = f"llvm.maxnum.{kind}"
    fn = builder.module.globals.get(name)
    if fn is None:
        fn = ir.Function(builder.module, ir.FunctionType(llty, (llty, llty)), name)
    return fn


def _to_f32(context, builder, v, dtype):
    return v if dtype == types.float32 else cast(context, builder, v, dtype, types.float32)


def _from_f32(context, builder, v, dtype):
    return v if dtype == types.float32 else cast(context, builder, v, types.float32, dtype)


# --- element-wise functions -------------------------------------------------------------

def _approx(builder, instr, x):
    """One ``instr.approx.ftz.f32`` (pure asm: LLVM may CSE or drop it)."""
    return asm(builder, f"{instr}.approx.ftz.f32 $0, $1;", "=f,f", [x], ret=F32,
               side_effect=False)


def exp2_f32(builder, x):
    return _approx(builder, "ex2", x)


def exp_f32(builder, x):
    return exp2_f32(builder, builder.fmul(x, ir.Constant(F32, LOG2E)))


def log_f32(builder, x):
    return builder.fmul(_approx(builder, "lg2", x), ir.Constant(F32, LN2))


_UNARY = {"exp": exp_f32, "exp2": exp2_f32, "log": log_f32}
#: float64 tiles: Numba's libdevice lowerings of these (``__nv_exp`` ...), full precision.
_MATH64 = {"exp": math.exp, "exp2": math.exp2, "log": math.log}


def _unary_intrinsic(name, fn):
    def template(typingctx, frag):
        if not isinstance(frag, FragType) or not is_float(frag.dtype):
            raise TypingError(f"ws.{name} on the GPU needs a floating-point register tile, "
                              f"got {frag}")
        sig = signature(frag, frag)

        def codegen(context, builder, sig, args):
            vals = [builder.extract_value(args[0], i) for i in range(frag.count)]
            if frag.dtype == types.float64:      # libdevice, as numba's math.exp/log
                impl = context.get_function(_MATH64[name], signature(types.float64,
                                                                     types.float64))
                return _pack(context, builder, frag, [impl(builder, [v]) for v in vals])
            out = [_from_f32(context, builder, fn(builder, _to_f32(context, builder, v,
                                                                    frag.dtype)), frag.dtype)
                   for v in vals]
            return _pack(context, builder, frag, out)

        return sig, codegen

    template.__name__ = f"gpu_frag_{name}"
    template.__doc__ = (f"Element-wise ``ws.{name}`` of a register fragment (see the module "
                        "docstring for the PTX and its accuracy).")
    return intrinsic(template)


gpu_frag_exp = _unary_intrinsic("exp", exp_f32)
gpu_frag_exp2 = _unary_intrinsic("exp2", exp2_f32)
gpu_frag_log = _unary_intrinsic("log", log_f32)


@intrinsic
def gpu_frag_maximum(typingctx, a, b):
    """Element-wise maximum of two fragments (equal types, or a (rows, N) fragment and a
    (rows, 1) row vector) or of a fragment and a scalar. ``max.f32`` per register
    (``max.s`` / ``max.u`` for int tiles)."""
    if isinstance(a, FragType) and isinstance(b, FragType):
        resty = broadcast_type(a, b)
        if resty is None:
            raise TypingError(f"ws.maximum on the GPU: cannot combine {a} and {b} (needs equal "
                              "tiles or a (rows, N) tile with a (rows, 1) row vector of the "
                              "same dtype)")
    elif isinstance(a, FragType) and isinstance(b, types.Number):
        resty = a
    elif isinstance(b, FragType) and isinstance(a, types.Number):
        resty = b
    else:
        raise TypingError(f"ws.maximum on the GPU needs a register tile, got {a}, {b}")
    from ..language import typing as tt
    dtype = tt.from_name(tt.binary_result("maximum", tt.operand_kind(a),
                                          tt.operand_kind(b))).numba
    if dtype != resty.dtype:              # an int tile with a float scalar: float32
        resty = FragType(dtype, resty.shape, resty.layout)
    sig = signature(resty, a, b)

    def codegen(context, builder, sig, args):
        xs = frag_values(context, builder, sig.args[0], args[0], resty)
        ys = frag_values(context, builder, sig.args[1], args[1], resty)
        if not is_float(resty.dtype):     # ints (issue 15): a compare and a select
            from .math_ops import min_value
            return _pack(context, builder, resty, [
                min_value(context, builder, x, y, resty.dtype, "max") for x, y in zip(xs, ys)])
        if resty.dtype == types.float64:
            fn = _maxnum_fn(builder, "f64", ir.DoubleType())
            out = [builder.call(fn, [x, y]) for x, y in zip(xs, ys)]
            return _pack(context, builder, resty, out)
        fn = _maxnum_fn(builder)   # fp16/bf16: exact through fp32
        out = [_from_f32(context, builder, builder.call(fn, [
            _to_f32(context, builder, x, resty.dtype), _to_f32(context, builder, y, resty.dtype)]),
            resty.dtype) for x, y in zip(xs, ys)]
        return _pack(context, builder, resty, out)

    return sig, codegen


# --- unary minus (the Python operator on fragments) --------------------------------------

@infer_global(operator.neg)
class _FragNeg(AbstractTemplate):
    def generic(self, args, kws):
        if len(args) == 1 and isinstance(args[0], FragType):
            return signature(args[0], args[0])
        return None


@lower_builtin(operator.neg, FragType)
def _frag_neg(context, builder, sig, args):
    fragty = sig.return_type
    vals = [builder.extract_value(args[0], i) for i in range(fragty.count)]
    if fragty.dtype in (types.float16, types.bfloat16):   # i16 bit patterns: flip the sign
        sign = ir.Constant(vals[0].type, 0x8000)
        return _pack(context, builder, fragty, [builder.xor(v, sign) for v in vals])
    if isinstance(fragty.dtype, types.Float):
        # -0.0 - x: exact negation (NVVM's IR predates the fneg instruction)
        zero = ir.Constant(vals[0].type, -0.0)
        return _pack(context, builder, fragty, [builder.fsub(zero, v) for v in vals])
    return _pack(context, builder, fragty, [builder.neg(v) for v in vals])


# --- constants ------------------------------------------------------------------------

__all__ = ["gpu_frag_exp", "gpu_frag_exp2", "gpu_frag_log", "gpu_frag_maximum", "frag_values",
           "broadcast_type", "broadcast_axis"]
