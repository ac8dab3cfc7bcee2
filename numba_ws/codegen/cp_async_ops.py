"""GPU lowering of a channel whose loads TMA cannot do: cp.async into the slot's layout.

The 128 producer threads copy one tile part (rows, cols as stored: a 1-D tile is one
row of a (1, N) view) in pieces of ``P`` bytes (16, 8 or 4: what the array's base and
row stride allow, no wider than the tile's rows need) into the layout lower_loads chose
(``codegen.swizzle.part_offset(row, col, rows, box_cols, itemsize, xor)``: the tensor
cores' swizzle, another swizzle or plain rows of ``phys_cols`` elements), so consumers
read it as if TMA had written it. Elements past the array's edge (either side) are
zero-filled: ``src_size`` < ``P`` (0 for a piece wholly outside).

Two forms:
- a ``ws.dot`` operand in the 128-byte swizzle whose pieces 128 threads divide: each
  thread copies ``pieces / 128`` pieces, unrolled (the GEMM kernels' copy; its column
  offsets are block offsets, multiples of the piece);
- any other part: a loop over the pieces with a bounds check (a (1, 8) fp32 part is two
  16-byte pieces: threads 0 and 1). The piece's source must be ``P``-aligned, which the
  column offset decides at run time: when it is not a multiple of ``P / itemsize``
  elements, the part is copied element by element instead (``ld.global`` then
  ``st.shared``, 0 outside the array). Columns between ``cols`` and ``phys_cols`` that no
  piece covers are left unwritten (consumers do not read them).

Protocol: every producer thread waits for empty[slot] (parity phase ^ 1), issues its
copies, then ``cp.async.wait_all``, ``fence.proxy.async.shared::cta`` (sm_90 only: the
copies were made through the generic proxy and wgmma reads through the async proxy;
the sm_80 consumers read with ldmatrix / ld.shared, generic proxy too) and arrives on
full[slot] (release; it orders the element path's ``st.shared`` too), which therefore
expects 128 arrivals. PTX (sm_80): ``cp.async.cg.shared.global [dst], [src], 16, n;`` or
``cp.async.ca.shared.global [dst], [src], {8|4}, n;``.
"""
from llvmlite import ir

from numba.cuda import cgutils, types
from numba.cuda.core.errors import TypingError
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from . import mbarrier as mb
from . import smem as sm
from .channel_ops import _bar, _need_literals, emit
from ._util import I32, I64, IRInt, asm
from .swizzle import SWIZZLE_BYTES, part_offset, swizzled_offset

PRODUCER_THREADS = 128
PIECES = (16, 8, 4)


def _c32(v):
    return ir.Constant(I32, v)


def _c64(v):
    return ir.Constant(I64, v)


@intrinsic
def gpu_cp_async_acquire(typingctx, empty_off, slot, phase, arch):
    """Every producer thread waits for empty[slot] with parity ``phase ^ 1``
    (``arch``: literal 10 * major + minor, picks try_wait or test_wait)."""
    k = _need_literals("gpu_cp_async_acquire", empty_off=empty_off, arch=arch)
    sig = signature(types.none, empty_off, slot, phase, arch)

    def codegen(context, builder, sig, args):
        empty = _bar(context, builder, k["empty_off"], sig.args[1], args[1])
        ph = builder.xor(context.cast(builder, args[2], sig.args[2], types.uint32), _c32(1))
        emit(mb.wait_for(k["arch"]), context, builder, (types.uint32, types.uint32),
             (empty, ph))
        return context.get_dummy_value()

    return sig, codegen


def piece_bytes(vec, cols, itemsize):
    """Bytes per cp.async piece of a part with ``cols`` columns: the array's ``vec``, but
    no more than its rows need (at least 4: a narrow row's piece covers extra columns)."""
    need = max(PIECES[-1], cols * itemsize)
    return next(p for p in PIECES if p <= vec and (p <= need or p == PIECES[-1]))


def _thread_loop(builder, tid, total, body):
    """``body(v)`` for v = tid, tid + 128, ... below ``total`` (a host int)."""
    count = -(-total // PRODUCER_THREADS)

    def one(v):
        if total % PRODUCER_THREADS:
            with builder.if_then(builder.icmp_unsigned("<", v, _c64(total))):
                body(v)
        else:
            body(v)

    if count == 1:
        one(tid)
        return
    with cgutils.for_range(builder, _c64(count)) as loop:
        one(builder.add(tid, builder.mul(loop.index, _c64(PRODUCER_THREADS))))


#: itemsize -> (st.shared type, inline-asm register constraint) of the element path
_ST_SHARED = {2: ("b16", "h"), 4: ("b32", "r"), 8: ("b64", "l")}


@intrinsic
def gpu_cp_async_copy(typingctx, dst_off, slot_bytes, slot, array, row, col, shape, vec,
                      transposed, phys_cols, box_cols, xor, operand):
    """The producer group copies the part at (row, col) of a 1-D or 2-D array into the
    slot: ``shape`` (rows, cols) as stored, ``phys_cols`` / ``box_cols`` / ``xor`` its
    layout (``part_offset``), ``vec`` the array's widest piece, all literals. With
    ``transposed`` (literal bool) of the array's transposed view (a column-major array
    read row by row along its contiguous first dimension); a 1-D array is the (1, N)
    view (``row`` 0). ``operand`` (literal bool): a ``ws.dot`` operand (see module doc)."""
    k = _need_literals("gpu_cp_async_copy", dst_off=dst_off, slot_bytes=slot_bytes, vec=vec,
                       transposed=transposed, phys_cols=phys_cols, box_cols=box_cols,
                       xor=xor, operand=operand)
    if not isinstance(array, types.Array) or array.ndim not in (1, 2):
        raise TypingError(f"cp.async lowering takes a 1-D or 2-D array, got {array}")
    if array.ndim == 1 and k["transposed"]:
        raise TypingError("cp.async lowering: a 1-D array has no transposed view")
    rows, cols = (t.literal_value for t in shape.types)
    itemsize = array.dtype.bitwidth // 8
    if k["vec"] not in PIECES or k["vec"] < itemsize or itemsize not in _ST_SHARED:
        raise TypingError(f"cp.async lowering: pieces of {k['vec']} bytes cannot copy "
                          f"{itemsize}-byte elements")
    unrolled = (k["operand"] and k["xor"] and k["box_cols"] * itemsize == SWIZZLE_BYTES
                and k["phys_cols"] == cols
                and rows * cols * itemsize // k["vec"] % PRODUCER_THREADS == 0)
    sig = signature(types.none, dst_off, slot_bytes, slot, array, row, col, shape, vec,
                    transposed, phys_cols, box_cols, xor, operand)
    view = (1, 0) if k["transposed"] else (0, 1)

    def codegen(context, builder, sig, args):
        ary = context.make_array(array)(context, builder, args[3])
        if array.ndim == 2:
            dims = [cgutils.unpack_tuple(builder, ary.shape, 2)[d] for d in view]
            stride0 = cgutils.unpack_tuple(builder, ary.strides, 2)[view[0]]
        else:
            dims, stride0 = [_c64(1), cgutils.unpack_tuple(builder, ary.shape, 1)[0]], _c64(0)
        r0 = context.cast(builder, args[4], sig.args[4], types.int64)
        c0 = context.cast(builder, args[5], sig.args[5], types.int64)
        tid = builder.zext(emit(sm.thread_in_group, context, builder, (), ()), I64)
        s = context.cast(builder, args[2], sig.args[2], types.uint32)
        base = builder.add(builder.add(emit(sm.smem_base, context, builder, (), ()),
                                       _c32(k["dst_off"])), builder.mul(s, _c32(k["slot_bytes"])))
        data = builder.ptrtoint(ary.data, I64)
        if unrolled:
            _copy_operand(builder, k["vec"], rows, cols, itemsize, dims, stride0, r0, c0,
                          tid, base, data)
            return context.get_dummy_value()
        layout = (rows, k["box_cols"], itemsize, bool(k["xor"]))
        piece = piece_bytes(k["vec"], cols, itemsize)
        epp = piece // itemsize
        if epp == 1:   # one element per piece: every column offset is aligned
            _copy_pieces(builder, piece, layout, cols, dims, stride0, r0, c0, tid, base, data)
            return context.get_dummy_value()
        aligned = builder.icmp_unsigned("==", builder.and_(c0, _c64(epp - 1)), _c64(0))
        with builder.if_else(aligned, likely=True) as (fast, slow):
            with fast:
                _copy_pieces(builder, piece, layout, cols, dims, stride0, r0, c0, tid, base,
                             data)
            with slow:
                _copy_elements(builder, layout, cols, dims, stride0, r0, c0, tid, base, data)
        return context.get_dummy_value()

    return sig, codegen


def _copy_operand(builder, vec, rows, cols, itemsize, dims, stride0, r0, c0, tid, base, data):
    """The unrolled copy of a dot operand (128-byte swizzle, pieces a multiple of 128).
    Column offsets are multiples of the piece (offset_align), so a piece lies wholly left
    of column 0 or right of it; pieces outside the array (any side) are zero-filled."""
    nvec = rows * cols * itemsize // vec
    per_row = cols * itemsize // vec
    text = f"cp.async.{'cg' if vec == 16 else 'ca'}.shared.global [$0], [$1], {vec}, $2;"
    epv = vec // itemsize
    for i in range(nvec // PRODUCER_THREADS):
        v = builder.add(tid, _c64(i * PRODUCER_THREADS))
        r = builder.udiv(v, _c64(per_row))
        col = builder.mul(builder.urem(v, _c64(per_row)), _c64(epv))
        grow, gcol = builder.add(r0, r), builder.add(c0, col)
        left = builder.mul(builder.sub(dims[1], gcol), _c64(itemsize))
        nbytes = builder.select(builder.icmp_signed("<", left, _c64(vec)), left, _c64(vec))
        # a row above the array (row offset r0 - 1) is outside too: unsigned compares
        nbytes = builder.select(_inside(builder, dims, grow, gcol), nbytes, _c64(0))
        src = builder.add(data, builder.add(builder.mul(grow, stride0),
                                            builder.mul(gcol, _c64(itemsize))))
        src = builder.select(builder.icmp_signed(">", nbytes, _c64(0)), src, data)
        off = swizzled_offset(IRInt(builder, r), IRInt(builder, col), rows, itemsize)
        dst = builder.add(base, builder.trunc(off.value, I32))
        asm(builder, text, "r,l,r,~{memory}", [dst, src, builder.trunc(nbytes, I32)])


def _inside(builder, dims, grow, gcol):
    """0 <= grow < dims[0] and 0 <= gcol < dims[1] (unsigned compares)."""
    return builder.and_(builder.icmp_unsigned("<", grow, dims[0]),
                        builder.icmp_unsigned("<", gcol, dims[1]))


def _dst(builder, base, layout, r, col):
    rows, box_cols, itemsize, xor = layout
    off = part_offset(IRInt(builder, r), IRInt(builder, col), rows, box_cols, itemsize, xor)
    return builder.add(base, builder.trunc(off.value, I32))


def _copy_pieces(builder, piece, layout, cols, dims, stride0, r0, c0, tid, base, data):
    """Pieces of ``piece`` bytes, ``c0`` a multiple of the piece's elements: a piece lies
    wholly left of column 0 or right of it, and past the right edge is zero-filled."""
    rows, _, itemsize, _ = layout
    per_row = -(-cols * itemsize // piece)
    text = f"cp.async.{'cg' if piece == 16 else 'ca'}.shared.global [$0], [$1], {piece}, $2;"

    def body(v):
        r = builder.udiv(v, _c64(per_row))
        col = builder.mul(builder.urem(v, _c64(per_row)), _c64(piece // itemsize))
        grow, gcol = builder.add(r0, r), builder.add(c0, col)
        left = builder.mul(builder.sub(dims[1], gcol), _c64(itemsize))
        nbytes = builder.select(builder.icmp_signed("<", left, _c64(piece)), left,
                                _c64(piece))
        nbytes = builder.select(_inside(builder, dims, grow, gcol), nbytes, _c64(0))
        src = builder.add(data, builder.add(builder.mul(grow, stride0),
                                            builder.mul(gcol, _c64(itemsize))))
        src = builder.select(builder.icmp_signed(">", nbytes, _c64(0)), src, data)
        asm(builder, text, "r,l,r,~{memory}",
            [_dst(builder, base, layout, r, col), src, builder.trunc(nbytes, I32)])

    _thread_loop(builder, tid, rows * per_row, body)


def _copy_elements(builder, layout, cols, dims, stride0, r0, c0, tid, base, data):
    """Element by element (a column offset that is not piece-aligned): ``ld.global``
    inside the array, 0 outside, ``st.shared`` into the layout."""
    rows, _, itemsize, _ = layout
    kind, reg = _ST_SHARED[itemsize]
    text = f"st.shared.{kind} [$0], $1;"
    elem = ir.IntType(8 * itemsize)

    def store(dst, value):
        asm(builder, text, f"r,{reg},~{{memory}}", [dst, value])

    def body(v):
        r = builder.udiv(v, _c64(cols))
        col = builder.urem(v, _c64(cols))
        grow, gcol = builder.add(r0, r), builder.add(c0, col)
        dst = _dst(builder, base, layout, r, col)
        with builder.if_else(_inside(builder, dims, grow, gcol)) as (inside, outside):
            with inside:
                src = builder.add(data, builder.add(builder.mul(grow, stride0),
                                                    builder.mul(gcol, _c64(itemsize))))
                store(dst, builder.load(builder.inttoptr(src, elem.as_pointer()),
                                        align=itemsize))
            with outside:
                store(dst, ir.Constant(elem, 0))

    _thread_loop(builder, tid, rows * cols, body)


@intrinsic
def gpu_cp_async_commit(typingctx, full_off, slot, arch):
    """ProducerCommit (cp.async): wait for this thread's copies, fence them for the async
    proxy (sm_90 and up: wgmma reads the slot; below, ldmatrix reads it through the
    generic proxy and no fence is needed or exists) and arrive on full[slot] (128
    arrivals complete the phase). ``arch``: literal 10 * major + minor."""
    k = _need_literals("gpu_cp_async_commit", full_off=full_off, arch=arch)
    sig = signature(types.none, full_off, slot, arch)

    def codegen(context, builder, sig, args):
        asm(builder, "cp.async.wait_all;", "~{memory}")
        if k["arch"] >= 90:
            emit(sm.fence_proxy_async_shared, context, builder, (), ())
        full = _bar(context, builder, k["full_off"], sig.args[1], args[1])
        emit(mb.mbarrier_arrive, context, builder, (types.uint32,), (full,))
        return context.get_dummy_value()

    return sig, codegen
