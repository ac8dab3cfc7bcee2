"""Shared-memory layouts of loads that feed element-wise code (issue 14, item 2), on the CPU.

What lower_loads decides (the plan's part fields: ``phys``, ``phys_cols``, ``box_cols``,
``xor``, ``swizzle``, ``boxes``, ``bytes``, ``slot_offset``), that dot operands keep the
tensor cores' layout, that every layout is one ``part_offset`` can address and one the
cp.async pieces fill without straddling, the PTX of the copy intrinsics (tiny @cuda.jit
kernels, assembled by ptxas), the schedule simulator on such kernels, and the errors for
what cannot be loaded. tests/gpu/test_loads_gpu.py runs the same layouts on the H200.
"""
import re

import numpy as np
import pytest
from numba import cuda
from numba.cuda import types

import numba_ws as ws
from numba_ws.codegen.channel_ops import gpu_tma_copy
from numba_ws.codegen.cp_async_ops import (
    PRODUCER_THREADS, gpu_cp_async_commit, gpu_cp_async_copy, piece_bytes)
from numba_ws.codegen.swizzle import part_offset, swizzle_for
from numba_ws.passes.lower_loads import element_layout, layout_part

import kernels
import kernels_tiles as kt
from ptx_tools import assemble


def f16(*shape):
    return np.zeros(shape, np.float16)


def f32(*shape):
    return np.zeros(shape, np.float32)


def parts(state):
    """{member var: [part dict, ...]} over every channel."""
    return {m["var"]: m["parts"] for ch in state.ws.channels for m in ch.members}


def layout(part):
    return tuple(part[k] for k in ("phys", "phys_cols", "box_cols", "xor", "swizzle",
                                   "boxes", "bytes"))


# -- the layout rules ------------------------------------------------------------------

@pytest.mark.parametrize("phys,itemsize,want", [
    # (phys_cols, box_cols, xor, swizzle, boxes, bytes)
    ((64, 64), 2, (64, 64, True, 128, 1, 8192)),        # 128-byte rows: the GEMM layout
    ((128, 128), 2, (128, 64, True, 128, 2, 32768)),    # two 128-byte boxes
    ((16, 16), 4, (16, 16, True, 64, 1, 1024)),         # 64-byte rows: 64-byte swizzle
    ((8, 8), 4, (8, 8, True, 32, 1, 256)),              # 32-byte rows: 32-byte swizzle
    ((8, 16), 8, (16, 16, True, 128, 1, 1024)),         # fp64
    ((128, 1), 4, (4, 4, False, 0, 1, 2048)),           # narrow: 16-byte rows, plain
    ((64, 2), 4, (4, 4, False, 0, 1, 1024)),
    ((8, 1), 2, (8, 8, False, 0, 1, 128)),
    ((8, 4), 4, (4, 4, False, 0, 1, 128)),              # 16-byte rows: no swizzle
    ((4, 16), 2, (16, 16, False, 0, 1, 128)),           # 4 rows: not a swizzle period
    ((2, 64), 2, (64, 64, False, 0, 1, 256)),
    ((1, 1024), 4, (1024, 256, False, 0, 4, 4096)),     # 1-D: boxes of 256 elements
    ((1, 256), 2, (256, 256, False, 0, 1, 512)),
    ((1, 4), 4, (4, 4, False, 0, 1, 16)),
    ((1, 2), 4, (4, 4, False, 0, 1, 16)),               # 1-D narrow: padded to 16 bytes
    ((16, 24), 2, (24, 24, False, 0, 1, 768)),          # 48-byte rows: no swizzle fits
])
def test_element_layout(phys, itemsize, want):
    lay = element_layout(phys, itemsize)
    got = tuple(lay[k] for k in ("phys_cols", "box_cols", "xor", "swizzle", "boxes", "bytes"))
    assert got == want
    assert lay["box_cols"] <= 256 and lay["box_cols"] * itemsize % 16 == 0   # a TMA box
    if lay["xor"]:   # a box holds whole swizzle periods (8 rows of `swizzle` bytes)
        assert lay["box_cols"] * itemsize == lay["swizzle"] and phys[0] % 8 == 0


def test_element_layout_equals_the_tensor_core_layout_where_both_apply():
    """A tile that element-wise code reads and whose rows fit the tensor cores' layout
    gets that layout, so a consumer may read either kind the same way."""
    for phys, itemsize in [((64, 64), 2), ((128, 256), 2), ((64, 32), 2), ((64, 16), 2),
                           ((64, 32), 4), ((64, 64), 4)]:
        nbytes, boxes, box_cols, swizzle = layout_part(phys, itemsize)
        lay = element_layout(phys, itemsize)
        assert (lay["bytes"], lay["boxes"], lay["box_cols"], lay["swizzle"], lay["xor"],
                lay["phys_cols"]) == (nbytes, boxes, box_cols, swizzle, True, phys[1])


LAYOUTS = [((64, 64), 2), ((128, 128), 2), ((16, 16), 4), ((8, 8), 4), ((8, 16), 8),
           ((128, 1), 4), ((64, 2), 4), ((8, 1), 2), ((4, 16), 2), ((1, 1024), 4),
           ((1, 8), 2), ((16, 24), 2), ((3, 5), 4), ((24, 12), 4)]


@pytest.mark.parametrize("phys,itemsize", LAYOUTS)
def test_part_offset_is_a_bijection_onto_the_part(phys, itemsize):
    """Every stored element (r, c < phys_cols) has its own ``itemsize``-aligned offset
    inside the part's ``bytes``: parts never overlap and the copies' byte count is the
    layout's size."""
    lay = element_layout(phys, itemsize)
    rows = phys[0]
    offs = {part_offset(r, c, rows, lay["box_cols"], itemsize, lay["xor"])
            for r in range(rows) for c in range(lay["phys_cols"])}
    assert offs == set(range(0, lay["bytes"], itemsize))


@pytest.mark.parametrize("phys,itemsize,vec", [
    (phys, itemsize, vec) for phys, itemsize in LAYOUTS for vec in (16, 8, 4)
    if vec >= itemsize])   # an 8-byte element needs pieces of 8 or 16 bytes
def test_cp_async_pieces_cover_the_tile_without_straddling(phys, itemsize, vec):
    """The cp.async piece model: pieces of ``piece_bytes`` cover every column of every
    row exactly once (a narrow row's piece covers extra columns, inside ``phys_cols``),
    and each piece's elements are contiguous in the layout (one cp.async writes P
    consecutive bytes: no piece crosses a 16-byte chunk or a box)."""
    lay = element_layout(phys, itemsize)
    rows, cols = phys
    piece = piece_bytes(vec, cols, itemsize)
    assert piece <= vec and piece in (4, 8, 16)
    epp = piece // itemsize
    per_row = -(-cols * itemsize // piece)
    covered = []
    for v in range(rows * per_row):
        r, col = v // per_row, (v % per_row) * epp
        assert col + epp <= lay["phys_cols"]
        first = part_offset(r, col, rows, lay["box_cols"], itemsize, lay["xor"])
        assert first % piece == 0
        for e in range(epp):
            assert part_offset(r, col + e, rows, lay["box_cols"], itemsize,
                               lay["xor"]) == first + e * itemsize
            covered.append((r, col + e))
    assert len(covered) == len(set(covered))
    assert {(r, c) for r in range(rows) for c in range(cols)} <= set(covered)


def test_piece_bytes():
    assert piece_bytes(16, 64, 2) == 16
    assert piece_bytes(16, 2, 4) == 8      # (64, 2) fp32: 8-byte rows
    assert piece_bytes(16, 1, 4) == 4      # (128, 1) fp32
    assert piece_bytes(16, 1, 2) == 4      # one fp16 column: a 4-byte piece covers two
    assert piece_bytes(8, 64, 2) == 8
    assert piece_bytes(4, 64, 4) == 4


# -- the plan --------------------------------------------------------------------------

def _check_slots(state):
    """Parts are aligned (1024 swizzled, 128 plain), disjoint and inside their slot."""
    for ch in state.ws.channels:
        spans = []
        for m in ch.members:
            for p in m["parts"]:
                assert p["slot_offset"] % (1024 if p["xor"] else 128) == 0
                spans.append((p["slot_offset"], p["slot_offset"] + p["bytes"]))
                assert p["phys_cols"] >= p["phys"][1]
                assert p["boxes"] * p["box_cols"] == p["phys_cols"]
                assert p["bytes"] == p["phys"][0] * p["phys_cols"] * m["dtype"].itemsize
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
        assert spans[-1][1] <= ch.slot_bytes
        if any(p["xor"] for m in ch.members for p in m["parts"]):
            assert ch.smem_offset % 1024 == 0 and ch.slot_bytes % 1024 == 0


def test_copy_tile_plan_tma_swizzled():
    x = f32(100, 72)   # 288-byte rows: TMA
    state = ws.jit(kt.copy2d).partition(x, f32(100, 72), BM=64, BN=32)
    ch, = state.ws.channels
    assert ch.lowering == "tma"
    (member,) = ch.members
    assert not member["dot"]
    assert [layout(p) for p in member["parts"]] == [((32, 32), 32, 32, True, 128, 1, 4096)] * 2
    assert [p["slot_offset"] for p in member["parts"]] == [0, 4096]
    _check_slots(state)


@pytest.mark.parametrize("bm,bn,want", [
    (128, 1, ((64, 1), 4, 4, False, 0, 1, 1024)),     # split in 2 consumers: 64 rows each
    (64, 2, ((32, 2), 4, 4, False, 0, 1, 512)),
    (16, 8, ((8, 8), 8, 8, True, 32, 1, 256)),
    (32, 16, ((16, 16), 16, 16, True, 64, 1, 1024)),
    (4, 16, ((2, 16), 16, 16, False, 0, 1, 128)),
])
def test_copy_tile_plan_small_and_narrow(bm, bn, want):
    state = ws.jit(kt.copy2d).partition(f32(100, 72), f32(100, 72), BM=bm, BN=bn)
    (p0, p1), = parts(state).values()
    assert layout(p0) == layout(p1) == want
    _check_slots(state)


def test_copy_tile_plan_cp_async_when_rows_are_unaligned():
    """280-byte rows: no TMA; cp.async in 4-byte pieces (the rows are 8-byte aligned, but
    the column offset ``pid_n * 1`` only element-aligned: 8-byte pieces from an odd column
    would be misaligned), same layouts."""
    state = ws.jit(kt.copy2d).partition(f32(100, 70), f32(100, 70), BM=128, BN=1)
    ch, = state.ws.channels
    assert ch.lowering == "cp.async" and ch.members[0]["vec"] == 4
    assert layout(ch.members[0]["parts"][0]) == ((64, 1), 4, 4, False, 0, 1, 1024)


@pytest.mark.parametrize("cc", [(9, 0, "a"), (8, 0)])
def test_vec_add_plan_1d(cc):
    """A 1-D tile is stored as one row: phys (1, B), plain, 16-byte padded if narrow."""
    a = f32(1000)
    state = ws.jit(kt.vec_add).partition(a, f32(1000), f32(1000), B=256, cc=cc)
    ch, = state.ws.channels
    assert ch.lowering == ("tma" if cc[0] == 9 else "cp.async")
    got = parts(state)
    assert len(got) == 2
    for ps in got.values():
        assert [layout(p) for p in ps] == [((1, 128), 128, 128, False, 0, 1, 512)] * 2
    _check_slots(state)


def test_1d_tile_wider_than_a_box_takes_several_boxes():
    state = ws.jit(kt.vec_add).partition(f32(5000), f32(5000), f32(5000), B=1024,
                                         num_consumer_groups=1, stop_after="ws_lower_loads")
    for ps in parts(state).values():
        assert [layout(p) for p in ps] == [((1, 1024), 1024, 256, False, 0, 4, 4096)]


def test_tensor_maps_of_1d_and_plain_parts():
    """The tensor maps the launcher encodes: (array, (box rows, box cols), transposed,
    swizzle bytes), swizzle 0 for plain rows; the 2-D copy of a 1-D load is row 0."""
    state = ws.jit(kt.vec_add).partition(f32(1000), f32(1000), f32(1000), B=256,
                                         stop_after="ws_lower_tiles")
    assert state.ws.tmaps == [("a", (1, 128), False, 0), ("b", (1, 128), False, 0)]
    state = ws.jit(kt.copy2d).partition(f32(100, 72), f32(100, 72), BM=64, BN=2,
                                        stop_after="ws_lower_tiles")
    assert state.ws.tmaps == []     # 16-byte unswizzled rows: cp.async (MIN_PLAIN_TMA_BOX)
    state = ws.jit(kt.copy2d).partition(f32(100, 72), f32(100, 72), BM=64, BN=32,
                                        stop_after="ws_lower_tiles")
    assert state.ws.tmaps == [("x", (32, 32), False, 128)]


def test_dot_operands_keep_the_tensor_core_layout():
    args = (f16(512, 256), f16(256, 512), f16(512, 512))
    for fn in (kernels.matmul, kernels.matmul_nt):
        b = args[1] if fn is kernels.matmul else f16(512, 256)
        state = ws.jit(fn).partition(args[0], b, args[2], BM=128, BN=128, BK=64)
        for ch in state.ws.channels:
            for m in ch.members:
                assert m["dot"], (fn.__name__, m["var"])   # matmul_nt: through ws.trans
                for p in m["parts"]:
                    nbytes, boxes, box_cols, swz = layout_part(p["phys"], 2)
                    assert (p["bytes"], p["boxes"], p["box_cols"], p["swizzle"], p["xor"],
                            p["phys_cols"]) == (nbytes, boxes, box_cols, swz, True,
                                                p["phys"][1])
        _check_slots(state)


def test_gemm_epilogue_loads_are_element_wise_members():
    """The bias (1-D) and residual tiles of GEMM epilogues are read by element-wise code
    only: not dot members; the bias is one plain row."""
    a, b = f16(300, 256), f16(256, 320)
    state = ws.jit(kt.gemm_bias_relu).partition(a, b, f16(320), f16(300, 320), BM=128,
                                                BN=128, BK=64)
    members = {m["array"]: m for ch in state.ws.channels for m in ch.members}
    assert members["a"]["dot"] and members["b"]["dot"] and not members["bias"]["dot"]
    assert {layout(p) for p in members["bias"]["parts"]} == \
        {((1, 128), 128, 128, False, 0, 1, 256)}
    _check_slots(state)
    state = ws.jit(kt.gemm_residual).partition(a, b, f16(300, 320), f16(300, 320), BM=128,
                                               BN=128, BK=64)
    members = {m["array"]: m for ch in state.ws.channels for m in ch.members}
    assert not members["r"]["dot"]
    assert {layout(p) for p in members["r"]["parts"]} == \
        {((64, 128), 128, 64, True, 128, 2, 16384)}
    _check_slots(state)


def test_slot_bytes_count_every_part_and_ring_slot():
    state = ws.jit(kt.layernorm_fwd).partition(
        f32(100, 64), f32(64), f32(64), f32(100, 64), f32(100, 1), f32(100, 1), 1e-5, BM=16,
        BN=64)
    _check_slots(state)
    for ch in state.ws.channels:
        assert ch.tx_bytes == sum(p["bytes"] for m in ch.members for p in m["parts"])


# -- errors ----------------------------------------------------------------------------

def test_rows_that_neither_tma_nor_cp_async_can_read_load_through_ld_global():
    """fp16 rows of 142 bytes: no 4-byte piece divides them; the ld.global path reads
    them (issue 15 item 6) and the plan says so."""
    state = ws.jit(kt.copy2d).partition(f16(100, 71), f16(100, 71), BM=32, BN=16)
    member = state.ws.channels[0].members[0]
    assert member["path"] == "ld.global" and "no cp.async" in member["why"]


def test_more_than_256_rows_per_tma_box_is_a_clear_error():
    with pytest.raises(ws.WSCompileError, match=r"512 rows per part.*at most 256"):
        ws.jit(kt.copy2d).partition(f32(1000, 72), f32(1000, 72), BM=512, BN=64,
                                    num_consumer_groups=1)


# -- the simulator ---------------------------------------------------------------------

@pytest.mark.parametrize("fn,make,grid,meta", [
    (kt.copy2d, lambda r: (r.random((100, 70), np.float32), f32(100, 70)), (4, 70),
     dict(BM=32, BN=1)),
    (kt.copy2d, lambda r: (r.random((100, 72), np.float32), f32(100, 72)), (7, 9),
     dict(BM=16, BN=8)),
    (kt.vec_add, lambda r: (r.random(1000, np.float32), r.random(1000, np.float32),
                            f32(1000)), (8,), dict(B=128)),
])
def test_simulator_runs_element_wise_loads(fn, make, grid, meta):
    args = make(np.random.default_rng(0))
    report = ws.verify(fn, grid, *args, seeds=2, **meta)
    assert report.ok, str(report)


# -- PTX of the copy intrinsics --------------------------------------------------------

def _cp_kernel(rows, cols, vec, phys_cols, box_cols, xor, operand=0, arch=90):
    def k(x, r0, c0):
        gpu_cp_async_copy(0, 4096, 0, x, r0, c0, (rows, cols), vec, 0, phys_cols, box_cols,
                          xor, operand)
        gpu_cp_async_commit(4096, 0, arch)
    return k


def _ptx(fn, argtys, cc=(9, 0, "a")):
    ptx, _ = cuda.compile_ptx(fn, argtys, cc=cc)
    return ptx


F32_2D = (types.float32[:, ::1], types.int64, types.int64)
F16_2D = (types.float16[:, ::1], types.int64, types.int64)
F32_1D = (types.float32[::1], types.int64, types.int64)


@pytest.mark.parametrize("rows,cols,vec,itemsize,sig,n16,n8,n4", [
    (64, 2, 16, 4, F32_2D, 0, 1, 0),      # 8-byte rows: one 8-byte piece per row
    (128, 1, 16, 4, F32_2D, 0, 0, 1),     # one 4-byte piece per row
    (1, 8, 16, 4, F32_1D, 1, 0, 0),       # two 16-byte pieces: threads 0 and 1
    (16, 16, 4, 4, F32_2D, 0, 0, 1),      # 4-byte aligned array: 4-byte pieces, a loop
    (8, 64, 8, 2, F16_2D, 0, 1, 0),
])
def test_cp_async_piece_sizes(tmp_path, rows, cols, vec, itemsize, sig, n16, n8, n4):
    lay = element_layout((rows, cols), itemsize)
    ptx = _ptx(_cp_kernel(rows, cols, vec, lay["phys_cols"], lay["box_cols"],
                          int(lay["xor"])), sig)
    found = {n: len(re.findall(rf"cp\.async\.c[ag]\.shared\.global \[%r\d+\], \[%rd\d+\], "
                               rf"{n}, %r\d+;", ptx)) for n in (16, 8, 4)}
    assert (found[16] > 0, found[8] > 0, found[4] > 0) == (n16 > 0, n8 > 0, n4 > 0), found
    assemble(ptx, tmp_path)
    assemble(_ptx(_cp_kernel(rows, cols, vec, lay["phys_cols"], lay["box_cols"],
                             int(lay["xor"]), arch=80), sig, cc=(8, 0)), tmp_path, "sm_80")


def test_cp_async_unaligned_column_offset_copies_element_by_element(tmp_path):
    """A run-time column offset that may not be piece-aligned gets the element path
    (ld + st.shared.b16), which LLVM drops when the offset is provably aligned."""
    lay = element_layout((64, 64), 2)
    copy = _cp_kernel(64, 64, 16, 64, lay["box_cols"], 1)
    ptx = _ptx(copy, F16_2D)
    assert "st.shared.b16" in ptx and "cp.async.cg.shared.global" in ptx
    assemble(ptx, tmp_path)

    def aligned(x, r0, c0):
        gpu_cp_async_copy(0, 8192, 0, x, r0, c0 * 8, (64, 64), 16, 0, 64, 64, 1, 0)
        gpu_cp_async_commit(8192, 0, 90)
    ptx = _ptx(aligned, F16_2D)
    assert "st.shared.b16" not in ptx and "cp.async.cg.shared.global" in ptx


def test_cp_async_dot_operand_copy_is_unrolled(tmp_path):
    """A (128, 64) fp16 dot operand: 1024 pieces of 16 bytes, 8 per thread, unrolled
    (no loop, no element path), as the GEMM kernels' PTX has always been."""
    ptx = _ptx(_cp_kernel(128, 64, 16, 64, 64, 1, operand=1), F16_2D)
    assert ptx.count("cp.async.cg.shared.global") == 1024 // PRODUCER_THREADS
    assert "st.shared" not in ptx
    assemble(ptx, tmp_path)


@pytest.mark.parametrize("boxes,box_cols,box_bytes", [(4, 256, 1024), (1, 4, 2048),
                                                      (2, 64, 8192)])
def test_tma_copy_issues_one_box_per_box(tmp_path, boxes, box_cols, box_bytes):
    def k(tmap, r0, c0):
        gpu_tma_copy(0, 16384, 0, tmap, 0, 16384, r0, c0, boxes, box_cols, box_bytes)
    ptx = _ptx(k, (types.uint64, types.int64, types.int64))
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global") == boxes
    assemble(ptx, tmp_path)


# -- end to end (with the consumer side's ld.shared) -----------------------------------

@pytest.mark.parametrize("fn,args,meta,arch,copy", [
    (kt.copy2d, (f32(100, 72), f32(100, 72)), dict(BM=128, BN=1), "sm_90a",
     "cp.async.ca.shared.global"),      # 16-byte unswizzled rows: not TMA
    (kt.copy2d, (f32(100, 70), f32(100, 70)), dict(BM=64, BN=2), "sm_90a",
     "cp.async.ca.shared.global"),
    (kt.vec_add, (f32(1000), f32(1000), f32(1000)), dict(B=256), "sm_90a",
     "cp.async.bulk.tensor"),
    (kt.vec_add, (f32(1000), f32(1000), f32(1000)), dict(B=8, cc=(8, 0)), "sm_80",
     "cp.async.cg.shared.global"),
])
def test_element_wise_load_kernels_assemble(tmp_path, fn, args, meta, arch, copy):
    ptx = ws.jit(fn).inspect_ptx(*args, **meta)
    assert copy in ptx
    assemble(ptx, tmp_path, arch)


def test_swizzle_for_is_what_element_layout_uses():
    for row_bytes in (16, 32, 48, 64, 96, 128, 256, 512):
        lay = element_layout((8, row_bytes // 4), 4)
        assert lay["swizzle"] == (swizzle_for(row_bytes) or 0)


@pytest.mark.parametrize("shape,BM,BN,path", [((300, 4), 128, 4, "cp.async"),
                                               ((1000, 8), 4, 8, "cp.async"),
                                               ((300, 64), 64, 64, "tma"),
                                               ((300, 64), 64, 32, "tma")])
def test_narrow_unswizzled_parts_are_not_planned_as_tma(shape, BM, BN, path):
    """An unswizzled box with rows under MIN_PLAIN_TMA_BOX_BYTES stopped with an illegal
    instruction on the H200: such parts go through cp.async (the rest stays TMA)."""
    def narrow(x, y, BM: ws.constexpr, BN: ws.constexpr):
        t = ws.load(x, (ws.program_id(0) * BM, 0), (BM, BN))
        ws.store(y, (ws.program_id(0) * BM, 0), t)
    x = np.zeros(shape, np.float32)
    state = ws.jit(narrow).partition(x, x.copy(), BM=BM, BN=BN, num_consumer_groups=1)
    ch = state.ws.channels[0]
    assert ch.lowering == path, ch.members[0]["why"]
    if path == "cp.async":
        assert "under 128 bytes" in ch.members[0]["why"]
