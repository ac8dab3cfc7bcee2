"""PTX of the warp-specialized GEMM for sm_90a, built without a GPU and assembled by ptxas."""
import re

import numpy as np
import pytest

import numba_ws as ws
import kernels
from ptx_tools import assemble, resources



def f16(*shape):
    return np.zeros(shape, np.float16)


def _assemble(ptx, tmp_path):
    return assemble(ptx, tmp_path, "sm_90a")


def _assemble_sm80(ptx, tmp_path):
    return assemble(ptx, tmp_path, "sm_80")


_resources = resources


@pytest.mark.parametrize("kernel,extra", [(kernels.matmul, {}),
                                          (kernels.matmul_persistent, {"GROUP_M": 8})])
def test_gemm_ptx_has_the_hopper_instructions_and_no_spills(tmp_path, kernel, extra):
    ptx = ws.jit(kernel).inspect_ptx(f16(512, 256), f16(256, 512), f16(512, 512),
                                      BM=128, BN=256, BK=64, **extra)
    assert ".target sm_90a" in ptx
    for instr in ("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16", "cp.async.bulk.tensor",
                  "mbarrier.try_wait.parity", "setmaxnreg.dec.sync.aligned.u32 40",
                  "setmaxnreg.inc.sync.aligned.u32 232", "mbarrier.arrive.expect_tx",
                  "wgmma.wait_group.sync.aligned"):
        assert instr in ptx, instr
    assert ".maxntid 384" in ptx and ".minnctapersm 1" in ptx
    regs, spills, stack = _resources(_assemble(ptx, tmp_path))
    assert spills == [0, 0] and stack == 0 and regs <= 168


@pytest.mark.parametrize("kernel,extra", [(kernels.matmul, {}),
                                          (kernels.matmul_persistent, {"GROUP_M": 8})])
@pytest.mark.parametrize("groups,bn", [(1, 128), (2, 256)])
def test_in_flight_wgmma_is_not_serialised(tmp_path, kernel, extra, groups, bn):
    """dot_in_flight=1 keeps one wgmma group in flight across K iterations. ptxas serialised
    every wgmma (C7514) when the accumulator was read after a K loop that may run zero
    times; the fence after the last wait now redefines each accumulator register."""
    ptx = ws.jit(kernel).inspect_ptx(f16(512, 256), f16(256, 512), f16(512, 512), BM=128,
                                      BN=bn, BK=64, num_consumer_groups=groups,
                                      num_buffers_warp_spec=4, dot_in_flight=1, **extra)
    assert "wgmma.wait_group.sync.aligned 1;" in ptx
    assert "add.rn.f32" in ptx and "0f80000000" in ptx
    log = _assemble(ptx, tmp_path)
    assert "C7514" not in log and "serialized" not in log, log


def test_one_branch_per_warp_group(tmp_path):
    ptx = ws.jit(kernels.matmul).inspect_ptx(f16(512, 256), f16(256, 512), f16(512, 512),
                                             BM=192, BN=128, BK=64, num_consumer_groups=3,
                                             reg_inc_consumer=152)
    # the producer's dec and one inc per consumer branch: one setmaxnreg per branch (the
    # three groups share one consumer branch unless shared_consumer_body=0)
    assert ptx.count("setmaxnreg.dec") == 1 and ptx.count("setmaxnreg.inc") == 1
    _assemble(ptx, tmp_path)
    apart = ws.jit(kernels.matmul).inspect_ptx(f16(512, 256), f16(256, 512), f16(512, 512),
                                               BM=192, BN=128, BK=64, num_consumer_groups=3,
                                               reg_inc_consumer=152, shared_consumer_body=0)
    assert apart.count("setmaxnreg.dec") == 1 and apart.count("setmaxnreg.inc") == 3
    _assemble(apart, tmp_path)


def test_bf16_and_cp_async_paths_assemble(tmp_path):
    bf = np.zeros((130, 200), dtype=ws.bfloat16.dtype)
    ptx = ws.jit(kernels.matmul).inspect_ptx(bf, np.zeros((200, 300), ws.bfloat16.dtype),
                                             f16(130, 300), BM=128, BN=256, BK=64)
    assert "f32.bf16.bf16" in ptx
    assert "cp.async.ca.shared.global" in ptx       # b's 600-byte rows: 8-byte pieces
    assert "cp.async.bulk.tensor" not in ptx
    regs, spills, stack = _resources(_assemble(ptx, tmp_path))
    assert spills == [0, 0]


def _column_max(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    acc = ws.dot(ws.load(a, (0, 0), (BM, BK)), ws.load(b, (0, 0), (BK, BN)))
    ws.store(c, (0, 0), (acc - ws.max(acc, 0, keepdims=True)).astype(ws.float16))


def test_column_reduction_of_an_accumulator_exchanges_between_warps(tmp_path):
    """``ws.max(acc, 0, keepdims=True)``: the accumulator's rows are spread over the 4 warps of the
    group, so the column maxima meet in the scratch region (st.shared, bar.sync of the
    group's 128 threads, ld.shared); the M split is impossible (axis 0 must stay whole),
    so the two consumer groups split N."""
    ptx = ws.jit(_column_max).inspect_ptx(f16(512, 256), f16(256, 512), f16(512, 512),
                                          BM=128, BN=256, BK=64)
    assert re.search(r"bar\.sync\s+%r\d+, 128;", ptx)
    assert "st.shared.b32" in ptx and "ld.shared.b32" in ptx
    regs, spills, stack = _resources(_assemble(ptx, tmp_path))
    assert spills == [0, 0]


def test_accumulator_over_the_register_limit_is_a_compile_error():
    with pytest.raises(ws.WSResourceError, match="accumulator"):
        ws.jit(kernels.matmul).partition(f16(512, 256), f16(256, 512), f16(512, 512),
                                         BM=192, BN=256, BK=64, num_consumer_groups=3,
                                         reg_inc_consumer=152)


def test_disable_knob_compiles_one_warp_group_without_specialization(tmp_path):
    from numba_ws import knobs
    with knobs.scope(NUMBA_WS_DISABLE=True):
        ptx = ws.jit(kernels.matmul).inspect_ptx(f16(512, 256), f16(256, 512), f16(512, 512),
                                                 BM=128, BN=128, BK=64)
        state = ws.jit(kernels.matmul).partition(f16(512, 256), f16(256, 512),
                                                 f16(512, 512), BM=128, BN=128, BK=64)
    assert state.ws.fused and state.ws.num_threads == 128 and list(state.ws.branches) == [1]
    assert ".maxntid 128" in ptx and "setmaxnreg" not in ptx
    assert "cp.async.bulk.tensor" in ptx and "wgmma.mma_async" in ptx
    regs, spills, stack = _resources(_assemble(ptx, tmp_path))
    assert spills == [0, 0]


# --- the sm_80 path: cp.async + ldmatrix/mma.sync + test_wait, no setmaxnreg ------------

SM90_ONLY = ("wgmma", "setmaxnreg", "cp.async.bulk", "fence.proxy.async", "try_wait",
             "fence.mbarrier_init", "expect_tx")


@pytest.mark.parametrize("kernel,args,meta,dt", [
    (kernels.matmul, (f16(512, 256), f16(256, 512), f16(512, 512)), {}, "f16"),
    (kernels.matmul_persistent, (f16(512, 256), f16(256, 512), f16(512, 512)),
     {"GROUP_M": 8}, "f16"),
    (kernels.matmul, (np.zeros((130, 200), ws.bfloat16.dtype),
                      np.zeros((200, 300), ws.bfloat16.dtype), f16(130, 300)), {}, "bf16"),
])
def test_sm80_gemm_ptx_is_cp_async_and_mma_sync_without_spills(tmp_path, kernel, args, meta, dt):
    ptx = ws.jit(kernel).inspect_ptx(*args, cc=(8, 0), BM=128, BN=256, BK=64, **meta)
    assert ".target sm_80" in ptx
    for instr in (f"mma.sync.aligned.m16n8k16.row.col.f32.{dt}.{dt}.f32",
                  "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                  "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "cp.async.",
                  "mbarrier.test_wait.parity.shared::cta.b64", "mbarrier.arrive",
                  "mbarrier.init", "bar.warp.sync"):
        assert instr in ptx, instr
    for instr in SM90_ONLY:
        assert instr not in ptx, instr
    # 64 x 256 fp32 accumulator per consumer thread (128 registers) under the entry
    # limit of 384 threads: 168
    regs, spills, stack = _resources(_assemble_sm80(ptx, tmp_path))
    assert spills == [0, 0] and stack == 0 and regs <= 168


def test_sm80_plan_has_no_setmaxnreg_and_no_tma():
    state = ws.jit(kernels.matmul).partition(f16(512, 256), f16(256, 512), f16(512, 512),
                                             cc=(8, 0), BM=128, BN=256, BK=64)
    plan = state.ws
    assert all(ch.lowering == "cp.async" for ch in plan.channels)
    assert plan.entry_registers == 168
    assert any("setmaxnreg left out: sm_80" in n for n in plan.notes)


def test_sm80_transposed_b_reads_without_trans_and_a_last_x2(tmp_path):
    """bt (N, K) with 520-byte rows (8-byte cp.async pieces), BN = 72: nine n8 blocks."""
    ptx = ws.jit(kernels.matmul_nt).inspect_ptx(f16(300, 260), f16(200, 260), f16(300, 200),
                                                cc=(8, 0), BM=128, BN=72, BK=64,
                                                num_consumer_groups=1)
    assert ".trans" not in ptx and "ldmatrix.sync.aligned.m8n8.x2.shared.b16" in ptx
    assert "cp.async.ca.shared.global" in ptx
    for instr in SM90_ONLY:
        assert instr not in ptx, instr
    regs, spills, stack = _resources(_assemble_sm80(ptx, tmp_path))
    assert spills == [0, 0] and stack == 0


def test_column_major_b_is_read_through_its_transposed_view(tmp_path):
    """b with strides (2, 2K): TMA over the (N, K) row-major view, the tile stored K-major
    (phys = (BN, BK)) and wgmma without B transposition (tnspB = 0)."""
    a, c = f16(512, 256), f16(512, 384)
    b = np.asfortranarray(f16(256, 384))
    kern = ws.jit(kernels.matmul)
    state = kern.partition(a, b, c, BM=128, BN=128, BK=64, num_consumer_groups=1)
    members = {m["var"]: m for ch in state.ws.channels for m in ch.members}
    assert members["y"]["transposed"] and not members["x"]["transposed"]
    assert [p["phys"] for p in members["y"]["parts"]] == [(128, 64)]
    ptx = kern.inspect_ptx(a, b, c, BM=128, BN=256, BK=64)
    flags = re.findall(r"ws_p, 1, 1, 0, ([01]);", ptx)
    assert flags and set(flags) == {"0"}, set(flags)
    regs, spills, stack = _resources(_assemble(ptx, tmp_path))
    assert spills == [0, 0] and stack == 0
    row_major = kern.inspect_ptx(a, np.ascontiguousarray(b), c, BM=128, BN=256, BK=64)
    assert set(re.findall(r"ws_p, 1, 1, 0, ([01]);", row_major)) == {"1"}


def test_column_major_b_on_sm80_reads_the_transposed_view(tmp_path):
    """sm_80: cp.async copies the column-major b along its contiguous dimension (K), the
    tile lands K-major and ldmatrix reads it without .trans (row-major b needs .trans)."""
    a, c = f16(512, 256), f16(512, 384)
    kern = ws.jit(kernels.matmul)
    col = kern.inspect_ptx(a, np.asfortranarray(f16(256, 384)), c, cc=(8, 0), BM=128,
                           BN=128, BK=64)
    row = kern.inspect_ptx(a, f16(256, 384), c, cc=(8, 0), BM=128, BN=128, BK=64)
    assert "ldmatrix.sync.aligned.m8n8.x4.trans" not in col
    assert "ldmatrix.sync.aligned.m8n8.x4.trans" in row
    assert "cp.async.cg.shared.global" in col
    regs, spills, stack = _resources(_assemble_sm80(col, tmp_path))
    assert spills == [0, 0] and stack == 0


def test_column_major_b_with_unaligned_columns_loads_through_ld_global():
    """A column-major b whose columns start 2 bytes off alignment and lie 18 bytes apart
    fits neither TMA nor 4-byte cp.async pieces: the producer reads it with ld.global
    (issue 15 item 6; it was a compile error before)."""
    b = np.asfortranarray(f16(9, 384))[1:, :]
    assert b.strides == (2, 18)
    state = ws.jit(kernels.matmul).partition(f16(512, 8), b, f16(512, 384), BM=128, BN=128,
                                             BK=64)
    paths = {m["var"].split(".")[0]: m["path"] for ch in state.ws.channels for m in ch.members}
    assert "ld.global" in paths.values(), paths


def test_sm80_resource_checks():
    args = (f16(512, 256), f16(256, 512), f16(512, 512))
    # 4 slots x 48 KB fit sm_90's 227 KB, not sm_80's 163 KB
    ws.jit(kernels.matmul).partition(*args, BM=128, BN=256, BK=64, num_buffers_warp_spec=4)
    with pytest.raises(ws.WSResourceError, match="166912 bytes on sm_80"):
        ws.jit(kernels.matmul).partition(*args, cc=(8, 0), BM=128, BN=256, BK=64,
                                         num_buffers_warp_spec=4)
    # no setmaxnreg: 512 threads keep 128 registers, too few for a 64 x 256 accumulator
    with pytest.raises(ws.WSResourceError, match="no setmaxnreg below sm_90"):
        ws.jit(kernels.matmul).partition(*args, cc=(8, 0), BM=192, BN=256, BK=64,
                                         num_consumer_groups=3, num_buffers_warp_spec=2)
    with pytest.raises(ws.WSCompileError, match="sm_80 or newer"):
        ws.jit(kernels.matmul).partition(*args, cc=(7, 5), BM=128, BN=256, BK=64)


def test_cc_knob():
    from numba_ws import knobs
    for raw, cc in (("8.0", (8, 0)), ("8.6", (8, 6)), ("9.0", (9, 0, "a")),
                    ("9.0a", (9, 0, "a")), (None, None)):
        with knobs.scope(NUMBA_WS_CC=raw):
            assert knobs.target_cc() == cc
    with knobs.scope(NUMBA_WS_CC="sm80"), pytest.raises(ValueError):
        knobs.target_cc()


def _descriptor_fields(ptx):
    """(swizzle mode, SBO bytes, LBO bytes) of each distinct descriptor constant."""
    out = set()
    for v in re.findall(r"or\.b64\s+%rd\d+, %rd\d+, (-?\d+);", ptx):
        v = int(v) & (2**64 - 1)
        if v >> 62:
            out.add((v >> 62, ((v >> 32) & 0x3FFF) << 4, ((v >> 16) & 0x3FFF) << 4))
    return out


@pytest.mark.parametrize("bk,swizzle,mode", [(32, 64, 2), (16, 32, 3)])
def test_narrow_k_tile_uses_the_matching_swizzle(tmp_path, bk, swizzle, mode):
    """BK=32 (16) fp16: A's rows are 64 (32) bytes, laid out and read with the 64-byte
    (32-byte) swizzle: TMA boxes of 32 (16) columns, wgmma descriptors with swizzle mode
    2 (3) and SBO = 8 rows x 64 (32) bytes; B (N-major, 512-byte rows) keeps 128 bytes."""
    kern = ws.jit(kernels.matmul_persistent)
    args = (f16(512, 256), f16(256, 512), f16(512, 512))
    meta = dict(BM=128, BN=256, BK=bk, GROUP_M=8, num_buffers_warp_spec=8, dot_in_flight=1)
    state = kern.partition(*args, **meta)
    x, y = state.ws.channels[0].members
    assert {(p["swizzle"], p["box_cols"], p["boxes"]) for p in x["parts"]} == \
        {(swizzle, bk, 1)}
    assert {p["swizzle"] for p in y["parts"]} == {128}
    ptx = kern.inspect_ptx(*args, **meta)
    fields = _descriptor_fields(ptx)
    assert (mode, 8 * swizzle, 16) in fields and (1, 1024, bk * 128) in fields, fields
    regs, spills, stack = _resources(_assemble(ptx, tmp_path))
    assert spills == [0, 0] and stack == 0


def test_narrow_tile_on_the_cp_async_path_is_a_clear_error():
    """cp.async (sm_80 here) writes only the 128-byte swizzle: BK=32 is refused, naming
    the tile and the block size it needs."""
    with pytest.raises(ws.WSCompileError, match=r"tile x .*64-byte swizzle.*sm_80's "
                                                r"mma.sync.*128-byte.*multiple of 64"):
        ws.jit(kernels.matmul).inspect_ptx(f16(512, 256), f16(256, 512), f16(512, 512),
                                           cc=(8, 0), BM=128, BN=128, BK=32)


@pytest.mark.parametrize("bn,swizzle,mode", [(16, 32, 3), (32, 64, 2), (48, 32, 3),
                                             (96, 64, 2)])
def test_narrow_n_major_b_tile_uses_the_matching_swizzle(tmp_path, bn, swizzle, mode):
    """A row-major B tile of BN fp16 columns whose rows are not a multiple of 128 bytes is
    N-major in the 32 / 64-byte swizzle: its descriptor has that mode, SBO = 8 K rows x
    swizzle bytes and LBO = BK x swizzle bytes (the next box); A keeps 128 bytes."""
    kern = ws.jit(kernels.matmul)
    args = (f16(512, 256), f16(256, 512), f16(512, 512))
    ptx = kern.inspect_ptx(*args, BM=64, BN=bn, BK=64, num_consumer_groups=1)
    fields = _descriptor_fields(ptx)
    assert fields == {(1, 1024, 16), (mode, 8 * swizzle, 64 * swizzle)}, fields
    assert f"wgmma.mma_async.sync.aligned.m64n{bn}k16" in ptx
    regs, spills, stack = _resources(_assemble(ptx, tmp_path))
    assert spills == [0, 0] and stack == 0


def test_n_major_b_tile_narrower_than_32_bytes_is_a_clear_error():
    """BN = 8 fp16 (16-byte rows): no swizzle width fits; refused, naming the tile."""
    with pytest.raises(ws.WSCompileError, match=r"tile y part \(64, 8\).*multiple of 32 "
                                                r"bytes \(16 elements\)"):
        ws.jit(kernels.matmul).inspect_ptx(f16(512, 256), f16(256, 512), f16(512, 512),
                                           BM=64, BN=8, BK=64, num_consumer_groups=1)


@pytest.mark.parametrize("form", ["trans_view", "column_major_array"])
@pytest.mark.parametrize("groups,BM", [(1, 64), (1, 128), (2, 128), (2, 256)])
def test_m_major_a_reads_its_transposed_layout(tmp_path, form, groups, BM):
    """A as ``ws.trans`` of a loaded (BK, BM) tile, or a column-major ``a``: the tile lands
    M-major (boxes of 64 M columns); each wgmma has imm-trans-a 1 and A's descriptor the
    MN-major strides (LBO = BK x 128 bytes, SBO 1024); ptxas without spills."""
    b, c = f16(256, 512), f16(512, 512)
    meta = dict(BM=BM, BN=128, BK=64, num_consumer_groups=groups)
    if form == "trans_view":
        ptx = ws.jit(kernels.matmul_tn).inspect_ptx(f16(256, 512), b, c, **meta)
    else:
        a = np.zeros((512, 256), np.float16, order="F")
        ptx = ws.jit(kernels.matmul).inspect_ptx(a, b, c, **meta)
    assert set(re.findall(r"ws_p, 1, 1, (\d), (\d);", ptx)) == {("1", "1")}
    fields = _descriptor_fields(ptx)
    assert fields == {(1, 1024, 64 * 128)}, fields     # both operands MN-major, none K-major
    regs, spills, stack = _resources(_assemble(ptx, tmp_path))
    assert spills == [0, 0] and stack == 0


def test_m_major_a_on_sm80_is_a_clear_error():
    with pytest.raises(ws.WSCompileError, match=r"sm_80: a transposed \(M-major\) A"):
        ws.jit(kernels.matmul_tn).inspect_ptx(f16(256, 512), f16(256, 512), f16(512, 512),
                                              cc=(8, 0), BM=128, BN=128, BK=64)


@pytest.mark.parametrize("groups", [1, 2])
def test_m_major_a_schedule_matches_the_interpreter(groups):
    """The partitioned at.T @ b (each group its own 64 M columns of the loaded tile) under
    the schedule simulator, ragged M, N and K."""
    rng = np.random.default_rng(3)
    at = rng.uniform(-1, 1, (136, 200)).astype(np.float16)
    b = rng.uniform(-1, 1, (136, 72)).astype(np.float16)
    c = np.full((200, 72), np.nan, np.float32)
    report = ws.verify(kernels.matmul_tn, (2, 1), at, b, c, BM=128, BN=128, BK=64,
                       num_consumer_groups=groups, seeds=1)
    assert report.ok, str(report)
