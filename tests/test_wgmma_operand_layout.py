"""The wgmma shared-memory descriptors the compiler emits read the elements TMA wrote.

A model of the hardware's read, written from the canonical layouts of PTX ISA
9.7.15.5.1.2 (the same ones CuTe's ``make_gmma_desc`` documents), in bytes, for 16-bit
elements (T = 8 per 16-byte chunk; tf32: T = 4, K-major only) and a swizzle of ``swz``
bytes (W = swz / 16 chunks):

- K-major:  ((8, m), (T, 2)) : ((swz, SBO), (itemsize, 16))     (LBO unused)
- MN-major: ((T, W, m), (8, 2)) : ((itemsize, 16, LBO), (swz, SBO))

then the address-bit swizzle of the mode (CuTe ``Swizzle<log2 W, 4, 3>``: bits 4.. XOR
bits 7..) on the absolute address (parts are 1024-byte aligned). The check: for every
64-row block of A / the whole N of B and every K step, each element the model reads is
the one :func:`numba_ws.codegen.swizzle.part_offset` (what TMA writes) stored for the
logical element the dot needs. The forms that ran on a GPU (K-major in the 128 / 64 /
32-byte swizzles, N-major B in 128 bytes) calibrate the model; the narrow N-major B and
the M-major A tiles of 2026-12-07 and the tf32 (float32) K-major operands of 2026-12-08
are checked by the same model.
"""
import itertools

import pytest

from numba_ws.codegen.swizzle import part_offset, swizzle_for, wgmma_operand_fields

def _swizzle(addr, swz):
    """The hardware's address swizzle of a ``swz``-byte mode (bits 4.. ^= bits 7..)."""
    return addr ^ (((addr >> 7) % (swz // 16)) << 4)


def _model_read(start, lbo, sbo, swz, mn_major, mn, k, item):
    """Byte address wgmma reads for element (mn, k) of one operand step (32 bytes of K:
    m64nNk16 for ``item`` = 2, m64nNk8 tf32 for 4)."""
    t_per_chunk = 16 // item
    if mn_major:
        t, w = mn % t_per_chunk, (mn // t_per_chunk) % (swz // 16)
        j = mn // (t_per_chunk * (swz // 16))
        linear = start + t * item + 16 * w + lbo * j + swz * (k % 8) + sbo * (k // 8)
    else:
        linear = start + swz * (mn % 8) + sbo * (mn // 8) + item * (k % t_per_chunk) \
            + 16 * (k // t_per_chunk)
    return _swizzle(linear, swz)


def _extents(rows, cols, transposed, is_a):
    """(M or N, K) of the operand read from a stored ``rows`` x ``cols`` part."""
    k_major = (not transposed) if is_a else transposed
    return (rows, cols) if k_major else (cols, rows)


def _mismatches(rows, cols, transposed, is_a, item=2, fields=wgmma_operand_fields):
    """Elements (block, k step, mn, k) whose model address differs from TMA's for the tile."""
    m_or_n, kdim = _extents(rows, cols, transposed, is_a)
    swz = swizzle_for(cols * item)
    box_cols = swz // item
    step = 32 // item                 # K elements per instruction
    bad = []
    for block, k16 in itertools.product(range(m_or_n // 64 if is_a else 1), range(kdim // step)):
        start, lbo, sbo, swz_f, trans = fields(rows, cols, transposed, item, k16, block, is_a)
        assert swz_f == swz
        extent = 64 if is_a else m_or_n
        for mn, k in itertools.product(range(extent), range(step)):
            mn_t, k_t = (64 * block + mn if is_a else mn), step * k16 + k
            # logical operand element -> physical (row, col) of the stored part
            if is_a:
                row, col = (k_t, mn_t) if transposed else (mn_t, k_t)
            else:
                row, col = (mn_t, k_t) if transposed else (k_t, mn_t)
            want = part_offset(row, col, rows, box_cols, item, True)
            if _model_read(start, lbo, sbo, swz, trans == 1, mn, k, item) != want:
                bad.append((block, k16, mn, k))
    return bad


# (form, stored rows, stored cols, trans() view, is A, itemsize) for each operand form:
# K-major A (BM x BK); M-major A (ws.trans of a (BK, BM) tile, or a column-major a);
# N-major B (row-major: 128-byte swizzle for N = 64 x n, 64 / 32 bytes for narrower rows);
# K-major B (ws.trans of an (N, K) tile, attention's K^T); tf32 (float32) K-major A and B
FORMS = ([("k_major_a", bm, bk, False, True, 2) for bm in (64, 128, 256)
          for bk in (16, 32, 64, 128)]
         + [("m_major_a", bk, bm, True, True, 2) for bm in (64, 128, 192, 256)
            for bk in (16, 32, 64, 128)]
         + [("n_major_b", bk, bn, False, False, 2) for bn in (16, 32, 48, 64, 96, 128, 160, 256)
            for bk in (16, 64, 128)]
         + [("k_major_b", bn, bk, True, False, 2) for bn in (16, 64, 128, 256)
            for bk in (16, 32, 64, 128)]
         + [("tf32_a", bm, bk, False, True, 4) for bm in (64, 128) for bk in (8, 16, 32, 64)]
         + [("tf32_b", bn, bk, True, False, 4) for bn in (8, 64, 128, 256)
            for bk in (8, 16, 32, 64)])


@pytest.mark.parametrize("form,rows,cols,transposed,is_a,item", FORMS,
                         ids=[f"{f[0]}-{f[1]}x{f[2]}" for f in FORMS])
def test_descriptor_reads_what_tma_wrote(form, rows, cols, transposed, is_a, item):
    assert _mismatches(rows, cols, transposed, is_a, item) == []


def test_tf32_operands_have_no_mn_major_form():
    """wgmma has no transpose for tf32: the field arithmetic refuses an MN-major one."""
    with pytest.raises(ValueError, match="16-bit"):
        wgmma_operand_fields(32, 128, False, 4, 0, 0, False)


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


def _fp16_k_step(rows, cols, transposed, itemsize, k16, row_block, is_a):
    return wgmma_operand_fields(rows, cols, transposed, itemsize, 2 * k16, row_block, is_a)


def test_the_model_rejects_a_tf32_step_of_16_elements():
    """A tf32 K step is 8 elements (32 bytes); the fp16 step's 16 would skip half of K."""
    assert _mismatches(128, 64, False, True, 4, fields=_fp16_k_step)
