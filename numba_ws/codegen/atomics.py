"""``ws.atomic_add`` on the GPU for a register tile in any layout (the accumulator's too):
one ``red.global.add`` per element the thread owns, inside the array and, with a mask,
where it holds. Replicas add nothing (``regtile.owner_predicate``).

PTX (``red`` is ``atom`` without a result; relaxed, gpu scope): ``red.global.add.f32``,
``.f64``, ``.s32``, ``.u64`` (int64: two's-complement adds agree), ``.noftz.f16``
(sm_70) and ``.noftz.bf16`` (sm_90). Values are cast to the array's dtype first, as
``ws.store`` casts. The accumulator tile of a 2-byte array with option ``tma_store=1``
takes the bulk path of :mod:`.staged_store` instead (one ``cp.reduce.async.bulk.tensor``
per box).
"""
from llvmlite import ir

from numba.cuda import types
from numba.cuda.core.errors import TypingError
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ..language.types import FragType
from .regtile import TileTarget, _c64
from ._util import asm, literal_int

#: numba dtype -> (PTX type of red.global.add, inline-asm constraint, bits).
RED_TYPES = {types.float16: ("noftz.f16", "h", 16), types.bfloat16: ("noftz.bf16", "h", 16),
             types.float32: ("f32", "f", 32), types.float64: ("f64", "d", 64),
             types.int32: ("s32", "r", 32), types.int64: ("u64", "l", 64)}


def _check(array, frag, arch):
    if not isinstance(array, types.Array) or not isinstance(frag, FragType) \
            or array.ndim != len(frag.shape) or array.ndim not in (1, 2):
        raise TypingError(f"atomic_add on the GPU needs a 1-D or 2-D array and a register "
                          f"tile of the same rank, got {array}, {frag}")
    if array.dtype not in RED_TYPES:
        raise TypingError(f"atomic_add on the GPU: no red.global.add for {array.dtype}")
    if array.dtype == types.bfloat16 and literal_int("gpu_tile_atomic_add", "arch", arch) < 90:
        raise TypingError("atomic_add of bfloat16 needs sm_90 (red.global.add.noftz.bf16)")


@intrinsic
def gpu_tile_atomic_add(typingctx, array, offsets, frag, mask, arch):
    """``ws.atomic_add(array, offsets, frag[, mask])``: ``mask`` a boolean register tile
    in ``frag``'s layout (or a vector in its slice), or None; ``arch`` the literal
    10 * major + minor."""
    _check(array, frag, arch)
    masked = isinstance(mask, FragType)
    if masked and not isinstance(mask.dtype, types.Boolean):
        raise TypingError(f"atomic_add(mask) on the GPU must be a boolean tile, got {mask}")
    sig = signature(types.none, array, offsets, frag, mask, arch)

    def codegen(context, builder, sig, args):
        keep = None
        if masked:
            from .frag_math import frag_values
            keep = frag_values(context, builder, mask, args[3],
                               FragType(types.boolean, frag.shape, frag.layout))
        _emit(context, builder, sig, args, keep)
        return context.get_dummy_value()

    return sig, codegen


def _emit(context, builder, sig, args, keep):
    array, frag = sig.args[0], sig.args[2]
    ly = frag.layout
    ptx_type, constraint, bits = RED_TYPES[array.dtype]
    t = TileTarget(context, builder, sig, args)
    shape, strides, vals, owner, data = t.shape, t.strides, t.vals, t.owner, t.data
    row0, col0 = t.row0, t.col0
    rows, cols = {}, {}

    def row_of(r):       # 0 <= row < extent as one unsigned compare, once per offset
        if r not in rows:
            row = builder.add(row0, _c64(r))
            rows[r] = (builder.icmp_unsigned("<", row, shape[0]),
                       builder.add(data, builder.mul(row, strides[0])))
        return rows[r]

    def col_of(c):
        if c not in cols:
            col = builder.add(col0, _c64(c))
            cols[c] = (builder.icmp_unsigned("<", col, shape[1]), builder.mul(col, strides[1]))
        return cols[c]

    text = f"red.global.add.{ptx_type} [$0], $1;"
    elem_ty = ir.IntType(bits) if constraint in ("h", "r", "l") else None
    for i, value in enumerate(vals):
        r, c = ly.regs[i]
        (row_ok, row_addr), (col_ok, col_off) = row_of(r), col_of(c)
        inside = builder.and_(row_ok, col_ok)
        if owner is not None:
            inside = builder.and_(inside, owner)
        if keep is not None:
            inside = builder.and_(inside, keep[i])
        addr = builder.add(row_addr, col_off)
        if elem_ty is not None and value.type != elem_ty:
            value = builder.bitcast(value, elem_ty)
        with builder.if_then(inside, likely=True):
            asm(builder, text, f"l,{constraint},~{{memory}}", [addr, value])
