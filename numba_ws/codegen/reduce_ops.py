"""GPU reductions of register tiles along one axis (``ws.max / sum / min / argmax /
argmin``, each keeping the reduced axis with size 1: the anchors pass writes NumPy's
forms as these plus ``ws.squeeze``), in any layout (:mod:`numba_ws.codegen.layouts`).

Along the axis a thread owns: a pairwise tree over its registers with the same kept
coordinate; across lanes ``shfl.sync.bfly`` over each lane bit whose basis runs along
the axis; across warps each warp's partial through the warp group's scratch region
(``st.shared``, ``bar.sync``, every thread combines in warp order, so replicas agree bit
for bit). fp16 / bf16 reduce in fp32; argmax / argmin carry (value, index) pairs. Any sm
from sm_80 (``shfl.sync``, ``bar.sync`` with a thread count: sm_70); executed by all 128
threads of one warp group. Helpers (thread coordinates, shared-memory words, scratch)
are :mod:`numba_ws.codegen.regtile`'s.
"""
from llvmlite import ir

from numba.cuda import types
from numba.cuda.core.errors import TypingError
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ..language.types import FragType
from . import layouts as lay
from .channel_ops import _need_literals
from ._util import F32, I32, I64, shfl_bfly
from .convert import cast
from .frag_math import _maxnum_fn
from .regtile import (_bits, _c32, _c64, _elements, group_sync, _pack, group_region_base,
                      ld_shared, owner_predicate, st_shared, thread_ids, thread_offset)

# -- reductions --------------------------------------------------------------------------

def layout_axis(shape, axis):
    """The layout axis of tile axis ``axis``: a 1-D tile's only axis is the layout's
    columns."""
    return 1 if len(shape) == 1 else axis


#: ws reductions along one axis; the arg ones carry (value, index) pairs
REDUCE_OPS = ("max", "sum", "min", "argmax", "argmin")
ARG_REDUCTIONS = ("argmax", "argmin")


def reduce_result(frag, axis, op):
    """(FragType of ``ws.{op}(frag, axis)``, layout axis) — the reduced axis kept with
    size 1; sums of fp16/bf16 are float32, argmax / argmin int32."""
    ax = layout_axis(frag.shape, axis)
    shape = list(frag.shape)
    shape[axis] = 1
    out_dtype = frag.dtype
    if op == "sum" and frag.dtype in (types.float16, types.bfloat16):
        out_dtype = types.float32
    if op in ARG_REDUCTIONS:
        out_dtype = types.int32
    return FragType(out_dtype, tuple(shape), lay.slice_of(frag.layout, ax)), ax


def reduce_scratch_bytes(layout, axis):
    """Scratch bytes per 4-byte value a reduction along layout ``axis`` exchanges between
    warps (0 when no warp basis runs along ``axis``): warps-along-axis x kept extent."""
    nw = 1 << sum(1 for basis in layout.warps if basis[axis])
    if nw == 1:
        return 0
    return nw * layout.shape[1 - axis]


def _combiner(context, builder, op, work):
    """``combine(p, q)`` of two partials, each a tuple: ``(value,)``, or ``(value,
    index)`` for argmax / argmin. max of floats is ``llvm.maxnum`` (a NaN operand yields
    the other one); min is NaN-propagating (``math_ops.min_value``); argmax / argmin keep
    the better value, NaN counting as better than any number, the smaller index on ties
    (NumPy's first occurrence): a total order, so every tree and shuffle order agrees."""
    llty = context.get_value_type(work)
    if op in ARG_REDUCTIONS:
        return _arg_combiner(builder, op, work)
    if op == "min":
        from .math_ops import min_value
        return lambda p, q: (min_value(context, builder, p[0], q[0], work),)
    if isinstance(llty, ir.IntType):
        if op == "sum":
            return lambda p, q: (builder.add(p[0], q[0]),)
        return lambda p, q: (builder.select(builder.icmp_signed(">", p[0], q[0]), p[0],
                                            q[0]),)
    if op == "sum":
        return lambda p, q: (builder.fadd(p[0], q[0]),)
    fn = _maxnum_fn(builder, 'f32' if str(llty) == 'float' else 'f64', llty)
    return lambda p, q: (builder.call(fn, [p[0], q[0]]),)


def _arg_combiner(builder, op, work):
    pred = ">" if op == "argmax" else "<"
    floating = not isinstance(work, types.Integer)

    def better(q, p):                       # i1: q wins over p
        (vq, iq), (vp, ip) = q, p
        if floating:
            q_nan = builder.fcmp_unordered("uno", vq, vq)
            p_nan = builder.fcmp_unordered("uno", vp, vp)
            strict = builder.or_(builder.fcmp_ordered(pred, vq, vp),
                                 builder.and_(q_nan, builder.not_(p_nan)))
            equal = builder.or_(builder.fcmp_ordered("==", vq, vp), builder.and_(q_nan, p_nan))
        else:
            cmp = builder.icmp_signed if work.signed else builder.icmp_unsigned
            strict, equal = cmp(pred, vq, vp), builder.icmp_signed("==", vq, vp)
        return builder.or_(strict, builder.and_(equal, builder.icmp_signed("<", iq, ip)))

    def combine(p, q):
        take = better(q, p)
        return tuple(builder.select(take, b, a) for a, b in zip(p, q))
    return combine


def shfl_xor(builder, value, mask):
    """``value`` of lane ``lane ^ mask`` for an i32 / f32 (one shfl.sync.bfly) or an
    i64 / f64 (two, on its 32-bit halves)."""
    ty = value.type
    if ty in (I32, F32):
        return shfl_bfly(builder, value, mask)
    as_int = builder.bitcast(value, I64) if not isinstance(ty, ir.IntType) else value
    lo = builder.trunc(as_int, I32)
    hi = builder.trunc(builder.lshr(as_int, _c64(32)), I32)
    lo, hi = shfl_bfly(builder, lo, mask), shfl_bfly(builder, hi, mask)
    out = builder.or_(builder.zext(lo, I64), builder.shl(builder.zext(hi, I64), _c64(32)))
    return out if isinstance(ty, ir.IntType) else builder.bitcast(out, ty)


def _tree(vals, combine):
    while len(vals) > 1:
        nxt = [combine(vals[i], vals[i + 1]) for i in range(0, len(vals) - 1, 2)]
        if len(vals) % 2:
            nxt.append(vals[-1])
        vals = nxt
    return vals[0]


def _work_type(dtype):
    """Numba type a reduction computes in: float32 for fp16/bf16, int32 for ints narrower
    than 32 bits (exact; shuffles move 32-bit words), else the dtype."""
    if dtype in (types.float16, types.bfloat16):
        return types.float32
    if isinstance(dtype, types.Integer) and dtype.bitwidth < 32:
        return types.int32
    return dtype


@intrinsic
def gpu_tile_reduce(typingctx, frag, axis, op, scratch_off, scratch_bytes, first_group):
    """``ws.max`` / ``ws.sum`` / ``ws.min`` / ``ws.argmax`` / ``ws.argmin`` of a register
    tile along ``axis`` (literal), ``op`` the op's name as a literal: the result in
    ``slice_of(layout, axis)``, held by every thread that held the reduced elements.

    Per output register, a pairwise tree over this thread's registers with that kept
    coordinate (fp16/bf16 widened to fp32); then ``shfl.sync.bfly`` over each lane bit
    whose basis runs along ``axis``; then, if warps split ``axis``, each warp's partial
    goes through the scratch region (``st.shared``, ``bar.sync``, every thread combines
    the warps' partials in warp order, ``bar.sync``). argmax / argmin carry (value,
    index) pairs through the same steps (:func:`_combiner`), the index of a register
    being its coordinate along ``axis`` (``layout.regs`` plus the thread's offset); across
    warps the values go through scratch first, then the indices, in the same slots (two
    exchanges, so the layouts pass's scratch size still holds).
    """
    if not isinstance(frag, FragType):
        raise TypingError(f"gpu_tile_reduce expects a register tile, got {frag}")
    if not isinstance(axis, types.IntegerLiteral) or axis.literal_value not in range(len(frag.shape)):
        raise TypingError(f"gpu_tile_reduce: axis must be a literal in range({len(frag.shape)})")
    if not isinstance(op, types.StringLiteral) or op.literal_value not in REDUCE_OPS:
        raise TypingError(f"gpu_tile_reduce: op must be one of {REDUCE_OPS}, got {op}")
    k = _need_literals("gpu_tile_reduce", scratch_off=scratch_off, scratch_bytes=scratch_bytes,
                       first_group=first_group)
    name = op.literal_value
    resty, ax = reduce_result(frag, axis.literal_value, name)
    src, out_ly = frag.layout, resty.layout
    work = _work_type(frag.dtype)
    wbytes = max(4, _bits(work) // 8)
    exchange = reduce_scratch_bytes(src, ax)
    if exchange * wbytes > k["scratch_bytes"]:
        raise TypingError(f"gpu_tile_reduce: {exchange * wbytes} bytes of scratch needed, "
                          f"{k['scratch_bytes']} reserved (layouts pass bug)")
    sig = signature(resty, frag, axis, op, scratch_off, scratch_bytes, first_group)
    kept = 1 - ax
    groups = [[] for _ in out_ly.regs]
    index = {rc: j for j, rc in enumerate(out_ly.regs)}
    for i, rc in enumerate(src.regs):
        groups[index[(rc[0], 0) if ax == 1 else (0, rc[1])]].append(i)

    def codegen(context, builder, sig, args):
        llwork = context.get_value_type(work)
        combine = _combiner(context, builder, name, work)
        vals = [cast(context, builder, v, frag.dtype, work)
                for v in _elements(builder, args[0], src.count)]
        if name in ARG_REDUCTIONS:          # (value, coordinate along the axis)
            _, lane0, warp0 = thread_ids(builder)
            along = thread_offset(builder, src, lane0, warp0)[ax]
            parts = [(v, builder.add(along, _c32(src.regs[i][ax]))) for i, v in enumerate(vals)]
        else:
            parts = [(v,) for v in vals]
        lane_bits = [b for b, basis in enumerate(src.lanes) if basis[ax]]
        part = []
        for g in groups:                    # each output register: tree, then shuffles
            p = _tree([parts[i] for i in g], combine)
            for b in lane_bits:
                p = combine(p, tuple(shfl_xor(builder, x, 1 << b) for x in p))
            part.append(p)
        warp_bits = [b for b, basis in enumerate(src.warps) if basis[ax]]
        if warp_bits:
            tid, lane, warp = thread_ids(builder)
            base = group_region_base(context, builder, tid, k["scratch_off"], k["scratch_bytes"],
                                 k["first_group"])
            widx = _c32(0)
            for n, b in enumerate(warp_bits):
                bit = builder.and_(builder.lshr(warp, _c32(b)), _c32(1))
                widx = builder.add(widx, builder.shl(bit, _c32(n)))
            extent = src.shape[kept]
            tr, tc = thread_offset(builder, out_ly, lane, warp)
            along = sum(1 << b for b, basis in enumerate(src.lanes) if basis[ax])
            owner = owner_predicate(builder, src, lane, warp, along)
            keep_of = [builder.add(tr if kept == 0 else tc, _c32(rc[kept])) for rc in out_ly.regs]
            width = len(part[0])
            got = [[None] * len(part) for _ in range(width)]   # [component][j] -> per warp
            out = []
            for c in range(width):          # one exchange per component of the partials
                llty = llwork if c == 0 else I32
                for j, p in enumerate(part):
                    slot = builder.add(builder.mul(widx, _c32(extent)), keep_of[j])
                    st_shared(builder, builder.add(base, builder.mul(slot, _c32(wbytes))),
                              [p[c]], owner)
                group_sync(builder, tid)
                for j in range(len(part)):
                    got[c][j] = [ld_shared(builder, builder.add(base, builder.mul(
                        builder.add(_c32(w * extent), keep_of[j]), _c32(wbytes))), llty, 1)[0]
                        for w in range(1 << len(warp_bits))]
                    if c == width - 1:      # combine the warps' partials in warp order
                        out.append(_tree([tuple(got[x][j][w] for x in range(width))
                                          for w in range(1 << len(warp_bits))], combine))
                group_sync(builder, tid)
            part = out
        if name in ARG_REDUCTIONS:
            return _pack(context, builder, resty, [p[1] for p in part])
        part = [cast(context, builder, p[0], work, resty.dtype) for p in part]
        return _pack(context, builder, resty, part)

    return sig, codegen
