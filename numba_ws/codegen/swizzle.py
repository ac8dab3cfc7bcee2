"""Address arithmetic of the 128-byte swizzled shared-memory tiles, in plain Python.

Every function here uses only ``+ * // % ^`` on its arguments, so the same formula runs
on host ints (tests/test_sm80_layout.py models the sm_80 dot with NumPy) and on
:class:`numba_ws.codegen._util.IRInt` values inside an intrinsic's codegen
(cp_async_ops writes the slots with :func:`swizzled_offset`; mma_sync reads them with
:func:`a_offset` / :func:`b_offset`, which return the offset as a host-int part and a
lane part, so that the codegen keeps a few lane registers and immediate offsets).

Layout (what TMA writes with ``CU_TENSOR_MAP_SWIZZLE_128B``, see lower_loads): a 2-D
part of ``rows`` rows is stored in boxes of ``128 / itemsize`` columns, box ``b`` at
``b * rows * 128``; inside a box row ``r`` is at ``r * 128`` and its 16-byte chunk ``c``
is stored at chunk ``c ^ (r % 8)`` (the part is 1024-byte aligned, so ``r % 8`` equals
the address bits 7..9 that the hardware swizzle uses).

ldmatrix (PTX ISA 9.7.14.5.15, ``ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16``):
lane ``l`` gives the address of row ``l % 8`` of 8x8 matrix ``q = l // 8`` (one 16-byte
chunk; ``.x2`` reads the addresses of lanes 0..15 only). :func:`ldmatrix_lane` says which
row and chunk of a 16x16 block of 16-bit elements that is.
"""

SWIZZLE_BYTES = 128
CHUNK_BYTES = 16
#: Swizzle widths (bytes) a TMA-loaded shared-memory part may use, widest first.
TMA_SWIZZLES = (128, 64, 32)


def swizzle_for(row_bytes):
    """The swizzle width of a part whose rows span ``row_bytes``: the widest of 128, 64,
    32 dividing it (each box then holds ``swizzle / itemsize`` columns, its rows
    ``swizzle`` bytes apart), or None. Narrower than 128 only when the rows are not a
    multiple of 128 bytes, e.g. a 128x32 fp16 A tile (BK=32): 64 bytes. Only TMA writes
    the 64 / 32-byte layouts (cp.async and mma.sync use the 128-byte one below)."""
    for swz in TMA_SWIZZLES:
        if row_bytes % swz == 0:
            return swz
    return None


def swizzled_offset(row, col, rows, itemsize):
    """Byte offset of element (row, col) of a part with ``rows`` rows (any row, col)."""
    box_cols = SWIZZLE_BYTES // itemsize
    box = col // box_cols
    byte = (col % box_cols) * itemsize
    chunk = (byte // CHUNK_BYTES) ^ (row % 8)
    return box * (rows * SWIZZLE_BYTES) + row * SWIZZLE_BYTES + chunk * CHUNK_BYTES \
        + byte % CHUNK_BYTES


def part_offset(row, col, rows, box_cols, itemsize, xor):
    """Byte offset of element (row, col) of a slot part of ``rows`` rows stored in boxes of
    ``box_cols`` columns (box ``b`` at ``b * rows * pitch``, row ``r`` of a box at ``r *
    pitch``, ``pitch = box_cols * itemsize``), as TMA / cp.async write it.

    With ``xor`` (the 128 / 64 / 32-byte swizzle that TMA's ``CU_TENSOR_MAP_SWIZZLE_*B``
    writes and wgmma reads, ``pitch`` = 128 / 64 / 32): the 16-byte chunk bits 4.. of the
    offset are XORed with its bits 7.. (``pitch / 16`` values), i.e. CuTe's
    ``Swizzle<3,4,3>`` / ``<2,4,3>`` / ``<1,4,3>``; valid because parts are 1024-byte
    aligned. Without (plain rows, for tiles only element-wise code reads): no XOR.
    Equals :func:`swizzled_offset` for ``pitch`` = 128 with ``xor``. Only ``+ * // % ^``:
    runs on host ints and on :class:`~numba_ws.codegen._util.IRInt`.
    """
    pitch = box_cols * itemsize
    off = (col // box_cols) * (rows * pitch) + row * pitch + (col % box_cols) * itemsize
    if xor:
        off = off ^ ((off // 128) % (pitch // CHUNK_BYTES)) * CHUNK_BYTES
    return off



def wgmma_operand_fields(rows, cols, transposed, itemsize, k16, row_block, is_a):
    """(start offset, LBO, SBO, swizzle bytes, imm-trans) of a wgmma operand read from a
    part stored as :func:`part_offset` lays it out with ``xor`` (``rows`` x ``cols``
    physical, boxes of ``swizzle / itemsize`` columns, ``swizzle = swizzle_for(cols *
    itemsize)``, which must not be None): 64 rows ``64 * row_block..`` of A, or the whole
    N of B, at K step ``k16`` (32 bytes of K: ``k16`` of 16 fp16 / bf16 or 8 tf32
    elements). ``transposed`` is the tile's ``trans()`` view; K-major (imm-trans 0) is A
    not transposed / B transposed. MN-major needs 16-bit elements (wgmma has no
    transpose for tf32).

    K-major: row ``r`` at ``r * swizzle`` bytes (SBO = 8 rows), the 32 bytes of the step
    inside its box (LBO unused, 16). MN-major: K row ``r`` of a box at ``r * swizzle``
    (SBO = 8 K rows, a step 16 K rows), LBO = the next box of ``swizzle / itemsize`` MN
    columns; A's row block starts ``64 / box columns`` boxes on. Checked against the
    canonical layouts of PTX ISA 9.7.15.5.1.2 in tests/test_wgmma_operand_layout.py.
    """
    swz = swizzle_for(cols * itemsize)
    box_elems = swz // itemsize
    k_major = (not transposed) if is_a else transposed
    if not k_major and itemsize != 2:
        raise ValueError(f"an MN-major wgmma operand needs 16-bit elements, not {itemsize}-byte")
    if k_major:
        k = (32 // itemsize) * k16
        off = (k // box_elems) * rows * swz + (k % box_elems) * itemsize + row_block * 64 * swz
        return off, 16, 8 * swz, swz, 0
    off = 16 * k16 * swz + (row_block * (64 // box_elems) * rows * swz if is_a else 0)
    return off, rows * swz, 8 * swz, swz, 1

def ldmatrix_lane(lane, split):
    """(row 0..15, chunk 0..1) of a 16x16 block that ``lane`` addresses for ldmatrix.x4.

    Matrix ``q = lane // 8``, its row ``lane % 8``. ``split='rows'``: matrices 0, 1, 2, 3
    are (rows 0-7, chunk 0), (rows 8-15, chunk 0), (rows 0-7, chunk 1), (rows 8-15,
    chunk 1). ``split='cols'``: (0-7, 0), (0-7, 1), (8-15, 0), (8-15, 1).
    """
    q = lane // 8
    if split == "rows":
        return lane % 8 + 8 * (q % 2), q // 2
    return lane % 8 + 8 * (q // 2), q % 2


def block_offset(r0, c0, row, chunk, rows, itemsize):
    """(fixed, lane part) of the offset of chunk ``chunk`` (0/1) of row ``r0 + row`` from
    column ``c0`` on; the offset is their sum.

    ``r0``, ``c0`` are host ints: ``r0 % 8 == 0`` and ``c0`` starts a 16-byte chunk, so
    ``(r0 + row) % 8 == row % 8``; the lane part depends on (``row``, ``chunk``), which
    may be run-time values, and on ``c0`` only through its chunk. The sum equals
    ``swizzled_offset(r0 + row, c0 + 8 * chunk)`` (16-bit elements) when ``chunk`` is 0
    or ``c0``'s chunk is even (no carry out of the XOR). The split lets codegen put
    ``fixed`` in the instruction's immediate (``[addr+fixed]``) and share a few lane
    parts between all loads.
    """
    box_cols = SWIZZLE_BYTES // itemsize
    if r0 % 8 or (c0 % box_cols) * itemsize % CHUNK_BYTES:
        raise ValueError(f"block_offset: r0={r0} must be a multiple of 8 and column {c0} "
                         "must start a 16-byte chunk")
    chunk0 = (c0 % box_cols) * itemsize // CHUNK_BYTES
    fixed = (c0 // box_cols) * rows * SWIZZLE_BYTES + r0 * SWIZZLE_BYTES
    return fixed, row * SWIZZLE_BYTES + CHUNK_BYTES * (chunk0 ^ (chunk ^ (row % 8)))


def a_offset(lane, warp, mi, k16, rows, itemsize):
    """(fixed, lane part) of ``lane``'s ldmatrix.x4 address for the A fragment of warp
    ``warp`` (0..3), row block ``mi`` (64 rows) and K step ``k16`` of a K-major (M rows,
    K contiguous) tile.

    Registers d0..d3 are then a0a1, a2a3, a4a5, a6a7 of ``mma.m16n8k16`` (rows 0-7 / 8-15
    of the warp's 16 rows, K 0-7 / 8-15 of the step).
    """
    row, chunk = ldmatrix_lane(lane, "rows")
    return block_offset(64 * mi, 16 * k16, 16 * warp + row, chunk, rows, itemsize)


def b_offset(lane, k16, j, rows, itemsize, transposed):
    """(fixed, lane part) of ``lane``'s ldmatrix address for the B fragments of n8 blocks
    ``j``, ``j + 1``.

    Not transposed (K rows, N contiguous; ``ldmatrix ... .trans``): matrix rows are K
    rows ``16*k16 ..``, chunks the N blocks. Transposed view (N rows, K contiguous; no
    ``.trans``): matrix rows are N rows ``8*j ..``, chunks the two K halves. Either way
    d0, d1 are b0b1, b2b3 of block ``j`` and (x4) d2, d3 those of block ``j + 1``.
    """
    if not transposed:
        row, chunk = ldmatrix_lane(lane, "rows")
        return block_offset(16 * k16, 8 * j, row, chunk, rows, itemsize)
    row, chunk = ldmatrix_lane(lane, "cols")
    return block_offset(8 * j, 16 * k16, row, chunk, rows, itemsize)


def b_loads(n):
    """(j, count) per ldmatrix of B over N columns: x4 for n8 blocks j, j+1; a last x2."""
    blocks = n // 8
    return [(j, 4 if j + 1 < blocks else 2) for j in range(0, blocks, 2)]
