"""passes/offset_align.py and its use by lower_loads: a load whose contiguous offset is
not known to be a multiple of 16 bytes is not planned as TMA (an illegal instruction on
the H200: the GPU fuzzer, 2026-12-03), and cp.async / ld.global pieces are no wider than
the offset's alignment."""
import numpy as np
import pytest

import numba_ws as ws
from numba_ws.passes.offset_align import CAP, lowbit


def test_lowbit():
    assert [lowbit(n) for n in (1, 2, 12, -2, -3, 96, 0)] == [1, 2, 4, 2, 1, 32, CAP]


def shifted_row(x, y, SHIFT: ws.constexpr, B: ws.constexpr):
    i = ws.program_id(0) * B
    ws.store(y, (i,), ws.load(x, (i + SHIFT,), (B,)))


def shifted_cols(x, y, SHIFT: ws.constexpr, BM: ws.constexpr, BN: ws.constexpr):
    r, c = ws.program_id(0) * BM, ws.program_id(1) * BN
    ws.store(y, (r, c), ws.load(x, (r + 1, c + SHIFT), (BM, BN)))


def by_program(x, y, B: ws.constexpr):
    ws.store(y, (0,), ws.load(x, (ws.program_id(0),), (B,)))


def _member(kernel, *args, **meta):
    plan = ws.jit(kernel).partition(*args, **meta).ws
    return plan.channels[0].members[0]


@pytest.mark.parametrize("shift,path,vec", [(0, "tma", 16), (64, "tma", 16), (8, "tma", 16),
                                            (2, "cp.async", 4), (4, "cp.async", 8),
                                            (1, "ld.global", 2), (-3, "ld.global", 2)])
def test_path_and_pieces_follow_the_offset(shift, path, vec):
    x, y = np.zeros(4096, np.float16), np.zeros(4096, np.float16)
    m = _member(shifted_row, x, y, SHIFT=shift, B=256)
    assert (m["path"], m["vec"]) == (path, vec), m["why"]
    if path != "tma":
        assert "column offset is only" in m["why"]


def test_row_offsets_do_not_matter_and_column_offsets_do():
    x, y = np.zeros((256, 256), np.float32), np.zeros((256, 256), np.float32)
    assert _member(shifted_cols, x, y, SHIFT=4, BM=64, BN=64)["path"] == "tma"   # 16 bytes
    m = _member(shifted_cols, x, y, SHIFT=2, BM=64, BN=64)
    assert (m["path"], m["vec"]) == ("cp.async", 8)


def test_a_program_id_offset_is_only_element_aligned():
    m = _member(by_program, np.zeros(300, np.float32), np.zeros(300, np.float32), B=128)
    assert m["offset_align"] == 4 and m["path"] == "cp.async" and m["vec"] == 4


@pytest.mark.parametrize("shift", [0, 1, 2, -3])
def test_shifted_loads_verify_and_assemble(shift, tmp_path):
    from ptx_tools import assemble
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float16)
    y = np.full(1000, np.nan, np.float16)
    report = ws.verify(shifted_row, (3,), x, y, SHIFT=shift, B=256, seeds=1)
    assert report.ok, str(report)
    assemble(ws.jit(shifted_row).inspect_ptx(x, y, SHIFT=shift, B=256), tmp_path, "sm_90a")
