"""GPU lowering of tile ops on concrete tiles: register fragments and shared-memory tiles.

Fragments (:class:`FragType`) use the wgmma accumulator layout (see
:mod:`numba_ws.codegen.fragments`): a (64*mb, N) fragment is ``mb`` blocks of N/2 values
per thread, block ``mi`` covering rows 64*mi.. of the tile. Every element-wise op works
register by register with constant indices (no local memory). Shared-memory tiles
(:class:`SmemTileType`) are 32-bit addresses; their ``layout`` is
``(phys_rows, phys_cols, transposed)``: physical rows of 128 bytes in boxes of
``128 / itemsize`` columns, each box ``phys_rows * 128`` bytes, 128-byte swizzle, as TMA
writes them (64 or 32 bytes when ``phys_cols * itemsize`` is not a multiple of 128:
``codegen.swizzle.swizzle_for``); ``transposed`` marks a ``trans()`` view.

wgmma descriptors (PTX ISA 9.7.15.5.1.2; values derived in codegen/wgmma.py):
- K-major operand (A not transposed; B transposed): start = base + box(k)*rows*128 +
  32*(k16 % 4) [+ 8192*mi for A's 64-row block], LBO 16 (unused), SBO 1024, trans 0;
  with a 64 / 32-byte swizzle (BK = 32 / 16 fp16) 64 / 32 replaces 128 and SBO is 512 /
  256, swizzle mode 2 / 3.
- MN-major B (not transposed; N contiguous): start = base + 16*swz*k16, LBO = rows*swz
  (next box of swz / itemsize columns), SBO 8*swz (next 8 K rows), trans_b 1, where swz
  is the tile's swizzle width (128 B; 64 / 32 B when N * itemsize is not a multiple of
  128 / 64, e.g. N = 32 / 16 fp16).
"""
import operator

from llvmlite import ir

from numba.cuda import types
from numba.cuda.core.errors import TypingError
from numba.cuda.core.imputils import lower_builtin
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature
from numba.cuda.typing.templates import AbstractTemplate, infer_global

from ..language.types import DTypeType, FragType, SmemTileType
from ..language.typing import literal_shape
from . import smem as sm
from . import wgmma
from .channel_ops import _need_literals, emit
from .convert import cast
from .layouts import itemsize as itemsize_of
from .swizzle import swizzle_for, wgmma_operand_fields
from ._util import I32, I64, asm, literal_int, outputs_type

_WGMMA_DTYPE = {types.float16: "f16", types.bfloat16: "bf16", types.float32: "tf32"}


def _c32(v):
    return ir.Constant(I32, v)


# a fragment is an LLVM aggregate like wgmma's accumulator tuple: the same helpers
_elements, _pack = wgmma._unpack, wgmma._pack


@intrinsic
def gpu_frag_full(typingctx, value, shape, dtype):
    """A fragment of ``shape`` (rows a multiple of 64) filled with ``value``."""
    dims = literal_shape(shape, "gpu_frag_full(shape)")
    if len(dims) != 2 or dims[0] % 64 or dims[1] % 8:
        raise TypingError(f"a register tile needs rows % 64 == 0 and cols % 8 == 0, got {dims}")
    if not isinstance(dtype, DTypeType):
        raise TypingError(f"gpu_frag_full(dtype) must be a ws dtype, got {dtype}")
    fragty = FragType(dtype.dtype, dims)
    sig = signature(fragty, value, shape, dtype)

    def codegen(context, builder, sig, args):
        v = cast(context, builder, args[0], sig.args[0], fragty.dtype)
        # pinned: a constant accumulator would be re-materialised by register copies that
        # ptxas then sees reading wgmma accumulators (warning C7514, serialised wgmma)
        return _pack(context, builder, fragty, _pin(builder, [v] * fragty.count))

    return sig, codegen


@intrinsic
def gpu_view(typingctx, offset, slot_bytes, slot, shape, dtype, phys_cols, box_cols, xor):
    """Shared-memory tile of one slot part: ``smem_base() + offset + slot * slot_bytes``.

    ``offset``: a literal, or a runtime int (the shared consumer clone's part of a split
    load: first part + group * part spacing, a multiple of the swizzle atom).
    ``shape`` is the part as stored ((rows, cols), or (cols,): one row); ``phys_cols`` (literal) its stored row
    length (>= cols: a narrow tile is stored in 16-byte rows), ``box_cols`` / ``xor``
    (literals) its boxes and swizzle (``codegen.swizzle.part_offset``). The result's
    ``swizzle`` is None when that is the tensor-core layout ``swizzle_for`` gives.
    """
    k = _need_literals("gpu_view", slot_bytes=slot_bytes, phys_cols=phys_cols,
                       box_cols=box_cols, xor=xor)
    if not isinstance(offset, types.Integer):
        raise TypingError(f"gpu_view: offset must be an int, got {offset}")
    dims = literal_shape(shape, "gpu_view(shape)")
    itemsize = itemsize_of(dtype.dtype)
    part = (k["box_cols"], bool(k["xor"]))
    tensor_core = swizzle_for(k["phys_cols"] * itemsize)
    if tensor_core is not None and part == (tensor_core // itemsize, True):
        part = None
    rows = dims[0] if len(dims) == 2 else 1    # a 1-D part is stored as one row
    resty = SmemTileType(dtype.dtype, dims, (rows, k["phys_cols"], False), part)
    sig = signature(resty, offset, slot_bytes, slot, shape, dtype, phys_cols, box_cols, xor)

    def codegen(context, builder, sig, args):
        base = emit(sm.smem_base, context, builder, (), ())
        s = context.cast(builder, args[2], sig.args[2], types.uint32)
        off = context.cast(builder, args[0], sig.args[0], types.uint32)
        return builder.add(builder.add(base, off), builder.mul(s, _c32(k["slot_bytes"])))

    return sig, codegen


def part_layout(tile):
    """(phys_rows, phys_cols, box_cols, xor) of a shared-memory tile as stored."""
    rows, cols, _ = tile.layout
    itemsize = itemsize_of(tile.dtype)
    if tile.swizzle is None:
        return rows, cols, swizzle_for(cols * itemsize) // itemsize, True
    return (rows, cols) + tuple(tile.swizzle)


@intrinsic
def gpu_smem_trans(typingctx, tile):
    """``trans`` of a shared-memory tile: the same bytes, viewed transposed."""
    if not isinstance(tile, SmemTileType):
        raise TypingError(f"gpu_smem_trans expects a shared-memory tile, got {tile}")
    rows, cols, tr = tile.layout
    resty = SmemTileType(tile.dtype, tile.shape[::-1], (rows, cols, not tr), tile.swizzle)
    return signature(resty, tile), lambda context, builder, sig, args: args[0]


_SWIZZLE_MODE = {128: wgmma.SWIZZLE_128B, 64: wgmma.SWIZZLE_64B, 32: wgmma.SWIZZLE_32B}


def _operand_desc(builder, context, base, tile, k16, row_block, is_a):
    """uint64 descriptor of 64 rows (A) / the whole N (B) of ``tile`` at K step k16.

    The tile's swizzle width ``swz`` is the one lower_loads laid it out with
    (``swizzle_for(row bytes)``): rows ``swz`` bytes apart in boxes of ``swz / itemsize``
    columns; 8-row groups ``8 * swz`` bytes apart (SBO), K-major or MN-major alike.
    """
    rows, cols, transposed = tile.layout
    itemsize = itemsize_of(tile.dtype)
    if tile.swizzle is not None:
        raise TypingError(f"dot: operand {tile} is not stored in the tensor cores' "
                          "swizzled layout (a lower_loads bug)")
    swz = swizzle_for(cols * itemsize)
    k_major = (not transposed) if is_a else transposed
    if swz is None:
        what = "a K-major" if k_major else ("an M-major A" if is_a else "an N-major B")
        raise TypingError(f"dot: {what} tile needs its rows a multiple of 32 bytes "
                          f"(columns = {32 // itemsize} x n), got {cols} columns")
    try:
        off, lbo, sbo, swz, trans = wgmma_operand_fields(rows, cols, transposed, itemsize,
                                                         k16, row_block, is_a)
    except ValueError as e:     # a tf32 operand stored MN-major (a layouts pass bug)
        raise TypingError(f"dot: {tile}: {e} (wgmma has no transpose for tf32)") from None
    addr = builder.add(base, _c32(off))
    desc = emit(wgmma.wgmma_desc, context, builder,
                (types.uint32, types.int32, types.int32, types.int32),
                (addr, _c32(lbo), _c32(sbo), _c32(_SWIZZLE_MODE[swz])))
    return desc, trans


def dot_result_type(a, b, acc):
    """(FragType float32 (M, N), has_acc) of a GPU dot, or a TypingError: A and B
    shared-memory tiles of fp16/bf16 (or both float32: tf32, K-major), M % 64 == 0,
    K % 16 == 0 (tf32: 8), N % 8 == 0, N <= 256, ``acc`` that fragment or none. The
    contract of every tensor-core form (A may be a ``trans`` view, M-major, on sm_90a
    only: gpu_dot_sm80 refuses it)."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, SmemTileType):
            raise TypingError(f"dot({name}) on the GPU must be a tile loaded by ws.load "
                              f"(shared memory), got {t}")
    m, kdim = a.shape
    if a.dtype not in _WGMMA_DTYPE or a.dtype != b.dtype:
        raise TypingError(f"dot on the GPU supports fp16/bf16 (or float32 as tf32) operands "
                          f"of one dtype, got {a.dtype}, {b.dtype}")
    return mma_result_type(m, kdim, b, acc)


def mma_result_type(m, kdim, b, acc):
    """(FragType float32 (M, N), has_acc) for an (M, K) A operand and the shared-memory
    ``b`` (K, N), or a TypingError: the shape contract of wgmma (either A source)."""
    n, kstep = b.shape[1], k_step(b.dtype)
    if b.shape[0] != kdim or m % 64 or kdim % kstep or n % 8 or n > 256:
        raise TypingError(f"dot ({m}, {kdim}) @ {tuple(b.shape)}: need matching K, "
                          f"M % 64 == 0, K % {kstep} == 0, N % 8 == 0 and N <= 256 per "
                          "consumer")
    resty = FragType(types.float32, (m, n))
    has_acc = isinstance(acc, FragType)
    if has_acc and acc != resty:
        raise TypingError(f"dot(acc) must be {resty}, got {acc}")
    return resty, has_acc


def k_step(dtype):
    """K elements one wgmma reads (32 bytes): 16 fp16 / bf16, 8 tf32."""
    return 32 // itemsize_of(dtype)


@intrinsic
def gpu_dot(typingctx, a, b, acc):
    """``acc + a @ b`` on the tensor cores: A and B shared-memory tiles, acc a fragment.

    Emits ``wgmma.fence``; for each 64-row block of A and each K step of 16 (tf32: 8), one
    ``wgmma.mma_async.m64n{N}k16.f32.{f16|bf16}`` (``m64n{N}k8.f32.tf32.tf32``) with
    shared-memory descriptors; then ``wgmma.commit_group``. The caller waits
    (``ws_dot_wait``) before reading the slot again or releasing it. sm_90a (below sm_90:
    :func:`numba_ws.codegen.mma_sync.gpu_dot_sm80`).
    """
    resty, has_acc = dot_result_type(a, b, acc)
    m, kdim = a.shape
    n = b.shape[1]
    sig = signature(resty, a, b, acc)
    dt = _WGMMA_DTYPE[a.dtype]
    blocks, ksteps, per_block = m // 64, kdim // k_step(a.dtype), n // 2

    def codegen(context, builder, sig, args):
        if has_acc:
            vals = _elements(builder, args[2], blocks * per_block)
        else:
            vals = [ir.Constant(ir.FloatType(), 0.0)] * (blocks * per_block)
        emit(wgmma.wgmma_fence, context, builder, (), ())
        out = []
        for mi in range(blocks):
            block = vals[mi * per_block:(mi + 1) * per_block]
            for k16 in range(ksteps):
                da, ta = _operand_desc(builder, context, args[0], a, k16, mi, True)
                db, tb = _operand_desc(builder, context, args[1], b, k16, 0, False)
                scale = 1 if (has_acc or k16 > 0) else 0
                block = wgmma.mma_values(builder, wgmma.mma_form(per_block, dt, ta, tb),
                                         block, da, db, _c32(scale))
            out.extend(block)
        emit(wgmma.wgmma_commit_group, context, builder, (), ())
        return _pack(context, builder, resty, out)

    return sig, codegen


@intrinsic
def gpu_frag_fence(typingctx, frag, redefine):
    """The fragment after a ``wgmma.wait_group``, redefined register by register.

    fp32 fragments (accumulators) pass through ``add.rn.f32 r, r, 0f80000000`` (adding -0.0
    is exact for every value, -0.0 and NaN included). The redefinition matters to ptxas:
    when a K loop may run zero times, reads of the accumulator after the loop otherwise
    make ptxas 13.0 serialise every wgmma of the loop (C7514, "non wgmma instructions
    reading accumulator registers ... between start and end of the pipeline stage"),
    which defeats keeping a wgmma group in flight. Other dtypes go through an empty asm.
    Either way reads of the result cannot be scheduled above the wait. Any sm.
    """
    if not isinstance(frag, FragType):
        raise TypingError(f"gpu_frag_fence expects a register tile, got {frag}")
    rewrite = bool(literal_int("gpu_frag_fence", "redefine", redefine, (0, 1)))
    sig = signature(frag, frag, redefine)

    def codegen(context, builder, sig, args):
        vals = _elements(builder, args[0], frag.count)
        return _pack(context, builder, frag, _pin(builder, vals, redefine=rewrite))

    return sig, codegen


def _pin(builder, vals, redefine=False):
    """``vals`` through asms with tied operands: opaque, register-resident copies; with
    ``redefine``, fp32 values are rewritten in place by an exact ``add.rn.f32 r, r, -0.0``."""
    out = []
    for start in range(0, len(vals), 64):
        chunk = vals[start:start + 64]
        n, ty = len(chunk), chunk[0].type
        code = {"float": "f", "half": "h", "bfloat": "h"}.get(str(ty), "r")
        text = ""
        if redefine and code == "f":
            text = " ".join(f"add.rn.f32 ${i}, ${i}, 0f80000000;" for i in range(n))
        cons = ",".join([f"={code}"] * n + [str(i) for i in range(n)])
        res = asm(builder, text, cons, chunk, ret=outputs_type(builder, ty, n))
        out.extend(builder.extract_value(res, i) for i in range(n))
    return out


@intrinsic
def gpu_frag_astype(typingctx, frag, dtype):
    """Element-wise conversion of a register tile (round to nearest even); same layout.
    ``dtype``: a ``ws.float16``-like global or an array's ``.dtype``."""
    if not isinstance(frag, FragType) or not isinstance(dtype, (DTypeType, types.DType)):
        raise TypingError(f"astype on the GPU needs a register tile, got {frag}")
    resty = FragType(dtype.dtype, frag.shape, frag.layout)
    sig = signature(resty, frag, dtype)

    def codegen(context, builder, sig, args):
        vals = [cast(context, builder, v, frag.dtype, resty.dtype)
                for v in _elements(builder, args[0], frag.count)]
        return _pack(context, builder, resty, vals)

    return sig, codegen


# --- element-wise arithmetic on fragments (typing + lowering of the Python operators) ---

_FLOAT_OPS = {operator.add: "fadd", operator.sub: "fsub", operator.mul: "fmul",
              operator.truediv: "fdiv"}
_INT_OPS = {"fadd": "add", "fsub": "sub", "fmul": "mul"}
_NARROW = (types.float16, types.bfloat16)


def elementwise(context, builder, instr, x, y, dtype):
    """``x instr y`` for two values of ``dtype``: fp16 / bf16 (held as i16 bit patterns)
    computed in fp32 and rounded once (the same result as NumPy's / ml_dtypes' fp16 and
    bf16 arithmetic: fp32 is exact for one op on two 11 / 8-bit significands); integers
    with the integer instruction; fp32 / fp64 as they are. ``// % << >>`` (issue 15):
    :func:`numba_ws.codegen.math_ops.binary_value`."""
    from . import math_ops
    if instr in math_ops.BINARY:
        return math_ops.binary_value(context, builder, instr, x, y, dtype)
    if dtype in _NARROW:
        x, y = (cast(context, builder, v, dtype, types.float32) for v in (x, y))
        return cast(context, builder, getattr(builder, instr)(x, y), types.float32, dtype)
    if isinstance(dtype, types.Integer):
        return getattr(builder, _INT_OPS[instr])(x, y)
    return getattr(builder, instr)(x, y)


def _frag_binop_type(a, b, name="add"):
    """FragType of ``a <name> b`` (register tiles / a tile and a scalar): the layout of
    the tile (a vector broadcasts onto it), the dtype of the language's promotion
    (``promotion.binary_result``: int / int is float32 ...), or None."""
    fa, fb = isinstance(a, FragType), isinstance(b, FragType)
    if fa and fb:
        # equal tiles, or a (rows, N) tile with a (rows, 1) row vector (frag_math)
        from .frag_math import broadcast_type
        res = broadcast_type(a, b)
    else:
        frag, other = (a, b) if fa else (b, a)
        res = frag if isinstance(other, types.Number) else None
    if res is None:
        return None
    from ..language import typing as tt
    try:
        dtype = tt.binary_result(name, tt.operand_kind(a), tt.operand_kind(b))
    except ValueError as e:
        raise TypingError(f"on the GPU: {e}") from None
    dtype = tt.from_name(dtype).numba
    return res if dtype == res.dtype else FragType(dtype, res.shape, res.layout)


#: the language op of each instruction of ``elementwise``
_OP_NAME = {"fadd": "add", "fsub": "sub", "fmul": "mul", "fdiv": "truediv"}


def _register_operator(op, instr):
    name = _OP_NAME.get(instr, instr)

    class FragOp(AbstractTemplate):
        key = op

        def generic(self, args, kws):
            if len(args) == 2 and any(isinstance(x, FragType) for x in args):
                res = _frag_binop_type(*args, name)
                if res is not None:
                    return signature(res, *args)
            return None

    infer_global(op)(FragOp)

    def impl(context, builder, sig, args):
        resty = sig.return_type
        n = resty.count

        from .frag_math import frag_values  # row vectors broadcast along the columns
        xs = frag_values(context, builder, sig.args[0], args[0], resty)
        ys = frag_values(context, builder, sig.args[1], args[1], resty)
        assert len(xs) == len(ys) == n
        out = [elementwise(context, builder, instr, x, y, resty.dtype) for x, y in zip(xs, ys)]
        return _pack(context, builder, resty, out)

    lower_builtin(op, FragType, FragType)(impl)
    lower_builtin(op, FragType, types.Number)(impl)
    lower_builtin(op, types.Number, FragType)(impl)


# issue 15 item 3: // % << >> (math_ops.binary_value); every operator also in place
# (``acc += x`` types operator.iadd: a new register tile, as in the language)
_FLOAT_OPS.update({operator.floordiv: "floordiv", operator.mod: "mod",
                   operator.lshift: "lshift", operator.rshift: "rshift"})
for _op, _instr in _FLOAT_OPS.items():
    _register_operator(_op, _instr)
    _register_operator(getattr(operator, "i" + _op.__name__), _instr)


# --- scalar ops of the language (same in every warp group) ---

from ..language import core as _core  # noqa: E402


def _sreg_axis(builder, prefix, axis):
    from ._util import sreg
    return builder.zext(sreg(builder, f"{prefix}.{'xyz'[axis]}"), I64)


@lower_builtin(_core.program_id, types.IntegerLiteral)
def _program_id(context, builder, sig, args):
    return _sreg_axis(builder, "ctaid", sig.args[0].literal_value)


@lower_builtin(_core.num_programs, types.IntegerLiteral)
def _num_programs(context, builder, sig, args):
    return _sreg_axis(builder, "nctaid", sig.args[0].literal_value)


@lower_builtin(_core.cdiv, types.Integer, types.Integer)
def _cdiv(context, builder, sig, args):
    a, b = (context.cast(builder, v, t, types.int64) for v, t in zip(args, sig.args))
    one = ir.Constant(I64, 1)
    return builder.sdiv(builder.sub(builder.add(a, b), one), b)


@lower_builtin(_core.map, types.Dispatcher, types.VarArg(types.Any))
def _map(context, builder, sig, args):
    """ws.map on the GPU: the device function's Python code compiled in this target
    context (no device query) and called per register, with constant indices."""
    fn_ty, arg_tys = sig.args[0], sig.args[1:]
    py = fn_ty.dispatcher.py_func
    frags = [t for t in arg_tys if isinstance(t, FragType)]
    if not frags:
        return _call_inlined(context, builder, py, signature(sig.return_type, *arg_tys),
                             list(args[1:]))
    resty = sig.return_type
    count = resty.count
    elem_tys = [t.dtype if isinstance(t, FragType) else t for t in arg_tys]
    # the function's own (Numba) return type; a float result is then rounded once to the
    # tile's float dtype (typing.map_result_dtype: ``0.01 * x`` of fp32 x stays fp32)
    from ..language.typing import _scalar_return_type
    natural = _scalar_return_type(context.typing_context, py, tuple(elem_tys))
    elem_sig = signature(natural, *elem_tys)
    from .frag_math import frag_values   # vectors broadcast by register selection
    columns = [frag_values(context, builder, t, v, FragType(t.dtype, resty.shape, resty.layout))
               if isinstance(t, FragType) else [v] * count
               for t, v in zip(arg_tys, args[1:])]
    out = [cast(context, builder, _call_inlined(context, builder, py, elem_sig, list(vals)),
                natural, resty.dtype) for vals in zip(*columns)]
    return _pack(context, builder, resty, out)


def _call_inlined(context, builder, py, sig, args):
    """Call ``py`` compiled for ``sig``, marked always-inline: a real call per register
    would save and restore the fragment around it (local memory)."""
    cres = context.compile_subroutine(builder, py, sig)
    fn = cres.library.get_function(cres.fndesc.llvm_func_name)
    fn.attributes.add("alwaysinline")
    return context.call_internal(builder, cres.fndesc, sig, args)
