"""Any shape and stride on the GPU (issue 15, item 6), on the CPU: the ld.global path.

What is checked without a GPU:
- ``runtime.specialize.array_info``: a negative stride never passes for TMA (a stride of
  -32 bytes is a multiple of 16 to Python's ``%``), ``vec`` (the piece alignment) of odd
  pitches, int8 arrays, views without a contiguous dimension; an element-misaligned base
  is an error naming the argument;
- the piece model of ``codegen.ldg_ops`` (pieces cover every column of every row once,
  each piece contiguous in ``part_offset``'s layout, never across a 16-byte chunk);
- which path each load takes (``member["path"]``, ``member["why"]``, ``ch.lowering``) for
  GEMMs with K = 7, 129, 4001 (fp16, bf16), transposed and negative-stride views,
  element-wise kernels on odd pitches and int8 arrays, and what ``explain`` prints;
- the PTX of the copy and commit intrinsics, and of whole kernels, through ptxas for
  sm_90a and sm_80 (GEMMs without spills);
- ``ws.verify`` (the schedule simulator) on those kernels with such arrays.
tests/gpu/test_ldg_loads_gpu.py runs the same on the H200.
"""
import re

import numpy as np
import pytest
from numba import cuda
from numba.cuda import types

import numba_ws as ws
from numba_ws.codegen.ldg_ops import BATCH, gpu_ldg_commit, gpu_ldg_copy, piece_bytes
from numba_ws.codegen.swizzle import part_offset
from numba_ws.passes.lower_loads import element_layout, layout_part
from numba_ws.runtime import interop
from numba_ws.runtime.specialize import array_info

import kernels
import kernels_tiles as kt
from ptx_tools import assemble, resources

BF16 = ws.bfloat16.dtype
TARGETS = {"sm_90a": (9, 0, "a"), "sm_80": (8, 0)}


def f16(*shape):
    return np.zeros(shape, np.float16)


def info_of(x):
    return array_info(None, {"x": interop.describe(x, "x")})["x"]


def paths(state):
    """{array name: path} over every channel member."""
    return {m["array"]: m["path"] for ch in state.ws.channels for m in ch.members}


def members(state):
    return {m["array"]: m for ch in state.ws.channels for m in ch.members}


GEMM = dict(BM=128, BN=128, BK=64)


# -- array_info ------------------------------------------------------------------------

@pytest.mark.parametrize("view", [
    lambda a: a[::-1],              # rows -256 bytes apart: a multiple of 16 to Python's %
    lambda a: a[:, ::-1],
    lambda a: a[::-1, ::-1],
    lambda a: a.T[::-1],            # column-major, columns negative
    lambda a: a[::-2],
    lambda a: a.reshape(-1)[::-1],  # 1-D
], ids=["rows", "cols", "both", "transposed", "every_other_row", "1d"])
def test_negative_strides_are_never_tma(view):
    a = np.zeros((64, 128), np.float16)
    x = view(a)
    assert any(s < 0 for s in x.strides)
    info = info_of(x)
    assert not info["tma_ok"] and "negative stride" in info["why"], info


def test_negative_row_stride_keeps_cp_async_pieces():
    """x[::-1] is still contiguous along its rows: its pieces divide base and pitch."""
    info = info_of(np.zeros((64, 128), np.float16)[::-1])
    assert info["vec"] == 16 and not info["transposed"]
    info = info_of(np.zeros((64, 128), np.float16)[:, ::-1])
    assert info["vec"] == 0    # no contiguous dimension: element by element


def test_extent_one_strides_do_not_matter():
    """A (1, N) row of a reversed array: its negative row stride is never used."""
    row = np.zeros((64, 128), np.float16)[::-1][:1]
    assert row.strides[0] < 0
    info = info_of(row)
    assert info["tma_ok"], info


@pytest.mark.parametrize("make,vec,transposed", [
    (lambda: np.zeros((300, 7), np.float16), 2, False),           # 14-byte rows
    (lambda: np.zeros((300, 129), np.float16), 2, False),
    (lambda: np.zeros((300, 4001), np.float16), 2, False),
    (lambda: np.zeros((300, 130), np.float16), 4, False),         # 260 bytes: cp.async
    (lambda: np.zeros((300, 7), np.int8), 1, False),
    (lambda: np.zeros((300, 64), np.int8), 16, False),
    (lambda: np.zeros((300, 66), np.int8), 2, False),
    (lambda: np.zeros((300, 64), np.float16)[:, ::2], 0, False),   # no contiguous dim
    (lambda: np.zeros((300, 129), np.float16).T, 2, True),         # column-major, odd K
    (lambda: np.zeros((64, 64), np.float16)[1:, 1:], 2, False),    # base 2 bytes off
], ids=["f16_K7", "f16_K129", "f16_K4001", "f16_260B", "i8_K7", "i8_K64", "i8_K66",
        "every_other_col", "column_major_odd", "offset_view"])
def test_piece_alignment(make, vec, transposed):
    info = info_of(make())
    assert (info["vec"], info["transposed"]) == (vec, transposed), info
    assert not info["tma_ok"] or vec == 16


def test_element_misaligned_base_is_an_error_naming_the_argument():
    x = np.zeros(2 * 64 * 8 + 1, np.uint8)[1:].view(np.float16).reshape(64, 8)
    assert x.ctypes.data % 2 == 1
    with pytest.raises(ws.WSUsageError, match=r"argument 'x'.*not a multiple of the "
                                              r"float16 element size"):
        ws.jit(kt.copy2d).partition(x, f16(64, 8), BM=32, BN=8)


# -- the piece model ---------------------------------------------------------------------

def test_piece_bytes():
    assert piece_bytes(16, 64, 1) == 16       # int8, 16-byte aligned rows
    assert piece_bytes(16, 7, 1) == 8         # 7 bytes per row: one 8-byte piece
    assert piece_bytes(2, 64, 2) == 2         # odd fp16 pitch: one element per piece
    assert piece_bytes(1, 64, 1) == 1
    assert piece_bytes(2, 64, 1) == 2
    assert piece_bytes(0, 64, 4) == 4         # no contiguous dimension
    assert piece_bytes(0, 64, 1) == 1
    assert piece_bytes(16, 1, 4) == 4         # (128, 1) fp32
    assert piece_bytes(16, 3, 2) == 8         # 6-byte rows: 8-byte pieces
    assert piece_bytes(16, 16, 8) == 16


LAYOUTS = [((64, 64), 2), ((128, 128), 2), ((16, 16), 4), ((8, 8), 4), ((8, 16), 8),
           ((128, 1), 4), ((64, 2), 4), ((8, 1), 2), ((4, 16), 2), ((1, 1024), 4),
           ((1, 8), 2), ((16, 24), 2), ((3, 5), 4), ((64, 64), 1), ((8, 7), 1),
           ((32, 48), 1), ((1, 300), 1)]


@pytest.mark.parametrize("phys,itemsize,vec", [
    (phys, itemsize, vec) for phys, itemsize in LAYOUTS for vec in (16, 8, 4, 2, 1, 0)
    if vec == 0 or vec >= itemsize])
def test_ldg_pieces_cover_the_part_without_straddling(phys, itemsize, vec):
    """Pieces of ``piece_bytes`` cover every column of every row exactly once (a narrow
    row's piece covers extra columns, inside ``phys_cols``); each piece is ``piece``-byte
    aligned and contiguous in the layout (one ld.global / st.shared pair)."""
    lay = element_layout(phys, itemsize)
    rows, cols = phys
    piece = piece_bytes(vec, cols, itemsize)
    assert itemsize <= piece <= max(vec, itemsize) and piece <= 16
    epp = piece // itemsize
    per_row = -(-cols // epp)
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


# -- which path each load takes -----------------------------------------------------------

def _gemm_args(K, dtype, M=300, N=200):
    return np.zeros((M, K), dtype), np.zeros((K, N), dtype), np.zeros((M, N), np.float16)


@pytest.mark.parametrize("cc", list(TARGETS.values()), ids=list(TARGETS))
@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("K", [7, 129, 4001])
def test_gemm_with_odd_k_loads_a_with_ld_global(K, dtype, cc):
    """a's rows are 2K bytes (2-byte aligned): ld.global. b could be read by TMA on
    sm_90, but shares the channel (one full barrier) with a: cp.async."""
    state = ws.jit(kernels.matmul).partition(*_gemm_args(K, dtype), cc=cc, **GEMM)
    ch, = state.ws.channels
    assert ch.lowering == "cp.async+ld.global"
    got = members(state)
    assert got["a"]["path"] == "ld.global" and got["b"]["path"] == "cp.async"
    assert got["a"]["why"].startswith("ld.global (no TMA: ")
    assert "no cp.async: rows only 2-byte aligned" in got["a"]["why"]
    if cc[0] == 9:
        assert "TMA could read 'b', but not 'a'" in got["b"]["why"]
        assert any("setmaxnreg left out: the cp.async+ld.global producer" in n
                   for n in state.ws.notes)


def test_gemm_on_aligned_arrays_keeps_tma():
    state = ws.jit(kernels.matmul).partition(*_gemm_args(256, np.float16), **GEMM)
    assert state.ws.channels[0].lowering == "tma"
    assert set(paths(state).values()) == {"tma"}
    assert all(m["why"].startswith("TMA: ") for m in members(state).values())


@pytest.mark.parametrize("cc", list(TARGETS.values()), ids=list(TARGETS))
def test_column_major_b_with_odd_k_is_read_through_its_transposed_view(cc):
    """b = bt.T with bt (N, K) row-major, K = 129: column-major, columns 258 bytes apart.
    ld.global reads the transposed view (K contiguous), the tile lands K-major."""
    bt = np.zeros((200, 129), np.float16)
    state = ws.jit(kernels.matmul).partition(np.zeros((300, 129), np.float16), bt.T,
                                             f16(300, 200), cc=cc, **GEMM)
    b = members(state)["b"]
    assert b["transposed"] and b["path"] == "ld.global"
    assert {p["phys"] for p in b["parts"]} == {(128, 64)}


def test_the_unaligned_column_major_b_of_issue_14_now_loads():
    """Columns 2 bytes off alignment and 18 bytes apart (was 'cannot load array')."""
    b = np.asfortranarray(f16(9, 384))[1:, :]
    assert b.strides == (2, 18)
    state = ws.jit(kernels.matmul).partition(f16(512, 8), b, f16(512, 384), **GEMM)
    assert members(state)["b"]["path"] == "ld.global" and members(state)["b"]["transposed"]


@pytest.mark.parametrize("view,a_path,b_path", [
    (lambda a, b: (a[::-1], b), "cp.async", "cp.async"),
    (lambda a, b: (a, b[::-1]), "cp.async", "cp.async"),
    (lambda a, b: (a[:, ::-1], b), "ld.global", "cp.async"),
    (lambda a, b: (a, b[:, ::-1]), "cp.async", "ld.global"),
    (lambda a, b: (a[::-1, ::-1], b[::-1]), "ld.global", "cp.async"),
], ids=["a_rows", "b_rows", "a_cols", "b_cols", "both"])
def test_negative_stride_gemm_operands(view, a_path, b_path):
    a, b = view(f16(300, 128), f16(128, 200))
    state = ws.jit(kernels.matmul).partition(a, b, f16(300, 200), **GEMM)
    assert paths(state) == {"a": a_path, "b": b_path}
    assert "tma" not in state.ws.channels[0].lowering


def test_matmul_nt_with_odd_k():
    state = ws.jit(kernels.matmul_nt).partition(f16(300, 129), f16(200, 129), f16(300, 200),
                                                **GEMM)
    assert paths(state) == {"a": "ld.global", "bt": "ld.global"}
    assert state.ws.channels[0].lowering == "ld.global"


def test_narrow_swizzle_dot_operand_takes_ld_global_on_sm90():
    """BK=32: a's 64-byte rows in the 64-byte swizzle, which cp.async does not write; TMA
    cannot read a (K = 129), so ld.global writes it (sm_90's wgmma reads any swizzle)."""
    state = ws.jit(kernels.matmul).partition(*_gemm_args(129, np.float16), BM=128, BN=128,
                                             BK=32)
    a = members(state)["a"]
    assert a["path"] == "ld.global" and {p["swizzle"] for p in a["parts"]} == {64}


def test_narrow_swizzle_dot_operand_on_sm80_is_a_clear_error():
    with pytest.raises(ws.WSCompileError, match=r"tile x .*64-byte swizzle.*sm_80's mma.sync "
                                                r".*128-byte.*multiple of 64 elements"):
        ws.jit(kernels.matmul).partition(*_gemm_args(129, np.float16), cc=(8, 0), BM=128,
                                         BN=128, BK=32)


@pytest.mark.parametrize("x,cc,path", [
    (f16(100, 71), (9, 0, "a"), "ld.global"),            # 142-byte rows (was an error)
    (f16(100, 71), (8, 0), "ld.global"),
    (np.zeros((100, 71), np.int8), (9, 0, "a"), "ld.global"),
    (np.zeros((100, 64), np.int8), (9, 0, "a"), "tma"),
    (np.zeros((100, 64), np.int8), (8, 0), "ld.global"),  # cp.async: no 1-byte elements
    (np.zeros((100, 68), np.int16), (8, 0), "cp.async"),
    (f16(100, 128)[:, ::2], (9, 0, "a"), "ld.global"),
    (np.zeros((100, 64), np.float32)[::-1], (9, 0, "a"), "cp.async"),
], ids=["f16_odd", "f16_odd_sm80", "i8_odd", "i8_aligned", "i8_sm80", "i16_sm80",
        "every_other_col", "f32_reversed"])
def test_copy_paths(x, cc, path):
    state = ws.jit(kt.copy2d).partition(x, np.zeros(x.shape, x.dtype), BM=32, BN=64, cc=cc)
    assert paths(state) == {"x": path}
    assert state.ws.channels[0].lowering == path


def test_explain_prints_each_loads_path():
    text = ws.jit(kernels.matmul).explain(*_gemm_args(7, np.float16), **GEMM)
    channels = text.split("# channels")[1]
    assert "cp.async+ld.global" in channels
    assert re.search(r"#     x = load of 'a': ld\.global \(no TMA: row stride 14 bytes not "
                     r"a multiple of 16; no cp\.async: rows only 2-byte aligned", channels)
    assert "#     y = load of 'b': cp.async (TMA could read 'b', but not 'a'" in channels
    text = ws.jit(kernels.matmul).explain(*_gemm_args(256, np.float16), **GEMM)
    assert "#     x = load of 'a': TMA: contiguous, aligned" in text


# -- PTX of the intrinsics ------------------------------------------------------------------

def _copy_kernel(rows, cols, vec, lay, transposed=0, arch=90):
    phys_cols, box_cols, xor = lay["phys_cols"], lay["box_cols"], int(lay["xor"])

    def k(x, r0, c0):
        gpu_ldg_copy(0, 8192, 0, x, r0, c0, (rows, cols), vec, transposed, phys_cols,
                     box_cols, xor)
        gpu_ldg_commit(8192, 0, arch)
    return k


def _ptx(fn, argtys, cc=(9, 0, "a")):
    ptx, _ = cuda.compile_ptx(fn, argtys, cc=cc)
    return ptx


def _sig(dtype, ndim=2):
    return (types.Array(dtype, ndim, "A"), types.int64, types.int64)


@pytest.mark.parametrize("dtype,rows,cols,vec,instr", [
    (types.int8, 32, 64, 16, "ld.global.v2.b64"),     # 16-byte pieces of int8
    (types.int8, 32, 64, 8, "ld.global.b64"),
    (types.int8, 32, 64, 4, "ld.global.b32"),
    (types.int8, 32, 64, 2, "ld.global.b16"),
    (types.int8, 32, 64, 1, "ld.global.u8"),
    (types.float16, 64, 64, 2, "ld.global.b16"),     # odd fp16 pitch
    (types.float16, 64, 64, 0, "ld.global.b16"),     # no contiguous dimension
    (types.float32, 16, 16, 0, "ld.global.b32"),
    (types.float64, 8, 16, 8, "ld.global.b64"),
    (types.float64, 8, 16, 16, "ld.global.v2.b64"),
])
def test_ldg_copy_piece_instructions(tmp_path, dtype, rows, cols, vec, instr):
    itemsize = dtype.bitwidth // 8
    lay = element_layout((rows, cols), itemsize)
    ptx = _ptx(_copy_kernel(rows, cols, vec, lay), _sig(dtype))
    assert re.search(rf"@p {re.escape(instr)} ", ptx), instr
    assert "cp.async" not in ptx
    assert "fence.proxy.async.shared::cta" in ptx and "mbarrier.arrive" in ptx
    assemble(ptx, tmp_path)
    ptx80 = _ptx(_copy_kernel(rows, cols, vec, lay, arch=80), _sig(dtype), cc=(8, 0))
    assert "fence.proxy.async" not in ptx80 and "mbarrier.arrive" in ptx80
    assemble(ptx80, tmp_path, "sm_80")


def test_ldg_copy_issues_a_batch_of_loads_before_its_stores():
    """A (64, 64) fp16 dot-operand part element by element: 32 elements per thread, in
    batches of BATCH loads then BATCH stores (memory-level parallelism)."""
    nbytes, boxes, box_cols, swizzle = layout_part((64, 64), 2)
    lay = {"phys_cols": 64, "box_cols": box_cols, "xor": True}
    ptx = _ptx(_copy_kernel(64, 64, 2, lay), _sig(types.float16))
    ops = re.findall(r"(ld\.global\.b16|st\.shared\.b16)", ptx)
    assert ops[:2 * BATCH] == ["ld.global.b16"] * BATCH + ["st.shared.b16"] * BATCH
    assert ptx.count("ld.global.b16") == BATCH   # one loop body (4 batches)


def test_ldg_copy_element_path_uses_the_run_time_strides():
    """vec 0: both strides come from the array (any sign); vec > 0: the column stride
    is the element size (contiguous rows), so fewer 64-bit multiplies."""
    lay = element_layout((16, 16), 4)
    general = _ptx(_copy_kernel(16, 16, 0, lay), _sig(types.float32))
    contiguous = _ptx(_copy_kernel(16, 16, 4, lay), _sig(types.float32))
    assert general.count("mul.lo.s64") > contiguous.count("mul.lo.s64")


def test_ldg_copy_of_1d_and_transposed_views(tmp_path):
    lay = element_layout((1, 256), 2)
    assemble(_ptx(_copy_kernel(1, 256, 0, lay), _sig(types.float16, 1)), tmp_path)
    lay = element_layout((64, 128), 2)
    assemble(_ptx(_copy_kernel(64, 128, 2, lay, transposed=1), _sig(types.float16)),
             tmp_path)


# -- whole kernels through ptxas --------------------------------------------------------------

GEMM_CASES = {
    "f16_K7": (kernels.matmul, lambda: _gemm_args(7, np.float16), GEMM),
    "bf16_K129": (kernels.matmul, lambda: _gemm_args(129, BF16), GEMM),
    "f16_K4001": (kernels.matmul, lambda: _gemm_args(4001, np.float16, 256, 256),
                  dict(BM=128, BN=256, BK=64)),
    "f16_colmajor_b_K129": (kernels.matmul, lambda: (f16(300, 129), f16(200, 129).T,
                                                     f16(300, 200)), GEMM),
    "f16_neg_cols": (kernels.matmul, lambda: (f16(300, 128)[:, ::-1], f16(128, 200),
                                              f16(300, 200)), GEMM),
    "nt_K129": (kernels.matmul_nt, lambda: (f16(300, 129), f16(200, 129), f16(300, 200)),
                GEMM),
}


#: every case with two consumer groups on both targets, two of them with one group too
GEMM_RUNS = [(name, target, 2) for name in GEMM_CASES for target in TARGETS] + [
    (name, target, 1) for name in ("f16_K7", "f16_colmajor_b_K129") for target in TARGETS]


@pytest.mark.parametrize("name,target,groups", GEMM_RUNS,
                         ids=[f"{n}-{t}-g{g}" for n, t, g in GEMM_RUNS])
def test_gemm_ptx_assembles_without_spills(tmp_path, name, target, groups):
    fn, make, meta = GEMM_CASES[name]
    ptx = ws.jit(fn).inspect_ptx(*make(), cc=TARGETS[target], num_consumer_groups=groups,
                                 **meta)
    assert re.search(r"@p ld\.global\.b16 ", ptx)
    assert "setmaxnreg" not in ptx    # the producer computes addresses: entry limit
    regs, spills, stack = resources(assemble(ptx, tmp_path, target))
    assert spills == [0, 0] and stack == 0, (regs, spills, stack)


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("fn,args,meta,want", [
    (kt.copy2d, (f16(100, 71), f16(100, 71)), dict(BM=32, BN=64), {"x": "ld.global"}),
    (kt.copy2d, (np.zeros((100, 71), np.int8), np.zeros((100, 71), np.int8)),
     dict(BM=32, BN=64), {"x": "ld.global"}),
    (kt.copy2d, (np.zeros((100, 64), np.int8), np.zeros((100, 64), np.int8)),
     dict(BM=64, BN=64), {"x": ("tma", "ld.global")}),   # 16-byte pieces on sm_80
    (kt.softmax, (f16(100, 71)[:, :64], f16(100, 64)), dict(BM=16, BN=64),
     {"x": "ld.global"}),
    (kt.softmax, (np.zeros((100, 64), np.float32)[::-1, ::-1], np.zeros((100, 64),
                                                                       np.float32)),
     dict(BM=16, BN=64), {"x": "ld.global"}),
    (kt.vec_add, (f16(1001)[::-1], f16(1001)[1:], f16(1001)), dict(B=256),
     {"a": "ld.global", "b": "ld.global"}),
], ids=["copy_f16_odd", "copy_i8_odd", "copy_i8", "softmax_f16_odd", "softmax_f32_rev",
        "vec_add_1d"])
def test_element_wise_kernels_assemble(tmp_path, fn, args, meta, want, target):
    """``want``: the path per array (a pair: on sm_90a, on sm_80)."""
    state = ws.jit(fn).partition(*args, cc=TARGETS[target], **meta)
    pick = 0 if target == "sm_90a" else 1
    assert paths(state) == {k: v if isinstance(v, str) else v[pick] for k, v in want.items()}
    ptx = ws.jit(fn).inspect_ptx(*args, cc=TARGETS[target], **meta)
    assemble(ptx, tmp_path, target)


# -- the schedule simulator --------------------------------------------------------------------

def _rng():
    return np.random.default_rng(15)


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("make,grid,meta", [
    (lambda r: (r.uniform(-8, 8, (100, 71)).astype(np.float16), f16(100, 71)), (4, 2),
     dict(BM=32, BN=64)),
    (lambda r: (r.integers(-128, 128, (100, 71)).astype(np.int8),
                np.zeros((100, 71), np.int8)), (4, 2), dict(BM=32, BN=64)),
    (lambda r: (r.uniform(-8, 8, (100, 140)).astype(np.float16)[::-1, ::-2],
                f16(100, 70)), (4, 2), dict(BM=32, BN=64)),
], ids=["f16_odd", "i8_odd", "f16_negative_every_other"])
def test_verify_copy(make, grid, meta, groups):
    x, y = make(_rng())
    report = ws.verify(kt.copy2d, grid, x, y, seeds=2, num_consumer_groups=groups, **meta)
    assert report.ok, str(report)


@pytest.mark.parametrize("groups", [1, 2])
def test_verify_softmax_odd_pitch(groups):
    x = _rng().uniform(-8, 8, (100, 71)).astype(np.float16)[:, :64]
    report = ws.verify(kt.softmax, (ws.cdiv(100, 32),), x, f16(100, 64), seeds=2,
                       num_consumer_groups=groups, BM=32, BN=64)
    assert report.ok, str(report)


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("K", [7, 129])
def test_verify_gemm_odd_k(K, groups):
    r = _rng()
    a = r.uniform(-1, 1, (200, K)).astype(np.float16)
    b = r.uniform(-1, 1, (K, 136)).astype(np.float16)[:, ::-1]
    c = np.full((200, 136), np.nan, np.float16)
    grid = (ws.cdiv(200, 128) * ws.cdiv(136, 128),)
    report = ws.verify(kernels.matmul, grid, a, b, c, seeds=2, max_programs=2,
                       num_consumer_groups=groups, **GEMM)
    assert report.ok, str(report)


# -- the launch cache -------------------------------------------------------------------------

def test_a_reversed_view_does_not_share_the_specialization_of_its_array():
    from numba_ws.runtime.binding import bind
    kern = ws.jit(kernels.matmul)
    a, b, c = _gemm_args(256, np.float16)
    keys = []
    for x in (a, a[::-1]):
        bound = bind(kern.fn, (x, b, c), dict(GEMM))
        described = {n: interop.describe(v, n) for n, v in bound.args.items()
                     if n not in bound.constexprs and interop.is_array(v)}
        assert array_info(bound, described)["a"]["tma_ok"] == (x is a)
        keys.append(kern._fast_key(bound, described))
    assert keys[0] != keys[1]
