"""GPU lowering of a load that neither TMA nor cp.async can read: predicated ``ld.global``.

The path for any 1-D or 2-D array: row pitch no multiple of 4 bytes (fp16 with an odd
number of columns, int8 / bool arrays), no contiguous dimension (``x[:, ::2]``), negative
strides (``x[::-1]``, ``x[:, ::-1]``), or a ``ws.dot`` operand in a swizzle cp.async does
not write. The 128 producer threads copy one tile part (rows, cols as stored; a 1-D
array is the (1, N) view, a column-major one its transposed view, as for cp.async) into
the slot in the layout lower_loads chose (``codegen.swizzle.part_offset``: swizzled for a
dot operand, plain or swizzled rows for element-wise tiles), so consumers read it as if
TMA had written it. Elements outside the array (either side) are stored as 0.

Pieces: ``P`` bytes (a power of two, ``itemsize <= P <= 16``), the widest the array's
``vec`` (``runtime.specialize.array_info``: base and row stride alignment along the
contiguous dimension) allows and the rows need. ``vec == 0`` (no contiguous dimension):
one element per piece at ``data + row * stride_row + col * stride_col`` with the array's
run-time strides, any sign. With ``P`` wider than an element the column offset must be a
multiple of ``P / itemsize`` at run time; when it is not, the part is copied element by
element instead. A piece partly past the right edge is loaded element by element.

Each thread takes pieces ``tid, tid + 128, ...`` (consecutive threads read consecutive
pieces of a row: coalesced) in batches of up to :data:`BATCH` predicated loads issued
back to back before their stores, so that that many loads are in flight per thread.
PTX (any sm): ``@p ld.global.{u8|b16|b32|b64|v2.b64}`` (``p`` false: the register keeps
0) and ``@p st.shared.*``.

Protocol (as for cp.async, ``cp_async_ops``): every producer thread waits for
empty[slot], copies, then :func:`gpu_ldg_commit`: ``fence.proxy.async.shared::cta``
(sm_90: wgmma reads the slot through the async proxy; the stores went through the
generic one) and an arrive on full[slot] (release), which expects 128 arrivals. A
channel whose other members use cp.async commits with ``gpu_cp_async_commit`` instead
(it waits for the cp.async copies too).
"""
from llvmlite import ir

from numba.cuda import cgutils, types
from numba.cuda.core.errors import TypingError
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from . import mbarrier as mb
from . import smem as sm
from .channel_ops import _bar, _need_literals, emit
from .cp_async_ops import PRODUCER_THREADS
from .swizzle import part_offset
from ._util import I1, I32, I64, IRInt, asm, outputs_type

#: Piece widths in bytes, widest first.
PIECES = (16, 8, 4, 2, 1)
#: Loads a thread issues before it stores them (memory-level parallelism per thread).
BATCH = 16

#: piece bytes -> (PTX type, LLVM register type, inline-asm constraint, registers)
_KINDS = {1: ("u8", ir.IntType(16), "h", 1), 2: ("b16", ir.IntType(16), "h", 1),
          4: ("b32", I32, "r", 1), 8: ("b64", I64, "l", 1), 16: ("v2.b64", I64, "l", 2)}


def _c32(v):
    return ir.Constant(I32, v)


def _c64(v):
    return ir.Constant(I64, v)


def element_bytes(dtype):
    """Bytes of one array element (numba's boolean is one byte in arrays)."""
    return 1 if isinstance(dtype, types.Boolean) else dtype.bitwidth // 8


def piece_bytes(vec, cols, itemsize):
    """Bytes per piece of a part with ``cols`` columns of ``itemsize``-byte elements from
    an array whose contiguous rows allow ``vec``-byte pieces (0: no contiguous dimension,
    one element per piece): the widest power of two up to 16 that ``vec`` allows, no wider
    than the row's bytes rounded up to a power of two, and never below one element."""
    need = 1 << max(0, (cols * itemsize - 1).bit_length())
    return next((p for p in PIECES if p <= vec and p <= need and p >= itemsize), itemsize)


def _always(ok):
    return isinstance(ok, ir.Constant) and ok.constant == 1


def _pred_load(builder, piece, ok, src):
    """``piece`` bytes from global ``src`` (i64) when ``ok`` (i1), else 0: a list of
    register values (two i64 for 16 bytes)."""
    kind, llty, reg, n = _KINDS[piece]
    outs = ",".join([f"={reg}"] * n)
    dst = "{" + ", ".join(f"${i}" for i in range(n)) + "}" if n > 1 else "$0"
    zero = " ".join(f"mov.b{llty.width} ${i}, 0;" for i in range(n))
    text = (f"{{ .reg .pred p; setp.ne.b32 p, ${n + 1}, 0; {zero} "
            f"@p ld.global.{kind} {dst}, [${n}]; }}")
    ret = llty if n == 1 else outputs_type(builder, llty, n)
    res = asm(builder, text, f"{outs},l,r", [src, builder.zext(ok, I32)], ret=ret)
    return [res] if n == 1 else [builder.extract_value(res, i) for i in range(n)]


def _pred_store(builder, piece, ok, dst, values):
    """``st.shared`` of ``values`` (from :func:`_pred_load`) at ``dst`` (i32) when ``ok``
    (a constant true ``ok``: no predicate)."""
    kind, _, reg, n = _KINDS[piece]
    src = "{" + ", ".join(f"${i + 1}" for i in range(n)) + "}" if n > 1 else "$1"
    regs = "r," + ",".join([reg] * n)
    if _always(ok):
        asm(builder, f"st.shared.{kind} [$0], {src};", regs + ",~{memory}",
            [dst] + list(values))
        return
    text = (f"{{ .reg .pred p; setp.ne.b32 p, ${n + 1}, 0; "
            f"@p st.shared.{kind} [$0], {src}; }}")
    asm(builder, text, regs + ",r,~{memory}", [dst] + list(values) + [builder.zext(ok, I32)])


class _Part:
    """One part's copy: the array view (``dims``, ``strides`` as i64, row-major view),
    the part's first array element (``r0``, ``c0``), its layout and the slot address."""

    def __init__(self, builder, data, dims, strides, r0, c0, tid, base, layout, cols):
        self.b, self.data, self.dims, self.strides = builder, data, dims, strides
        self.r0, self.c0, self.tid, self.base, self.layout = r0, c0, tid, base, layout
        self.rows, self.cols, self.itemsize = layout[0], cols, layout[2]

    def in_rows(self, grow):
        return self.b.icmp_unsigned("<", grow, self.dims[0])

    def in_cols(self, gcol, n=1):
        """Columns gcol .. gcol + n - 1 inside the array (unsigned: left of 0 is outside)."""
        b = self.b
        inside = b.icmp_unsigned("<", gcol, self.dims[1])
        if n == 1:
            return inside
        return b.and_(inside, b.icmp_unsigned("<=", b.add(gcol, _c64(n)), self.dims[1]))

    def dst(self, r, col):
        """Slot address (i32) of element (r, col) of the part (i32 indices)."""
        rows, box_cols, itemsize, xor = self.layout
        off = part_offset(IRInt(self.b, r), IRInt(self.b, col), rows, box_cols, itemsize, xor)
        return self.b.add(self.base, off.value)

    def src(self, grow, gcol):
        b = self.b
        return b.add(self.data, b.add(b.mul(grow, self.strides[0]),
                                      b.mul(gcol, self.strides[1])))

    def copy(self, piece):
        """Every piece of the part, ``piece`` bytes each (columns multiples of
        ``piece / itemsize``, ``c0`` too when wider than an element)."""
        b, itemsize = self.b, self.itemsize
        epp = piece // itemsize
        per_row = -(-self.cols // epp)
        total = self.rows * per_row
        count = -(-total // PRODUCER_THREADS)
        batch = min(count, BATCH)
        batches = -(-count // batch)
        guarded = batches * batch * PRODUCER_THREADS != total

        def one_batch(first):
            items = []
            for j in range(batch):
                v = b.add(self.tid, b.mul(b.add(first, _c32(j)), _c32(PRODUCER_THREADS)))
                live = b.icmp_unsigned("<", v, _c32(total)) if guarded else ir.Constant(I1, 1)
                r, col = b.udiv(v, _c32(per_row)), b.mul(b.urem(v, _c32(per_row)), _c32(epp))
                grow = b.add(self.r0, b.zext(r, I64))
                gcol = b.add(self.c0, b.zext(col, I64))
                row_ok = b.and_(live, self.in_rows(grow))
                full = b.and_(row_ok, self.in_cols(gcol, epp))
                values = _pred_load(b, piece, full, self.src(grow, gcol))
                items.append((live, row_ok, full, grow, gcol, self.dst(r, col), values))
            for live, _, _, _, _, dst, values in items:
                _pred_store(b, piece, live, dst, values)
            if epp > 1:   # pieces partly past the right edge: element by element
                for _, row_ok, full, grow, gcol, dst, _ in items:
                    edge = b.and_(b.and_(row_ok, self.in_cols(gcol)), b.not_(full))
                    with b.if_then(edge, likely=False):
                        self._edge(grow, gcol, dst, epp)

        if batches == 1:
            one_batch(_c32(0))
            return
        with cgutils.for_range(b, _c32(batches)) as loop:
            one_batch(b.mul(loop.index, _c32(batch)))

    def _edge(self, grow, gcol, dst, epp):
        """Elements gcol .. gcol + epp - 1 of row grow one by one: those inside the array
        (the piece's zeros are stored already)."""
        b, itemsize = self.b, self.itemsize
        for e in range(epp):
            col = b.add(gcol, _c64(e))
            ok = self.in_cols(col)
            values = _pred_load(b, itemsize, ok, self.src(grow, col))
            _pred_store(b, itemsize, ok, b.add(dst, _c32(e * itemsize)), values)


@intrinsic
def gpu_ldg_copy(typingctx, dst_off, slot_bytes, slot, array, row, col, shape, vec,
                 transposed, phys_cols, box_cols, xor):
    """The producer group copies the part at (row, col) of a 1-D or 2-D array (any
    strides) into the slot with predicated ``ld.global`` / ``st.shared``: ``shape`` (rows,
    cols) as stored, ``phys_cols`` / ``box_cols`` / ``xor`` its layout (``part_offset``),
    ``vec`` the array's piece alignment (0: no contiguous dimension), all literals. With
    ``transposed`` (literal bool) of the array's transposed view (a column-major array);
    a 1-D array is the (1, N) view (``row`` 0). See the module docstring."""
    k = _need_literals("gpu_ldg_copy", dst_off=dst_off, slot_bytes=slot_bytes, vec=vec,
                       transposed=transposed, phys_cols=phys_cols, box_cols=box_cols,
                       xor=xor)
    if not isinstance(array, types.Array) or array.ndim not in (1, 2):
        raise TypingError(f"ld.global lowering takes a 1-D or 2-D array, got {array}")
    if array.ndim == 1 and k["transposed"]:
        raise TypingError("ld.global lowering: a 1-D array has no transposed view")
    rows, cols = (t.literal_value for t in shape.types)
    itemsize = element_bytes(array.dtype)
    if itemsize not in (1, 2, 4, 8) or k["vec"] not in PIECES + (0,) or \
            0 < k["vec"] < itemsize:
        raise TypingError(f"ld.global lowering: {k['vec']}-byte aligned rows of "
                          f"{itemsize}-byte elements")
    if cols > k["phys_cols"]:
        raise TypingError(f"ld.global lowering: {cols} columns in rows of {k['phys_cols']}")
    sig = signature(types.none, dst_off, slot_bytes, slot, array, row, col, shape, vec,
                    transposed, phys_cols, box_cols, xor)
    view = (1, 0) if k["transposed"] else (0, 1)
    piece = piece_bytes(k["vec"], cols, itemsize)

    def codegen(context, builder, sig, args):
        ary = context.make_array(array)(context, builder, args[3])
        if array.ndim == 2:
            shp = cgutils.unpack_tuple(builder, ary.shape, 2)
            std = cgutils.unpack_tuple(builder, ary.strides, 2)
            dims, strides = [shp[d] for d in view], [std[d] for d in view]
        else:
            dims = [_c64(1), cgutils.unpack_tuple(builder, ary.shape, 1)[0]]
            strides = [_c64(0), cgutils.unpack_tuple(builder, ary.strides, 1)[0]]
        if k["vec"]:   # the view's rows are contiguous (array_info): a constant stride
            strides[1] = _c64(itemsize)
        r0 = context.cast(builder, args[4], sig.args[4], types.int64)
        c0 = context.cast(builder, args[5], sig.args[5], types.int64)
        tid = emit(sm.thread_in_group, context, builder, (), ())
        s = context.cast(builder, args[2], sig.args[2], types.uint32)
        base = builder.add(builder.add(emit(sm.smem_base, context, builder, (), ()),
                                       _c32(k["dst_off"])), builder.mul(s, _c32(k["slot_bytes"])))
        layout = (rows, k["box_cols"], itemsize, bool(k["xor"]))
        part = _Part(builder, builder.ptrtoint(ary.data, I64), dims, strides, r0, c0, tid,
                     base, layout, cols)
        epp = piece // itemsize
        if epp == 1:
            part.copy(piece)
            return context.get_dummy_value()
        aligned = builder.icmp_unsigned("==", builder.and_(c0, _c64(epp - 1)), _c64(0))
        with builder.if_else(aligned, likely=True) as (fast, slow):
            with fast:
                part.copy(piece)
            with slow:
                part.copy(itemsize)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def gpu_ldg_commit(typingctx, full_off, slot, arch):
    """ProducerCommit (ld.global): fence this thread's ``st.shared`` for the async proxy
    (sm_90 and up: wgmma reads the slot; below, ldmatrix / ld.shared read it through the
    generic proxy and no fence is needed or exists), then arrive on full[slot] (release;
    128 arrivals complete the phase). ``arch``: literal 10 * major + minor."""
    k = _need_literals("gpu_ldg_commit", full_off=full_off, arch=arch)
    sig = signature(types.none, full_off, slot, arch)

    def codegen(context, builder, sig, args):
        if k["arch"] >= 90:
            emit(sm.fence_proxy_async_shared, context, builder, (), ())
        full = _bar(context, builder, k["full_off"], sig.args[1], args[1])
        emit(mb.mbarrier_arrive, context, builder, (types.uint32,), (full,))
        return context.get_dummy_value()

    return sig, codegen
