"""Shared helpers for the codegen intrinsics: inline-asm emission and argument coercion.

Conventions used by every intrinsic in this package:

- Shared-memory addresses are ``uint32`` values in the CTA's shared window (what
  ``smem_base()`` returns plus byte offsets). Any integer type is accepted and truncated to
  32 bits, because Numba promotes ``uint32 + int`` to ``int64``.
- Global (generic) pointers are 64-bit integers; any integer type is accepted.
- Values that must be PTX immediates (wgmma transpose flags, ``wgmma.wait_group`` depth,
  ``setmaxnreg`` counts) must be Numba literals (``types.IntegerLiteral`` /
  ``types.StringLiteral``): write the constant at the call site.
- NVVM rejects ``%=`` in inline asm, so instructions that need a scratch predicate or a
  label are wrapped in a PTX ``{ }`` scope with local ``.reg`` declarations and labels;
  PTX scopes make those names local, so the asm may be inlined or duplicated freely.
"""
from llvmlite import ir

from numba.cuda import types
from numba.cuda.core.errors import RequireLiteralValue, TypingError

I1 = ir.IntType(1)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
VOID = ir.VoidType()


def asm(builder, text, constraints, args=(), ret=VOID, side_effect=True):
    """Emit one inline-asm call. ``constraints`` is LLVM's comma-separated list."""
    fnty = ir.FunctionType(ret, [a.type for a in args])
    return builder.call(ir.InlineAsm(fnty, text, constraints, side_effect=side_effect),
                        list(args))


def outputs_type(builder, elem, n):
    """The return type of an inline asm with ``n`` outputs of LLVM type ``elem``: an
    identified struct ``%"ws.<elem>x<n>"`` of the module's context, so that each of its
    ``extractvalue`` prints the name instead of ``n`` field types (a literal struct of 128
    floats is ~900 bytes of text per use: half of a 128x256 GEMM's 1.84 MB of LLVM IR).
    Same layout and registers as the literal struct; NVVM's PTX is unchanged."""
    ty = builder.module.context.get_identified_type(f"ws.{elem}x{n}")
    if ty.is_opaque:
        ty.set_body(*([elem] * n))
    return ty


def is_int(ty):
    return isinstance(ty, (types.Integer, types.Boolean))


def check_ints(name, **tys):
    """Raise a TypingError naming the first argument of ``name`` that is not an integer."""
    for arg, ty in tys.items():
        if not is_int(ty):
            raise TypingError(f"{name}: argument {arg!r} must be an integer, got {ty}")


def literal_int(name, arg, ty, allowed=None):
    """The Python int of a literal-int argument; a clear error when it is not literal."""
    if not isinstance(ty, types.IntegerLiteral):
        if isinstance(ty, types.Integer):
            raise RequireLiteralValue(
                f"{name}: argument {arg!r} must be a compile-time constant int, got {ty}")
        raise TypingError(f"{name}: argument {arg!r} must be a constant int, got {ty}")
    value = ty.literal_value
    if allowed is not None and value not in allowed:
        raise TypingError(f"{name}: argument {arg!r}={value} not allowed; expected {allowed}")
    return value


def coerce(context, builder, ty, val, bits):
    """Convert an integer/bool argument value to an LLVM iN (truncate or extend)."""
    llty = ir.IntType(bits)
    if isinstance(ty, types.Literal):
        return ir.Constant(llty, int(ty.literal_value) & ((1 << bits) - 1))
    if isinstance(ty, types.Boolean):
        return builder.zext(context.cast(builder, val, ty, types.boolean), llty)
    width = val.type.width
    if width == bits:
        return val
    if width > bits:
        return builder.trunc(val, llty)
    if getattr(ty, "signed", False):
        return builder.sext(val, llty)
    return builder.zext(val, llty)


def u32(context, builder, ty, val):
    return coerce(context, builder, ty, val, 32)


def u64(context, builder, ty, val):
    return coerce(context, builder, ty, val, 64)


def pred_to_bool(builder, val_i32):
    """An i32 that is 0/1 (from ``selp``) as Numba's boolean value (i1)."""
    return builder.icmp_unsigned("!=", val_i32, ir.Constant(I32, 0))


def sreg(builder, name):
    """Read a PTX special register (``tid.x``, ``laneid``...) through the NVVM intrinsic."""
    fnty = ir.FunctionType(I32, ())
    fname = f"llvm.nvvm.read.ptx.sreg.{name}"
    fn = builder.module.globals.get(fname)
    if fn is None:
        fn = ir.Function(builder.module, fnty, fname)
    return builder.call(fn, ())


def shfl_bfly(builder, value, mask):
    """``shfl.sync.bfly.b32`` over the full warp: lane ``l`` gets lane ``l ^ mask``'s
    ``value`` (an i32 or an f32). sm_70+; every lane of the warp must execute it."""
    kind = "f32" if value.type == F32 else "i32"
    fname = f"llvm.nvvm.shfl.sync.bfly.{kind}"
    fn = builder.module.globals.get(fname)
    if fn is None:
        fn = ir.Function(builder.module, ir.FunctionType(value.type, (I32, value.type, I32, I32)),
                         fname)
    return builder.call(fn, (ir.Constant(I32, 0xFFFFFFFF), value, ir.Constant(I32, mask),
                             ir.Constant(I32, 0x1F)))


def vote_all(builder, pred):
    """``vote.sync.all.pred`` over the full warp: true in every lane when ``pred`` (i1)
    holds in every lane. sm_70+; every lane of the warp must execute it."""
    fname = "llvm.nvvm.vote.all.sync"
    fn = builder.module.globals.get(fname)
    if fn is None:
        fn = ir.Function(builder.module, ir.FunctionType(ir.IntType(1), (I32, ir.IntType(1))),
                         fname)
    return builder.call(fn, (ir.Constant(I32, 0xFFFFFFFF), pred))


def all_of(builder, preds):
    """The AND of a list of i1 values (true for none), as a balanced tree."""
    preds = list(preds)
    if not preds:
        return ir.Constant(ir.IntType(1), 1)
    while len(preds) > 1:
        preds = [builder.and_(preds[i], preds[i + 1]) if i + 1 < len(preds) else preds[i]
                 for i in range(0, len(preds), 2)]
    return preds[0]


def shfl_idx0(builder, val):
    """Broadcast lane 0's value over the warp (``shfl.sync.idx``) to make it warp-uniform."""
    fnty = ir.FunctionType(I32, (I32, I32, I32, I32))
    fname = "llvm.nvvm.shfl.sync.idx.i32"
    fn = builder.module.globals.get(fname)
    if fn is None:
        fn = ir.Function(builder.module, fnty, fname)
    full = ir.Constant(I32, 0xFFFFFFFF)
    return builder.call(fn, (full, val, ir.Constant(I32, 0), ir.Constant(I32, 0x1F)))


class IRInt:
    """An LLVM integer value with the Python operators ``+ * // % ^ &`` (unsigned).

    Lets one pure-Python address formula (e.g. :mod:`numba_ws.codegen.swizzle`) run on
    host ints in the tests and emit the same arithmetic in an intrinsic's codegen; int
    operands become constants of this value's type. ``.value`` is the LLVM value.
    """

    def __init__(self, builder, value):
        self.builder, self.value = builder, value

    def _v(self, other):
        return other.value if isinstance(other, IRInt) else ir.Constant(self.value.type, other)

    def _op(self, name, lhs, rhs):
        return IRInt(self.builder, getattr(self.builder, name)(lhs, rhs))

    def __add__(self, o):
        return self._op("add", self.value, self._v(o))

    def __mul__(self, o):
        return self._op("mul", self.value, self._v(o))

    def __xor__(self, o):
        return self._op("xor", self.value, self._v(o))

    def __and__(self, o):
        return self._op("and_", self.value, self._v(o))

    __radd__, __rmul__, __rxor__, __rand__ = __add__, __mul__, __xor__, __and__

    def __floordiv__(self, o):
        return self._op("udiv", self.value, self._v(o))

    def __mod__(self, o):
        return self._op("urem", self.value, self._v(o))
