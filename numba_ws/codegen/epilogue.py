"""The epilogue: storing a register fragment (wgmma / mma.sync accumulator layout) to a
2-D global array. Any sm (the 16-byte path uses ``shfl.sync.bfly.b32``, sm_70+).

Register i of block mi of lane l in warp w holds row ``64*mi + 16*w + l//4 +
8*((i//2)%2)``, column ``8*(i//4) + 2*(l%4) + i%2`` (codegen/fragments.py). So a thread
holds, per row it touches, 2-element pairs 8 columns apart, and the four lanes of a quad
hold the four pairs of each 8-column group. Two ways out per kernel, chosen at run time
per tile:

1. the fast path for a tile wholly inside a row-contiguous array:
   - ``wide`` (2-byte dtypes, tile columns a multiple of 32, tile base and row stride
     16-byte aligned): for each row and 32 columns the quad transposes its 4x4 pairs
     (:func:`quad_transpose`: 4 ``shfl.sync.bfly`` and 12 selects), after which lane t
     holds 8 consecutive elements, written by one 16-byte ``st.global.v4.b32``. A warp
     store then covers 8 rows x 64 bytes instead of 8 rows x 16 bytes: a quarter of the
     store instructions (the epilogue is what the persistent GEMM does between tiles, so
     its length shows up directly at small K);
   - ``pairs`` (kernels where ``wide`` does not apply; pair-aligned): one 2-element
     vector store per pair at constant offsets from one base address.
2. ``checked`` (edge tiles, strided or misaligned arrays): one bounds-checked scalar
   store per element; bounds tests and addresses made once per distinct row and column
   offset. Compact rather than fast (it runs for the few tiles on an edge), and without
   local memory: a stack frame slows every CTA launch (measured), whether or not this
   path runs.

A masked store (:func:`gpu_frag_store_masked`) chooses per warp instead: a warp whose
mask holds everywhere (``vote.sync.all``) takes path 1, the others path 2 with the mask
in each predicate.
"""
from llvmlite import ir

from numba.cuda import cgutils, types
from numba.cuda.core.errors import TypingError
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ..language.types import FragType
from . import smem as sm
from . import wgmma
from .channel_ops import emit
from ._util import I32, I64, all_of, shfl_bfly, vote_all
from .convert import cast

_elements = wgmma._unpack


def quad_transpose(x, t_bits, select, shfl_xor):
    """Transpose 4x4 values across the 4 lanes of a quad: lane t's ``x[v]`` ends up as
    lane v's ``y[t]``.

    ``x``: this lane's 4 values; ``t_bits``: (bit 1, bit 0) of the lane's index in its quad
    as booleans; ``select(c, a, b)`` is ``a if c else b``; ``shfl_xor(v, mask)`` returns
    the lane ``lane ^ mask``'s ``v``. Stage ``mask``: lanes exchange the two values whose
    index bit differs from their own lane bit. The NumPy model in the tests and the LLVM
    codegen below run this same function.
    """
    w = list(x)
    for bit, mask in zip(t_bits, (2, 1)):
        out = list(w)
        for m in range(2):
            lo = m if mask == 2 else m << 1       # index with this bit clear
            hi = lo | mask
            recv = shfl_xor(select(bit, w[lo], w[hi]), mask)
            out[hi] = select(bit, w[hi], recv)
            out[lo] = select(bit, recv, w[lo])
        w = out
    return w


def pair_coords(idx, per_block):
    """(row, column) of register pair ``idx`` (registers idx, idx+1) relative to the
    lane's first element (row 16*warp + lane//4, column 2*(lane%4) of the fragment)."""
    mi, i = divmod(idx, per_block)
    return 64 * mi + 8 * ((i >> 1) & 1), 8 * (i >> 2)


def wide_groups(count):
    """The register pairs that one 16-byte store writes after a quad transpose: for every
    16 registers (32 columns x 2 rows), per row half, the pairs of the 4 column groups."""
    for start in range(0, count, 16):
        for half in (0, 1):
            yield [start + 4 * u + 2 * half for u in range(4)]


def _thread_coords(context, builder):
    """(lane, warp-in-group) as i64."""
    lane = emit(sm.lane_id, context, builder, (), ())
    warp = emit(sm.warp_id, context, builder, (), ())
    lane = builder.zext(lane, I64)
    warp = builder.urem(builder.zext(warp, I64), ir.Constant(I64, 4))
    return lane, warp


@intrinsic
def gpu_frag_store(typingctx, array, offsets, frag, wide):
    """Store a fragment at ``offsets`` of a 2-D array; elements past the edge are skipped.
    Values are cast to the array's dtype. See the module docstring for the three paths;
    ``wide`` (a literal bool) allows the 16-byte one."""
    _check_frag_store(array, frag, wide)
    sig = signature(types.none, array, offsets, frag, wide)

    def codegen(context, builder, sig, args):
        _emit_store(context, builder, sig, args, None)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def gpu_frag_store_masked(typingctx, array, offsets, frag, mask, wide):
    """``ws.store(array, offsets, acc, mask)`` for a fragment: :func:`gpu_frag_store`
    with each element also predicated on its element of ``mask`` (a boolean register
    tile in the fragment's layout or a vector in its slice). A warp whose mask is true
    everywhere (``vote.sync.all``) takes the fast path; the others the checked one with
    the mask. The vote keeps the masked epilogue of a full tile (attention's ``o``, rows
    past the sequence end masked) at the unmasked store's cost: 64 scalar stores per
    thread cost attention D128 at S=1024 20 % on the H200 (2026-12-04)."""
    _check_frag_store(array, frag, wide)
    from .frag_math import broadcast_axis
    if not isinstance(mask, FragType) or not isinstance(mask.dtype, types.Boolean) or (
            mask.layout != frag.layout and broadcast_axis(mask, frag) is None):
        raise TypingError(f"store(mask) on the GPU: {mask} is not a boolean register tile "
                          f"in the layout of {frag}")
    sig = signature(types.none, array, offsets, frag, mask, wide)

    def codegen(context, builder, sig, args):
        from .frag_math import frag_values
        keep = frag_values(context, builder, mask, args[3],
                           FragType(types.boolean, frag.shape, frag.layout))
        _emit_store(context, builder, sig, args[:3] + args[4:], keep)
        return context.get_dummy_value()

    return sig, codegen


def check_2d_store(array, frag, what="store on the GPU"):
    """A TypingError unless ``array`` is a 2-D array and ``frag`` a register tile."""
    if not isinstance(array, types.Array) or array.ndim != 2 or not isinstance(frag, FragType):
        raise TypingError(f"{what} needs a 2-D array and a register tile, got "
                          f"{array}, {frag}")


def _check_frag_store(array, frag, wide):
    check_2d_store(array, frag)
    if not isinstance(wide, types.BooleanLiteral):
        raise TypingError(f"gpu_frag_store: wide must be a literal bool, got {wide}")


def _emit_store(context, builder, sig, args, keep, edge=None):
    """The body of both intrinsics: ``args`` = (array, offsets, fragment, wide);
    ``keep``: None, or one i1 per register (a store mask); ``edge``: None, or what
    emits the tiles the fast path cannot take instead of the checked path (the staged
    TMA store of ``staged_store.gpu_frag_store_edge_staged``; the branch is uniform over
    the warp group when there is no mask)."""
    array, frag, allow_wide = sig.args[0], sig.args[2], sig.args[-1].literal_value
    rows, cols = frag.shape
    ary = context.make_array(array)(context, builder, args[0])
    shape = cgutils.unpack_tuple(builder, ary.shape, 2)
    strides = cgutils.unpack_tuple(builder, ary.strides, 2)
    o = cgutils.unpack_tuple(builder, args[1], 2)
    o = [context.cast(builder, v, t, types.int64) for v, t in zip(o, sig.args[1].types)]
    vals = [cast(context, builder, v, frag.dtype, array.dtype)
            for v in _elements(builder, args[2], frag.count)]
    st = _Store(context, builder, builder.ptrtoint(ary.data, I64), array.dtype, shape,
                strides, o, cols // 2, vals)
    zero = ir.Constant(I64, 0)
    inside = builder.and_(
        builder.icmp_signed("<=", builder.add(o[0], ir.Constant(I64, rows)), shape[0]),
        builder.icmp_signed("<=", builder.add(o[1], ir.Constant(I64, cols)), shape[1]))
    # negative offsets too (the GPU fuzzer, 2026-12-03: a tile at column -2 took the
    # fast path and wrote the row before's last columns)
    inside = builder.and_(inside, builder.and_(builder.icmp_signed(">=", o[0], zero),
                                               builder.icmp_signed(">=", o[1], zero)))
    inside = builder.and_(inside, st.contiguous)
    if keep is not None:       # every lane votes before the (warp-uniform) branch
        inside = builder.and_(inside, vote_all(builder, all_of(builder, keep)))
    tile_base = st.address(o[0], o[1])
    # pairs at the tile's own address: an odd column offset is no pair boundary
    pairs_ok = builder.and_(inside, st.aligned(builder.or_(tile_base, strides[0]),
                                               2 * st.itemsize))
    fast, fast_store = pairs_ok, st.pairs
    if allow_wide and st.itemsize == 2 and cols % 32 == 0:
        fast = builder.and_(pairs_ok, st.aligned(builder.or_(tile_base, strides[0]), 16))
        fast_store = st.wide
    with builder.if_else(fast, likely=True) as (whole_tile, other_tile):
        with whole_tile:
            fast_store()
        with other_tile:
            if edge is None:
                st.checked(keep)
            else:
                edge()


class _Store:
    """The values and addressing of one gpu_frag_store; one method per path."""

    def __init__(self, context, builder, data, dtype, shape, strides, offsets, per_block,
                 vals):
        self.b, self.data, self.shape, self.strides = builder, data, shape, strides
        self.per_block, self.vals = per_block, vals
        self.elty = context.get_value_type(dtype)
        self.itemsize = context.get_abi_sizeof(self.elty)
        self.pair_ty = ir.VectorType(self.elty, 2)
        self.contiguous = builder.icmp_signed("==", strides[1], ir.Constant(I64, self.itemsize))
        self.lane, warp = _thread_coords(context, builder)
        self.row0 = builder.add(offsets[0], builder.add(
            builder.mul(warp, ir.Constant(I64, 16)), builder.udiv(self.lane, ir.Constant(I64, 4))))
        self.quad_lane = builder.urem(self.lane, ir.Constant(I64, 4))
        self.col0 = builder.add(offsets[1], builder.mul(self.quad_lane, ir.Constant(I64, 2)))
        self.base = self.address(self.row0, self.col0)       # the lane's first pair
        # after the quad transpose lane t holds columns 8t..8t+7 of each 32-column group
        self.wide_base = self.address(self.row0, builder.add(
            offsets[1], builder.mul(self.quad_lane, ir.Constant(I64, 8))))

    def address(self, r, c):
        b = self.b
        return b.add(self.data, b.add(b.mul(r, self.strides[0]), b.mul(c, self.strides[1])))

    def aligned(self, value, nbytes):
        b = self.b
        return b.icmp_unsigned("==", b.and_(value, ir.Constant(I64, nbytes - 1)),
                               ir.Constant(I64, 0))

    def coords(self, idx):
        return pair_coords(idx, self.per_block)

    def pair_vector(self, idx):
        b = self.b
        vec = ir.Constant(self.pair_ty, ir.Undefined)
        vec = b.insert_element(vec, self.vals[idx], ir.Constant(I32, 0))
        return b.insert_element(vec, self.vals[idx + 1], ir.Constant(I32, 1))

    def _row_bases(self, base):
        cache = {}

        def row_base(dr):
            if dr not in cache:
                cache[dr] = self.b.add(base, self.b.mul(ir.Constant(I64, dr), self.strides[0]))
            return cache[dr]
        return row_base

    def pairs(self):
        b, row_base = self.b, self._row_bases(self.base)
        ptr_ty = ir.PointerType(self.pair_ty, addrspace=1)          # st.global
        for idx in range(0, len(self.vals), 2):
            dr, dc = self.coords(idx)
            addr = b.add(row_base(dr), ir.Constant(I64, dc * self.itemsize))
            b.store(self.pair_vector(idx), b.inttoptr(addr, ptr_ty))

    def wide(self):
        """Per row half and 32 columns: quad transpose, then one 16-byte store per lane."""
        b = self.b
        t_bits = [b.icmp_unsigned("!=", b.and_(self.quad_lane, ir.Constant(I64, m)),
                                  ir.Constant(I64, 0)) for m in (2, 1)]
        row_base = self._row_bases(self.wide_base)
        vec_ty = ir.VectorType(I32, 4)
        ptr_ty = ir.PointerType(vec_ty, addrspace=1)
        for idxs in wide_groups(len(self.vals)):
            packed = [b.bitcast(self.pair_vector(i), I32) for i in idxs]
            out = quad_transpose(packed, t_bits, b.select,
                                 lambda v, mask: shfl_bfly(b, v, mask))
            vec = ir.Constant(vec_ty, ir.Undefined)
            for v, value in enumerate(out):
                vec = b.insert_element(vec, value, ir.Constant(I32, v))
            dr, dc = self.coords(idxs[0])
            addr = b.add(row_base(dr), ir.Constant(I64, dc * self.itemsize))
            b.store(vec, b.inttoptr(addr, ptr_ty))

    def checked(self, keep=None):
        """Edge tiles: one bounds-checked scalar store per element (and, with ``keep``,
        one i1 per register, only where the mask holds). Straight-line code
        without local memory (a stack frame measured 25 % slower for a many-CTA GEMM at
        K = 1024 on the H200, 2026-12-02, though the edge path never ran); the bounds
        tests and addresses are made once per distinct row and column offset, so an
        element costs about three instructions (ptxas predicates the stores)."""
        b = self.b
        c = lambda v: ir.Constant(I64, v)   # noqa: E731
        shape, s1 = self.shape, self.strides[1]
        row_base, cache = self._row_bases(self.base), {}

        def once(key, make):
            if key not in cache:
                cache[key] = make()
            return cache[key]

        # 0 <= index < extent as one unsigned compare (a negative index is huge): tiles
        # at negative offsets (the GPU fuzzer, 2026-12-03) wrapped into the row before
        def row_in(dr):
            return once(("r", dr), lambda: b.icmp_unsigned("<", b.add(self.row0, c(dr)),
                                                           shape[0]))

        def col_in(dc):
            return once(("c", dc), lambda: b.icmp_unsigned("<", b.add(self.col0, c(dc)),
                                                           shape[1]))

        def col_offset(dc):
            return once(("o", dc), lambda: b.mul(c(dc), s1))

        elt_ptr = self.elty.as_pointer()
        for idx in range(len(self.vals)):
            dr, dc = self.coords(idx - idx % 2)
            dc += idx % 2
            inside = b.and_(row_in(dr), col_in(dc))       # all made outside the branches:
            addr = b.add(row_base(dr), col_offset(dc))    # cached values must dominate uses
            if keep is not None:
                inside = b.and_(inside, keep[idx])
            with b.if_then(inside, likely=True):
                b.store(self.vals[idx], b.inttoptr(addr, elt_ptr))
