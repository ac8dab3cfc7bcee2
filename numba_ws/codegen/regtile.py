"""GPU forms of register tiles in any layout (:mod:`numba_ws.codegen.layouts`): fill, read
a shared-memory slot part, convert between layouts, transpose, store to a global array
(reductions along an axis: :mod:`numba_ws.codegen.reduce_ops`, on these helpers). Any sm from sm_80 (``shfl.sync``, ``bar.sync`` with a thread
count: sm_70); every intrinsic is executed by all 128 threads of one warp group.

Per thread, element ``(r, c)`` of register ``i`` is ``layout.regs[i]`` plus the thread's
part (:func:`thread_offset`: shifts and adds of ``%tid.x`` bits, made once per op), so
every address is one run-time base plus constants, and registers are indexed with
constants only (no local memory).

Shared-memory accesses are ``ld.shared`` / ``st.shared`` of up to 16 bytes (what
``Layout.runs`` groups: consecutive registers holding consecutive columns), emitted as
volatile inline asm so that LLVM keeps them between the barrier wait and the release
around them. Conversions and cross-warp reductions exchange values through the warp
group's *scratch* region of shared memory (``scratch_off + region * scratch_bytes``,
``region = tid.x / 128 - first_group``; the layouts pass sizes it) and synchronise the
group with ``bar.sync 1 + tid.x / 128, 128`` (ids 2..5 for consumer groups 1..4; id 0
is ``__syncthreads``) before reading and again before the region is reused.
"""
from llvmlite import ir

from numba.cuda import cgutils, types
from numba.cuda.core.errors import TypingError
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ..language.types import DTypeType, FragType, LayoutType, SmemTileType
from ..language.typing import literal_shape
from . import layouts as lay
from . import smem as sm
from .channel_ops import _need_literals, emit
from .swizzle import part_offset
from ._util import I32, I64, IRInt, all_of, asm, outputs_type, sreg, vote_all
from .convert import cast

_WORD = {16: "b16", 32: "b32", 64: "b64"}
_CONSTRAINT = {16: "h", 32: "r", 64: "l"}


def _c32(v):
    return ir.Constant(I32, v)


def _c64(v):
    return ir.Constant(I64, v)


def _elements(builder, value, n):
    return [builder.extract_value(value, i) for i in range(n)]


def _pack(context, builder, ty, values):
    out = ir.Constant(context.get_value_type(ty), ir.Undefined)
    for i, v in enumerate(values):
        out = builder.insert_value(out, v, i)
    return out


def _layout(ty, what):
    if not isinstance(ty, LayoutType):
        raise TypingError(f"{what}: expected a register layout, got {ty}")
    return ty.layout


def _bits(ty):
    """Bits of an element of ``ty`` (numba-cuda's bfloat16 is a Number, not a Float, with
    a bitwidth of 16; booleans are stored as bytes)."""
    return getattr(ty, "bitwidth", 8)


# -- thread coordinates ----------------------------------------------------------------

def thread_ids(builder):
    """(tid.x, lane, warp in group) as i32."""
    tid = sreg(builder, "tid.x")
    lane = builder.and_(tid, _c32(31))
    warp = builder.and_(builder.lshr(tid, _c32(5)), _c32(3))
    return tid, lane, warp


def thread_offset(builder, layout, lane, warp):
    """(row, col) i32 values this thread adds to every ``layout.regs[i]``."""
    r = c = _c32(0)
    for bits, bases in ((lane, layout.lanes), (warp, layout.warps)):
        for b, (dr, dc) in enumerate(bases):
            if (dr, dc) == lay.ZERO:
                continue
            bit = builder.and_(builder.lshr(bits, _c32(b)), _c32(1))
            if dr:
                r = builder.add(r, builder.shl(bit, _c32(dr.bit_length() - 1)))
            if dc:
                c = builder.add(c, builder.shl(bit, _c32(dc.bit_length() - 1)))
    return r, c


def owner_predicate(builder, layout, lane, warp, extra_lane_mask=0):
    """i1: this thread is the replica that writes (its replica bits are 0), or None when
    the layout has no replicas (and no ``extra_lane_mask``)."""
    lane_mask = layout.replica_lane_mask | extra_lane_mask
    conds = []
    if lane_mask:
        conds.append(builder.icmp_unsigned("==", builder.and_(lane, _c32(lane_mask)), _c32(0)))
    if layout.replica_warp_mask:
        conds.append(builder.icmp_unsigned("==", builder.and_(warp, _c32(layout.replica_warp_mask)),
                                           _c32(0)))
    if not conds:
        return None
    out = conds[0]
    for cond in conds[1:]:
        out = builder.and_(out, cond)
    return out


# -- shared-memory words ---------------------------------------------------------------

def _word_bits(elem_bits, n):
    total = elem_bits * n
    if elem_bits == 64:
        return 64
    return 32 if total >= 32 else 16


def ld_shared(builder, addr, elty, n):
    """``n`` values of LLVM type ``elty`` (integer or float of 16/32/64 bits) at shared
    address ``addr`` (i32, aligned to their total size of 2..16 bytes): one
    ``ld.shared[.v2|.v4].b{16|32|64}``."""
    bits = elty.width if isinstance(elty, ir.IntType) else {"float": 32, "double": 64}[str(elty)]
    if bits * n < 16:                 # one byte: ld.shared.u8 into a 16-bit register
        res = asm(builder, "ld.shared.u8 $0, [$1];", "=h,r", [addr], ret=ir.IntType(16))
        return [builder.trunc(res, elty)]
    wbits = _word_bits(bits, n)
    words = bits * n // wbits
    wty = ir.IntType(wbits)
    vec = "" if words == 1 else f".v{words}"
    regs = ", ".join(f"${k}" for k in range(words))
    text = f"ld.shared{vec}.{_WORD[wbits]} {{{regs}}}, [${words}];" if words > 1 else \
        f"ld.shared.{_WORD[wbits]} $0, [$1];"
    cons = ",".join([f"={_CONSTRAINT[wbits]}"] * words + ["r"])
    ret = outputs_type(builder, wty, words) if words > 1 else wty
    res = asm(builder, text, cons, [addr], ret=ret)
    parts = [builder.extract_value(res, k) for k in range(words)] if words > 1 else [res]
    packed = ir.Constant(ir.VectorType(wty, words), ir.Undefined)
    for k, p in enumerate(parts):
        packed = builder.insert_element(packed, p, _c32(k))
    vals = builder.bitcast(packed, ir.VectorType(elty, n))
    return [builder.extract_element(vals, _c32(k)) for k in range(n)]


def st_shared(builder, addr, values, pred=None):
    """``st.shared[.v2|.v4]`` of ``values`` (one LLVM type) at ``addr``; with ``pred``
    (i1) only where it holds."""
    elty = values[0].type
    n = len(values)
    bits = elty.width if isinstance(elty, ir.IntType) else {"float": 32, "double": 64}[str(elty)]
    if bits * n < 16:                 # one byte: st.shared.u8 from a 16-bit register
        body = "st.shared.u8 [$0], $1;"
        cons, args = ["r", "h"], [addr, builder.zext(values[0], ir.IntType(16))]
        if pred is not None:
            body = "{ .reg .pred ws_p; setp.ne.b32 ws_p, $2, 0; @ws_p " + body + " }"
            cons.append("r")
            args.append(builder.zext(pred, I32))
        asm(builder, body, ",".join(cons + ["~{memory}"]), args)
        return
    wbits = _word_bits(bits, n)
    words = bits * n // wbits
    wty = ir.IntType(wbits)
    vec = ir.Constant(ir.VectorType(elty, n), ir.Undefined)
    for k, v in enumerate(values):
        vec = builder.insert_element(vec, v, _c32(k))
    packed = builder.bitcast(vec, ir.VectorType(wty, words))
    parts = [builder.extract_element(packed, _c32(k)) for k in range(words)]
    vsuffix = "" if words == 1 else f".v{words}"
    regs = ", ".join(f"${k + 1}" for k in range(words))
    body = f"st.shared{vsuffix}.{_WORD[wbits]} [$0], " + (f"{{{regs}}};" if words > 1 else "$1;")
    cons = ["r"] + [_CONSTRAINT[wbits]] * words
    args = [addr] + parts
    if pred is not None:
        body = "{ .reg .pred ws_p; setp.ne.b32 ws_p, $" + str(words + 1) + ", 0; @ws_p " \
            + body + " }"
        cons.append("r")
        args.append(builder.zext(pred, I32))
    asm(builder, body, ",".join(cons + ["~{memory}"]), args)


def group_region_base(context, builder, tid, offset, region_bytes, first_group):
    """Shared address of this warp group's region: ``smem_base + offset + (tid.x / 128 -
    first_group) * region_bytes`` (the layout scratch, the operand buffer)."""
    region = builder.sub(builder.lshr(tid, _c32(7)), _c32(first_group))
    base = emit(sm.smem_base, context, builder, (), ())
    return builder.add(builder.add(base, _c32(offset)),
                       builder.mul(region, _c32(region_bytes)))


def group_sync(builder, tid):
    """``bar.sync 1 + tid.x / 128, 128``: the 128 threads of this warp group."""
    barrier = builder.add(builder.lshr(tid, _c32(7)), _c32(1))
    asm(builder, "bar.sync $0, 128;", "r,~{memory}", [barrier])


def _coords(builder, layout, i, tr, tc):
    r, c = layout.regs[i]
    return builder.add(tr, _c32(r)), builder.add(tc, _c32(c))


# -- fill ------------------------------------------------------------------------------

@intrinsic
def gpu_tile_fill(typingctx, value, shape, dtype, layout):
    """``ws.zeros`` / ``ws.full`` in registers: every register of ``layout`` holds
    ``value`` cast to ``dtype``. The accumulator layout goes through
    ``tile_ops.gpu_frag_full`` (values pinned, see there)."""
    dims = literal_shape(shape, "gpu_tile_fill(shape)")
    if not isinstance(dtype, DTypeType):
        raise TypingError(f"gpu_tile_fill(dtype) must be a ws dtype, got {dtype}")
    ly = _layout(layout, "gpu_tile_fill")
    resty = FragType(dtype.dtype, dims, ly)
    sig = signature(resty, value, shape, dtype, layout)
    pinned = len(dims) == 2 and lay.fits_acc(dims) and dims[1] > 1 and ly == lay.acc(*dims)

    def codegen(context, builder, sig, args):
        if pinned:
            from .tile_ops import gpu_frag_full
            return emit(gpu_frag_full, context, builder, sig.args[:3], args[:3])
        v = cast(context, builder, args[0], sig.args[0], resty.dtype)
        return _pack(context, builder, resty, [v] * resty.count)

    return sig, codegen


# -- shared memory -> registers ----------------------------------------------------------

@intrinsic
def gpu_smem_load(typingctx, view, layout):
    """A shared-memory tile (a slot part, possibly a ``trans`` view) read into registers
    in ``layout``. Per run of consecutive columns (non-transposed views), one
    ``ld.shared.v{1,2,4}.b{16,32,64}`` at ``codegen.swizzle.part_offset`` of the stored
    element; transposed views read element by element, then ``bar.warp.sync -1``. The
    caller orders it after the slot's ConsumerWait and before its release (volatile
    asm). Minimum sm_70."""
    if not isinstance(view, SmemTileType):
        raise TypingError(f"gpu_smem_load expects a shared-memory tile, got {view}")
    ly = _layout(layout, "gpu_smem_load")
    if ly.shape != lay.shape2d(view.shape):
        raise TypingError(f"gpu_smem_load: layout {ly.name} does not fit {view}")
    resty = FragType(view.dtype, view.shape, ly)
    sig = signature(resty, view, layout)
    from .tile_ops import part_layout
    rows_p, _, box_cols, xor = part_layout(view)
    transposed = view.layout[2]
    itemsize = _bits(view.dtype) // 8

    def codegen(context, builder, sig, args):
        boolean = view.dtype == types.boolean    # bytes in memory, i1 in registers
        elty = ir.IntType(8) if boolean else context.get_value_type(view.dtype)
        _, lane, warp = thread_ids(builder)
        tr, tc = thread_offset(builder, ly, lane, warp)
        out = [None] * ly.count
        for i, n in ly.runs(1 if transposed else 16 // itemsize):
            r, c = _coords(builder, ly, i, tr, tc)
            if transposed:
                r, c = c, r
            off = part_offset(IRInt(builder, r), IRInt(builder, c), rows_p, box_cols,
                              itemsize, xor)
            out[i:i + n] = ld_shared(builder, builder.add(args[0], off.value), elty, n)
        # every lane's reads ordered before lane 0's ConsumerRelease (mbarrier.arrive
        # releases only its own thread's accesses), as the mma.sync dots end
        asm(builder, "bar.warp.sync -1;", "~{memory}")
        if boolean:
            out = [builder.icmp_unsigned("!=", v, ir.Constant(elty, 0)) for v in out]
        return _pack(context, builder, resty, out)

    return sig, codegen


# -- layout conversion -----------------------------------------------------------------

def _broadcast_axis(src_shape, dst_shape):
    """Axis along which a (R, 1) / (1, C) tile stretches onto ``dst_shape`` (None: same)."""
    if src_shape == dst_shape:
        return None
    if src_shape[0] == dst_shape[0] and src_shape[1] == 1:
        return 1
    if src_shape[1] == dst_shape[1] and src_shape[0] == 1:
        return 0
    return "both"


def exchange_bytes(dtype):
    """Bytes one element of ``dtype`` takes in the scratch region: its size, 2 for a
    boolean (``ld.shared`` / ``st.shared`` move 16-bit words at the least)."""
    return 2 if isinstance(dtype, types.Boolean) else _bits(dtype) // 8


def convert_needs_scratch(src, dst):
    """Bytes per element slot a conversion from layout ``src`` to ``dst`` exchanges
    through shared memory: 0 when it is a register selection (equal layouts, or ``src``
    the slice of ``dst`` it broadcasts from), else the number of elements of ``src``."""
    axis = _broadcast_axis(src.shape, dst.shape)
    if axis is None and src == dst:
        return 0
    if axis in (0, 1) and lay.broadcast_index(src, dst, axis) is not None:
        return 0
    return src.shape[0] * src.shape[1]


@intrinsic
def gpu_tile_convert(typingctx, frag, layout, shape, scratch_off, scratch_bytes, first_group):
    """``frag`` in ``layout`` of tile ``shape`` (equal to frag's, or a broadcast of a (R, 1)
    / (1, C) / 1-element tile onto it). A register selection when ``frag``'s layout is
    ``layout`` or its slice; otherwise through the warp group's scratch region: the
    owner of each element stores it (``st.shared``, row-major), ``bar.sync``, every
    thread loads its new elements, ``bar.sync``."""
    if not isinstance(frag, FragType):
        raise TypingError(f"gpu_tile_convert expects a register tile, got {frag}")
    ly = _layout(layout, "gpu_tile_convert")
    dims = literal_shape(shape, "gpu_tile_convert(shape)")
    k = _need_literals("gpu_tile_convert", scratch_off=scratch_off,
                       scratch_bytes=scratch_bytes, first_group=first_group)
    resty = FragType(frag.dtype, dims, ly)
    src = frag.layout
    sig = signature(resty, frag, layout, shape, scratch_off, scratch_bytes, first_group)
    axis = _broadcast_axis(src.shape, ly.shape)
    need = convert_needs_scratch(src, ly)
    itemsize = exchange_bytes(frag.dtype)
    if need and need * itemsize > k["scratch_bytes"]:
        raise TypingError(f"gpu_tile_convert {src.name} -> {ly.name}: {need * itemsize} bytes "
                          f"of scratch needed, {k['scratch_bytes']} reserved (layouts pass bug)")

    def codegen(context, builder, sig, args):
        vals = _elements(builder, args[0], src.count)
        if not need:
            if axis is None:
                return args[0]
            index = lay.broadcast_index(src, ly, axis)
            return _pack(context, builder, resty, [vals[j] for j in index])
        elty = context.get_value_type(frag.dtype)
        boolean = isinstance(frag.dtype, types.Boolean)
        if boolean:                 # i1 registers travel as 16-bit words (issue 15)
            elty = ir.IntType(16)
            vals = [builder.zext(v, elty) for v in vals]
        tid, lane, warp = thread_ids(builder)
        base = group_region_base(context, builder, tid, k["scratch_off"], k["scratch_bytes"],
                             k["first_group"])
        rows, cols = src.shape
        tr, tc = thread_offset(builder, src, lane, warp)
        owner = owner_predicate(builder, src, lane, warp)
        for i, n in src.runs(16 // itemsize):
            r, c = _coords(builder, src, i, tr, tc)
            off = builder.mul(builder.add(builder.mul(r, _c32(cols)), c), _c32(itemsize))
            st_shared(builder, builder.add(base, off), vals[i:i + n], owner)
        group_sync(builder, tid)
        tr, tc = thread_offset(builder, ly, lane, warp)
        out = [None] * ly.count
        step = 16 // itemsize if cols == ly.shape[1] else 1
        for i, n in ly.runs(step):
            r, c = _coords(builder, ly, i, tr, tc)
            r = r if rows == ly.shape[0] else _c32(0)
            c = c if cols == ly.shape[1] else _c32(0)
            off = builder.mul(builder.add(builder.mul(r, _c32(cols)), c), _c32(itemsize))
            out[i:i + n] = ld_shared(builder, builder.add(base, off), elty, n)
        group_sync(builder, tid)
        if boolean:
            out = [builder.icmp_unsigned("!=", v, ir.Constant(elty, 0)) for v in out]
        return _pack(context, builder, resty, out)

    return sig, codegen


# -- transpose ---------------------------------------------------------------------------

@intrinsic
def gpu_tile_trans(typingctx, frag):
    """``ws.trans`` of a 2-D register tile: the same registers in the transposed layout
    (no instructions)."""
    if not isinstance(frag, FragType) or len(frag.shape) != 2:
        raise TypingError(f"gpu_tile_trans expects a 2-D register tile, got {frag}")
    resty = FragType(frag.dtype, frag.shape[::-1], lay.transposed(frag.layout))
    return signature(resty, frag), lambda context, builder, sig, args: args[0]


# -- registers -> global memory ----------------------------------------------------------

def _check_store(array, frag):
    if not isinstance(array, types.Array) or not isinstance(frag, FragType) \
            or array.ndim != len(frag.shape) or array.ndim not in (1, 2):
        raise TypingError(f"store on the GPU needs a 1-D or 2-D array and a register tile of "
                          f"the same rank, got {array}, {frag}")


@intrinsic
def gpu_tile_store(typingctx, array, offsets, frag):
    """Store a register tile (any layout) at ``offsets`` of a 1-D or 2-D array, values
    cast to the array's dtype; elements outside the array are skipped, and replicas do
    not store (:func:`owner_predicate`).

    Fast path (the tile wholly inside a row-contiguous array whose tile base and row
    stride are aligned to the vector width): one ``st.global`` of up to 16 bytes per run
    of consecutive columns. Otherwise one bounds-checked scalar store per element (row
    and column tests made once per distinct offset)."""
    _check_store(array, frag)
    sig = signature(types.none, array, offsets, frag)

    def codegen(context, builder, sig, args):
        return _store_tile(context, builder, sig, args, None)

    return sig, codegen


@intrinsic
def gpu_tile_store_masked(typingctx, array, offsets, frag, mask):
    """``ws.store(array, offsets, tile, mask)`` (issue 15): :func:`gpu_tile_store` with
    each store also predicated on its element of ``mask`` -- a boolean register tile in
    ``frag``'s layout or a vector in its slice (the layouts pass arranges that). A warp
    whose mask holds everywhere (``vote.sync.all``) takes the vector path, the others
    the bounds-checked one. Any layout (the accumulator's goes to
    ``epilogue.gpu_frag_store_masked``)."""
    _check_store(array, frag)
    if not isinstance(mask, FragType) or not isinstance(mask.dtype, types.Boolean):
        raise TypingError(f"store(mask) on the GPU must be a boolean register tile, got {mask}")
    from .frag_math import broadcast_axis
    if mask.layout != frag.layout and broadcast_axis(mask, frag) is None:
        raise TypingError(f"store(mask) on the GPU: {mask} is not in the layout of {frag} "
                          "(a layouts pass bug)")
    sig = signature(types.none, array, offsets, frag, mask)

    def codegen(context, builder, sig, args):
        from .frag_math import frag_values
        keep = frag_values(context, builder, mask, args[3],
                           FragType(types.boolean, frag.shape, frag.layout))
        return _store_tile(context, builder, sig, args, keep)

    return sig, codegen


class TileTarget:
    """Where the elements of a register tile written to an array go (``ws.store``,
    ``ws.atomic_add``): the array's (rows, cols) ``shape`` and ``strides`` (bytes, i64; a
    1-D array as one row), the tile's ``offs``, this thread's first element ``row0`` /
    ``col0``, the replica predicate ``owner`` (None: no replicas), the base ``data``
    address and ``vals``, the registers cast to the array's dtype."""

    def __init__(self, context, builder, sig, args):
        array, frag = sig.args[0], sig.args[2]
        ly, ndim = frag.layout, array.ndim
        ary = context.make_array(array)(context, builder, args[0])
        shape = cgutils.unpack_tuple(builder, ary.shape, ndim)
        strides = cgutils.unpack_tuple(builder, ary.strides, ndim)
        offs = [context.cast(builder, v, t, types.int64)
                for v, t in zip(cgutils.unpack_tuple(builder, args[1], ndim),
                                sig.args[1].types)]
        if ndim == 1:   # a 1-D tile is the (1, N) layout: row 0 always
            shape, strides, offs = [_c64(1)] + shape, [_c64(0)] + strides, [_c64(0)] + offs
        self.shape, self.strides, self.offs = shape, strides, offs
        self.vals = [cast(context, builder, v, frag.dtype, array.dtype)
                     for v in _elements(builder, args[2], ly.count)]
        _, lane, warp = thread_ids(builder)
        tr, tc = thread_offset(builder, ly, lane, warp)
        self.owner = owner_predicate(builder, ly, lane, warp)
        self.row0 = builder.add(offs[0], builder.sext(tr, I64))
        self.col0 = builder.add(offs[1], builder.sext(tc, I64))
        self.data = builder.ptrtoint(ary.data, I64)


def _store_tile(context, builder, sig, args, keep):
    """The body of :func:`gpu_tile_store` (``keep`` None) and of
    :func:`gpu_tile_store_masked` (``keep``: one i1 per register)."""
    array, frag = sig.args[0], sig.args[2]
    ly = frag.layout
    t = TileTarget(context, builder, sig, args)
    shape, strides, offs, data = t.shape, t.strides, t.offs, t.data
    elty = context.get_data_type(array.dtype)
    size = context.get_abi_sizeof(elty)
    vals = t.vals
    if array.dtype == types.boolean:
        vals = [builder.zext(v, elty) for v in vals]
    row0, col0, owner = t.row0, t.col0, t.owner
    st = _Stores(builder, data, strides, row0, col0, shape, elty, size, vals, ly, owner)
    rows, cols = ly.shape
    vec = max(1, min(16 // size, max(n for _, n in ly.runs(16 // size))))
    inside = builder.and_(
        builder.and_(builder.icmp_signed(">=", offs[0], _c64(0)),
                     builder.icmp_signed(">=", offs[1], _c64(0))),
        builder.and_(builder.icmp_signed("<=", builder.add(offs[0], _c64(rows)), shape[0]),
                     builder.icmp_signed("<=", builder.add(offs[1], _c64(cols)), shape[1])))
    contiguous = builder.icmp_signed("==", strides[1], _c64(size))
    tile_base = builder.add(data, builder.add(builder.mul(offs[0], strides[0]),
                                              builder.mul(offs[1], _c64(size))))
    mask = _c64(vec * size - 1)
    aligned = builder.icmp_unsigned("==", builder.and_(builder.or_(tile_base, strides[0]),
                                                       mask), _c64(0))
    fast = builder.and_(builder.and_(inside, contiguous), aligned)
    if keep is not None:   # a warp whose mask holds everywhere stores as if unmasked
        fast = builder.and_(fast, vote_all(builder, all_of(builder, keep)))
    with builder.if_else(fast, likely=True) as (whole, edge):
        with whole:
            st.vector(vec)
        with edge:
            st.checked(keep)
    return context.get_dummy_value()


class _Stores:
    """The addressing of one gpu_tile_store: a method per path (see there)."""

    def __init__(self, builder, data, strides, row0, col0, shape, elty, size, vals, layout,
                 owner):
        self.b, self.data, self.strides, self.row0, self.col0 = builder, data, strides, row0, col0
        self.shape, self.elty, self.size, self.vals, self.ly = shape, elty, size, vals, layout
        self.owner = owner

    def _guard(self, cond):
        if self.owner is None:
            return cond
        return self.owner if cond is None else self.b.and_(cond, self.owner)

    def vector(self, vec):
        b = self.b
        base = b.add(self.data, b.add(b.mul(self.row0, self.strides[0]),
                                      b.mul(self.col0, _c64(self.size))))
        rows = {}
        for i, n in self.ly.runs(vec):
            r, c = self.ly.regs[i]
            if r not in rows:
                rows[r] = b.add(base, b.mul(_c64(r), self.strides[0]))
            addr = b.add(rows[r], _c64(c * self.size))
            if n == 1:
                value, ptr_ty = self.vals[i], self.elty.as_pointer(1)
            else:
                vty = ir.VectorType(self.elty, n)
                value = ir.Constant(vty, ir.Undefined)
                for k in range(n):
                    value = b.insert_element(value, self.vals[i + k], _c32(k))
                ptr_ty = vty.as_pointer(1)
            guard = self._guard(None)
            if guard is None:
                b.store(value, b.inttoptr(addr, ptr_ty), align=n * self.size)
            else:
                with b.if_then(guard, likely=True):
                    b.store(value, b.inttoptr(addr, ptr_ty), align=n * self.size)

    def checked(self, keep=None):
        """One bounds-checked scalar store per register; with ``keep`` (i1 per register,
        a store mask) only where it holds too."""
        b, cache = self.b, {}

        def once(key, make):
            if key not in cache:
                cache[key] = make()
            return cache[key]

        def in_range(v, n):
            return b.and_(b.icmp_signed(">=", v, _c64(0)), b.icmp_signed("<", v, n))

        for i in range(self.ly.count):
            r, c = self.ly.regs[i]
            row_ok = once(("r", r), lambda: in_range(b.add(self.row0, _c64(r)), self.shape[0]))
            col_ok = once(("c", c), lambda: in_range(b.add(self.col0, _c64(c)), self.shape[1]))
            row_at = once(("ra", r), lambda: b.add(self.data, b.mul(b.add(self.row0, _c64(r)),
                                                                    self.strides[0])))
            col_at = once(("ca", c), lambda: b.mul(b.add(self.col0, _c64(c)), self.strides[1]))
            ok = self._guard(b.and_(row_ok, col_ok))
            if keep is not None:
                ok = b.and_(ok, keep[i])
            addr = b.add(row_at, col_at)
            with b.if_then(ok, likely=True):
                b.store(self.vals[i], b.inttoptr(addr, self.elty.as_pointer(1)))
