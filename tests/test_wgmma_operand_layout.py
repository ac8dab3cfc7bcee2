"""The wgmma shared-memory descriptors the compiler emits read the elements TMA wrote.

A model of the hardware's read, written from the canonical layouts of PTX ISA
9.7.15.5.1.2 (the same ones CuTe's ``make_gmma_desc`` documents), in bytes, for 16-bit
elements (T = 8 per 16-byte chunk) and a swizzle of ``swz`` bytes (W = swz / 16 chunks):

- K-major:  ((8, m), (T, 2)) : ((swz, SBO), (itemsize, 16))     (LBO unused)
- MN-major: ((T, W, m), (8, 2)) : ((itemsize, 16, LBO), (swz, SBO))

then the address-bit swizzle of the mode (CuTe ``Swizzle<log2 W, 4, 3>``: bits 4.. XOR
bits 7..) on the absolute address (parts are 1024-byte aligned). The check: for every
64-row block of A / the whole N of B and every K step, each element the model reads is
the one :func:`numba_ws.codegen.swizzle.part_offset` (what TMA writes) stored for the
logical element the dot needs. The forms that ran on a GPU (K-major in the 128 / 64 /
32-byte swizzles, N-major B in 128 bytes) calibrate the model; the narrow N-major B and
the M-major A tiles of 2026-12-07 are checked by the same model.
"""
import itertools

import pytest

from numba_ws.codegen.swizzle import part_offset, swizzle_for, wgmma_operand_fields

ITEM = 2           # fp16 / bf16
T = 16 // ITEM     # elements per 16-byte chunk


def _swizzle(addr, swz):
    """The hardware's address swizzle of a ``swz``-byte mode (bits 4.. ^= bits 7..)."""
    return addr ^ (((addr >> 7) % (swz // 16)) << 4)


def _model_read(start, lbo, sbo, swz, mn_major, mn, k):
    """Byte address wgmma reads for element (mn, k) of one m64nNk16 operand step."""
    if mn_major:
        t, w, j = mn % T, (mn // T) % (swz // 16), mn // (T * (swz // 16))
        linear = start + t * ITEM + 16 * w + lbo * j + swz * (k % 8) + sbo * (k // 8)
    else:
        linear = start + swz * (mn % 8) + sbo * (mn // 8) + ITEM * (k % T) + 16 * (k // T)
    return _swizzle(linear, swz)


def _extents(rows, cols, transposed, is_a):
    """(M or N, K) of the operand read from a stored ``rows`` x ``cols`` part."""
    k_major = (not transposed) if is_a else transposed
    return (rows, cols) if k_major else (cols, rows)


def _mismatches(rows, cols, transposed, is_a, fields=wgmma_operand_fields):
    """Elements (block, k16, mn, k) whose model address differs from TMA's for the tile."""
    m_or_n, kdim = _extents(rows, cols, transposed, is_a)
    swz = swizzle_for(cols * ITEM)
    box_cols = swz // ITEM
    bad = []
    for block, k16 in itertools.product(range(m_or_n // 64 if is_a else 1), range(kdim // 16)):
        start, lbo, sbo, swz_f, trans = fields(rows, cols, transposed, ITEM, k16, block, is_a)
        assert swz_f == swz
        extent = 64 if is_a else m_or_n
        for mn, k in itertools.product(range(extent), range(16)):
            mn_t, k_t = (64 * block + mn if is_a else mn), 16 * k16 + k
            # logical operand element -> physical (row, col) of the stored part
            if is_a:
                row, col = (k_t, mn_t) if transposed else (mn_t, k_t)
            else:
                row, col = (mn_t, k_t) if transposed else (k_t, mn_t)
            want = part_offset(row, col, rows, box_cols, ITEM, True)
            if _model_read(start, lbo, sbo, swz, trans == 1, mn, k) != want:
                bad.append((block, k16, mn, k))
    return bad


# (form, stored rows, stored cols, trans() view, is A) for each operand form:
# K-major A (BM x BK); M-major A (ws.trans of a (BK, BM) tile, or a column-major a);
# N-major B (row-major: 128-byte swizzle for N = 64 x n, 64 / 32 bytes for narrower rows);
# K-major B (ws.trans of an (N, K) tile, attention's K^T)
FORMS = ([("k_major_a", bm, bk, False, True) for bm in (64, 128, 256) for bk in (16, 32, 64, 128)]
         + [("m_major_a", bk, bm, True, True) for bm in (64, 128, 192, 256)
            for bk in (16, 32, 64, 128)]
         + [("n_major_b", bk, bn, False, False) for bn in (16, 32, 48, 64, 96, 128, 160, 256)
            for bk in (16, 64, 128)]
         + [("k_major_b", bn, bk, True, False) for bn in (16, 64, 128, 256)
            for bk in (16, 32, 64, 128)])


@pytest.mark.parametrize("form,rows,cols,transposed,is_a", FORMS,
                         ids=[f"{f[0]}-{f[1]}x{f[2]}" for f in FORMS])
def test_descriptor_reads_what_tma_wrote(form, rows, cols, transposed, is_a):
    assert _mismatches(rows, cols, transposed, is_a) == []


def _swapped_strides(*args):
    off, lbo, sbo, swz, trans = wgmma_operand_fields(*args)
    return off, sbo, lbo, swz, trans


def _row_block_ignored(rows, cols, transposed, itemsize, k16, row_block, is_a):
    return wgmma_operand_fields(rows, cols, transposed, itemsize, k16, 0, is_a)


@pytest.mark.parametrize("mutant,rows,cols,transposed,is_a", [
    (_swapped_strides, 64, 128, False, False),       # N-major B, LBO and SBO exchanged
    (_swapped_strides, 64, 32, False, False),        # the same in the 64-byte swizzle
    (_row_block_ignored, 64, 256, True, True),       # M-major A: every block reads block 0
    (_row_block_ignored, 128, 64, False, True),      # K-major A likewise
])
def test_the_model_rejects_wrong_descriptors(mutant, rows, cols, transposed, is_a):
    """The check has teeth: descriptors off in one field read the wrong elements."""
    assert _mismatches(rows, cols, transposed, is_a, fields=mutant)
