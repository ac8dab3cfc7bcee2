"""GPU forms of index tiles, views, comparisons, boolean tiles and ``where`` (issue 15
items 1-2), on register tiles in any layout (:mod:`numba_ws.codegen.layouts`).

Every op works register by register with compile-time indices, as
:mod:`numba_ws.codegen.frag_math` does: operands come in the result's layout, or are
vectors in its slice (broadcast by register selection, ``frag_math.frag_values``), or
scalars. Boolean tiles are Numba booleans, ``i1`` values in registers (``i8`` in arrays).
Any sm from sm_80 (only integer / float compares, selects and ``%tid.x``).

- ``ws.arange(start, end)``: register ``i`` holds ``start + layout.regs[i][1] +`` the
  thread's column offset (:func:`regtile.thread_offset`): one ``add`` per register on
  a per-op base. A free source for the layouts pass (like ``ws.zeros``), so it takes
  whatever layout its users need: the accumulator's row slice in a causal mask, a
  blocked one otherwise (power-of-two lengths only).
- ``x[:, None]`` / ``ws.expand_dims``: a (N,) tile in layout ``L`` (shape (1, N)) is the
  (N, 1) tile in ``layouts.transposed(L)`` -- the same registers; ``x[None, :]`` is
  ``L`` itself; ``ws.squeeze`` undoes it (and a (1,) tile gives its register 0: what a
  reduction without ``keepdims`` ends in). ``ws.broadcast_to``: the layouts pass expands the operand to the result
  first (a register selection when it is the result's slice); here only the type
  changes.
- Comparisons ``< <= == != > >=`` (:func:`numba_ws.language.typing.compare_dtype`
  chooses the type they are made in, NumPy's): ``setp``-style ``fcmp`` / ``icmp``. Float
  compares are ordered (False when either side is NaN) except ``!=`` (True with a NaN),
  as NumPy; fp16 / bf16 are widened to fp32 first (exact); ints compare signed or
  unsigned by their type, booleans unsigned.
- ``& | ^`` on boolean or integer tiles: ``and`` / ``or`` / ``xor`` of the ``i1`` / ``iN``
  registers (integers promote as :func:`numba_ws.language.typing.bitwise_dtype`); ``~``:
  ``xor`` with all ones (logical not of a boolean).
- ``ws.where(cond, a, b)``: one ``select`` (``selp``) per register; ``a`` / ``b`` are
  converted to the result's dtype first (``codegen.convert.cast``), so NaN, ±inf and
  signed zeros pass through unchanged.
"""
import operator

from llvmlite import ir

from numba.cuda import types
from numba.cuda.core.errors import TypingError
from numba.cuda.core.imputils import lower_builtin
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature
from numba.cuda.typing.templates import AbstractTemplate, infer_global

from ..language.types import FragType, LayoutType, TileType
from ..language import typing as tt
from . import layouts as lay
from .convert import cast
from .frag_math import broadcast_axis, frag_values
from .regtile import _elements, _pack, thread_ids, thread_offset
from ._util import I32


def _c32(v):
    return ir.Constant(I32, v)


def _stand_in(ty):
    """The abstract tile (or the scalar type) a register-tile operand stands for: the
    language's typing rules then decide dtypes on the GPU exactly as before lowering."""
    return TileType(ty.dtype, ty.shape) if isinstance(ty, FragType) else ty


def result_frag(operands, dtype, what):
    """FragType of ``dtype`` for an element-wise op on ``operands`` (register tiles and
    scalars): the shape and layout of the widest tile, every other tile equal to it or a
    vector in its slice (the layouts pass arranged that). A TypingError otherwise."""
    frags = [t for t in operands if isinstance(t, FragType)]
    if not frags:
        raise TypingError(f"{what} on the GPU needs a register tile operand, got {operands}")
    wide = max(frags, key=lambda t: lay.shape2d(t.shape)[0] * lay.shape2d(t.shape)[1])
    for t in frags:
        if t.layout != wide.layout and broadcast_axis(t, wide) is None:
            raise TypingError(f"{what} on the GPU: {t} and {wide} do not share a layout "
                              "(a layouts pass bug)")
    return FragType(dtype, wide.shape, wide.layout)


def operand_values(context, builder, ty, val, resty, dtype):
    """``resty.count`` values of operand ``val`` (type ``ty``) in ``resty``'s registers,
    converted to ``dtype``."""
    return frag_values(context, builder, ty, val, FragType(dtype, resty.shape, resty.layout))


# --- ws.arange, views --------------------------------------------------------------------

@intrinsic
def gpu_arange(typingctx, start, shape, layout):
    """``ws.arange(start, start + N)`` in ``layout`` (a (1, N) layout): register ``i`` of
    a thread holds ``start + regs[i][1] + column offset of the thread`` (int32)."""
    if not isinstance(start, types.IntegerLiteral) or not isinstance(layout, LayoutType):
        raise TypingError(f"gpu_arange(start, shape, layout): literal start and a layout, "
                          f"got {start}, {layout}")
    dims = tt.literal_shape(shape, "gpu_arange(shape)")
    ly = layout.layout
    if len(dims) != 1 or ly.shape != (1, dims[0]):
        raise TypingError(f"gpu_arange: layout {ly.name} does not fit a {dims} tile")
    resty = FragType(types.int32, dims, ly)
    sig = signature(resty, start, shape, layout)
    first = start.literal_value

    def codegen(context, builder, sig, args):
        _, lane, warp = thread_ids(builder)
        _, tc = thread_offset(builder, ly, lane, warp)
        base = builder.add(tc, _c32(first))
        return _pack(context, builder, resty,
                     [builder.add(base, _c32(c)) for _, c in ly.regs])

    return sig, codegen


@intrinsic
def gpu_expand_dims(typingctx, frag, axis):
    """``x[None, :]`` (axis 0: the same layout) or ``x[:, None]`` (axis 1 / -1: the
    transposed layout) of a 1-D register tile: the same registers, no instructions."""
    if not isinstance(frag, FragType) or len(frag.shape) != 1 \
            or not isinstance(axis, types.IntegerLiteral):
        raise TypingError(f"gpu_expand_dims needs a 1-D register tile and a literal axis, "
                          f"got {frag}, {axis}")
    n = frag.shape[0]
    if axis.literal_value == 0:
        resty = FragType(frag.dtype, (1, n), frag.layout)
    else:
        resty = FragType(frag.dtype, (n, 1), lay.transposed(frag.layout))
    return signature(resty, frag, axis), lambda context, builder, sig, args: args[0]


@intrinsic
def gpu_squeeze(typingctx, frag, axis):
    """``ws.squeeze`` (what a reduction without ``keepdims`` ends in): a (1, N) tile ->
    (N,) in the same layout (axis 0), a (M, 1) tile -> (M,) in the transposed layout
    (axis 1), the inverse of :func:`gpu_expand_dims`, no instructions; a (1,) tile -> its
    element, register 0 (every thread holds it: a reduction's result is replicated)."""
    if not isinstance(frag, FragType) or not isinstance(axis, types.IntegerLiteral) \
            or frag.shape[axis.literal_value] != 1:
        raise TypingError(f"gpu_squeeze needs a register tile with a size-1 axis and a "
                          f"literal axis, got {frag}, {axis}")
    if len(frag.shape) == 1:
        return signature(frag.dtype, frag, axis), \
            lambda context, builder, sig, args: builder.extract_value(args[0], 0)
    if axis.literal_value == 0:
        resty = FragType(frag.dtype, (frag.shape[1],), frag.layout)
    else:
        resty = FragType(frag.dtype, (frag.shape[0],), lay.transposed(frag.layout))
    return signature(resty, frag, axis), lambda context, builder, sig, args: args[0]


@intrinsic
def gpu_broadcast_to(typingctx, frag, shape):
    """``ws.broadcast_to`` of a register tile the layouts pass already expanded to the
    result's layout shape: the same registers under the result's shape."""
    dims = tt.literal_shape(shape, "gpu_broadcast_to(shape)")
    if not isinstance(frag, FragType) or frag.layout.shape != lay.shape2d(dims):
        raise TypingError(f"gpu_broadcast_to: {frag} is not held in a {dims} layout (the "
                          "layouts pass expands broadcast operands first)")
    resty = FragType(frag.dtype, dims, frag.layout)
    return signature(resty, frag, shape), lambda context, builder, sig, args: args[0]


# --- comparisons and bitwise operators ------------------------------------------------------

#: operator -> (LLVM predicate, float compare ordered?)
_COMPARE = {operator.lt: ("<", True), operator.le: ("<=", True), operator.eq: ("==", True),
            operator.ne: ("!=", False), operator.gt: (">", True), operator.ge: (">=", True)}
_BITWISE = {operator.and_: "and_", operator.or_: "or_", operator.xor: "xor"}


def compare_values(builder, op, x, y, dtype):
    """i1 ``x op y`` for two LLVM values of Numba type ``dtype`` (see the module doc)."""
    pred, ordered = _COMPARE[op]
    if isinstance(dtype, types.Boolean):
        return builder.icmp_unsigned(pred, x, y)
    if isinstance(dtype, types.Integer):
        cmp = builder.icmp_signed if dtype.signed else builder.icmp_unsigned
        return cmp(pred, x, y)
    return (builder.fcmp_ordered if ordered else builder.fcmp_unordered)(pred, x, y)


def _operand_ok(t):
    return isinstance(t, (FragType, types.Number, types.Boolean))


def _register_compare(op):
    rule = tt.TYPING[{v: k for k, v in tt.OPERATORS.items()}[op]]

    class FragCompare(AbstractTemplate):
        key = op

        def generic(self, args, kws):
            if len(args) != 2 or not any(isinstance(a, FragType) for a in args) \
                    or not all(_operand_ok(a) for a in args):
                return None
            rule(*map(_stand_in, args))     # the language's checks
            return signature(result_frag(args, types.boolean, op.__name__), *args)

    infer_global(op)(FragCompare)

    def impl(context, builder, sig, args):
        resty = sig.return_type
        work = tt.compare_dtype(*map(_stand_in, sig.args))
        values = [operand_values(context, builder, t, v, resty, work)
                  for t, v in zip(sig.args, args)]
        if work in (types.float16, types.bfloat16):      # exact in fp32
            values = [[cast(context, builder, v, work, types.float32) for v in vs]
                      for vs in values]
            work = types.float32
        out = [compare_values(builder, op, x, y, work) for x, y in zip(*values)]
        return _pack(context, builder, resty, out)

    for pair in ((FragType, FragType), (FragType, types.Number), (types.Number, FragType),
                 (FragType, types.Boolean), (types.Boolean, FragType)):
        lower_builtin(op, *pair)(impl)


def _register_bitwise(op, name):
    class FragBitwise(AbstractTemplate):
        key = op

        def generic(self, args, kws):
            if len(args) != 2 or not any(isinstance(a, FragType) for a in args) \
                    or not all(_operand_ok(a) for a in args):
                return None
            dtype = tt.bitwise_dtype(*map(_stand_in, args), name)
            if dtype is None:
                raise TypingError(f"{op.__name__} on the GPU needs boolean or integer "
                                  f"register tiles, got {args}")
            return signature(result_frag(args, dtype, op.__name__), *args)

    infer_global(op)(FragBitwise)

    def impl(context, builder, sig, args):
        resty = sig.return_type
        xs, ys = (operand_values(context, builder, t, v, resty, resty.dtype)
                  for t, v in zip(sig.args, args))
        fn = getattr(builder, name)
        return _pack(context, builder, resty, [fn(x, y) for x, y in zip(xs, ys)])

    for pair in ((FragType, FragType), (FragType, types.Number), (types.Number, FragType),
                 (FragType, types.Boolean), (types.Boolean, FragType)):
        lower_builtin(op, *pair)(impl)


for _op in _COMPARE:
    _register_compare(_op)
for _op, _name in _BITWISE.items():
    _register_bitwise(_op, _name)


@infer_global(operator.invert)
class _FragInvert(AbstractTemplate):
    def generic(self, args, kws):
        if len(args) == 1 and isinstance(args[0], FragType):
            if not isinstance(args[0].dtype, (types.Integer, types.Boolean)):
                raise TypingError(f"~ on the GPU needs a boolean or integer register tile, "
                                  f"got {args[0]}")
            return signature(args[0], args[0])
        return None


@lower_builtin(operator.invert, FragType)
def _frag_invert(context, builder, sig, args):
    fragty = sig.return_type
    vals = _elements(builder, args[0], fragty.count)
    ones = ir.Constant(vals[0].type, -1)     # all bits set; 1 for an i1
    return _pack(context, builder, fragty, [builder.xor(v, ones) for v in vals])


# --- ws.where ---------------------------------------------------------------------------

@intrinsic
def gpu_frag_where(typingctx, cond, a, b):
    """``ws.where(cond, a, b)`` on register tiles: ``cond`` a boolean register tile, ``a``
    / ``b`` register tiles or scalars; one ``select`` per register of the result (the
    widest operand's layout; the others equal to it or vectors in its slice)."""
    if not isinstance(cond, FragType) or not isinstance(cond.dtype, types.Boolean):
        raise TypingError(f"ws.where on the GPU: cond must be a boolean register tile, got "
                          f"{cond}")
    for t in (a, b):
        if not _operand_ok(t):
            raise TypingError(f"ws.where on the GPU: a and b must be register tiles or "
                              f"scalars, got {a}, {b}")
    dtype = tt.TYPING["where"](*map(_stand_in, (cond, a, b))).dtype
    resty = result_frag((cond, a, b), dtype, "ws.where")
    sig = signature(resty, cond, a, b)

    def codegen(context, builder, sig, args):
        keep = operand_values(context, builder, cond, args[0], resty, types.boolean)
        xs = operand_values(context, builder, a, args[1], resty, dtype)
        ys = operand_values(context, builder, b, args[2], resty, dtype)
        return _pack(context, builder, resty,
                     [builder.select(k, x, y) for k, x, y in zip(keep, xs, ys)])

    return sig, codegen


__all__ = ["gpu_arange", "gpu_expand_dims", "gpu_squeeze", "gpu_broadcast_to", "gpu_frag_where",
           "result_frag", "compare_values"]
