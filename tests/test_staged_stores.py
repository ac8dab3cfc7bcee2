"""Option tma_store=1 without a GPU: which stores the staged_stores pass stages, how it
sizes the buffer, and the PTX (stmatrix, bulk tensor stores, the drain before the
return) that ptxas assembles. tests/gpu/test_staged_store_gpu.py runs them."""
import re

import numpy as np
import pytest

import numba_ws as ws
from numba_ws.errors import WSUsageError
from numba_ws.passes.verify import smem_limit
from numba_ws.runtime.autotune import Config

import kernels
from kernels import accumulate_matmul, shifted_matmul
from ptx_tools import assemble, resources, same_code

STAGED_STORE = "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"
STMATRIX = "stmatrix.sync.aligned.m8n8.x4.shared.b16"
REGS = dict(reg_dec_producer=56, reg_inc_consumer=224)


def _arrays(M=1000, N=1000, K=512, dtype=np.float16, c_pitch=None):
    a = np.zeros((M, K), dtype)
    b = np.zeros((K, N), dtype)
    c = np.zeros((M, c_pitch or N), dtype)[:, :N]
    return a, b, c


def _persistent(**meta):
    return dict(dict(BM=128, BN=256, BK=64, GROUP_M=8, tma_store=1), **meta)


def _notes(plan_view):
    return [n for n in plan_view.ws.notes if n.startswith("tma_store")]


def masked_matmul(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    M, K = a.shape
    pid_m = ws.program_id(0)
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(K, BK)):
        acc = ws.dot(ws.load(a, (pid_m * BM, k * BK), (BM, BK)),
                     ws.load(b, (k * BK, 0), (BK, BN)), acc)
    ws.store(c, (pid_m * BM, 0), acc, mask=acc > 0)


@pytest.mark.parametrize("slots,chunks", [(3, 1), (4, 2)])
def test_buffer_takes_what_shared_memory_leaves(slots, chunks):
    """3 slots of 48 KB leave room for both groups' 64x256 tiles (2 x 32 KB); 4 slots
    only for 64x128 halves."""
    kern = ws.jit(kernels.matmul_persistent)
    view = kern.partition(*_arrays(), **_persistent(num_buffers_warp_spec=slots))
    plan = view.ws
    width = 256 // chunks
    assert list(plan.staged.values()) == [width]
    assert plan.staging_bytes == 64 * width * 2
    assert plan.staging_offset % 1024 == 0
    assert plan.staging_offset >= max(ch.bar_offset + 16 * ch.num_slots for ch in plan.channels)
    assert plan.staging_offset + 2 * plan.staging_bytes <= plan.smem_bytes <= smem_limit(plan.cc)
    assert f"{chunks} chunk(s) of 64x{width}" in " ".join(_notes(view))
    assert "store staging" in repr(view)


@pytest.mark.parametrize("slots,chunks", [(3, 1), (4, 2)])
def test_staged_ptx_assembles(tmp_path, slots, chunks):
    """Per group body: 16 stmatrix.x4 (64x256 in 8x8 blocks, 4 per instruction), one
    bulk store per 64-column box, one read-wait per chunk and one before the return."""
    kern = ws.jit(kernels.matmul_persistent)
    ptx = kern.inspect_ptx(*_arrays(), **_persistent(num_buffers_warp_spec=slots, **REGS))
    assert ptx.count(STMATRIX) == 16
    assert ptx.count(STAGED_STORE) == 4
    assert ptx.count("cp.async.bulk.commit_group") == chunks
    assert ptx.count("cp.async.bulk.wait_group.read 0") >= chunks + 1   # + one per return
    assert ptx.count("fence.proxy.async.shared::cta") >= chunks
    assert "st.global.v4" not in ptx          # no direct epilogue left
    regs, spills, stack = resources(assemble(ptx, tmp_path))
    assert spills == [0, 0] and stack == 0, (regs, spills, stack)


def test_off_means_direct_stores_only():
    kern = ws.jit(kernels.matmul)
    meta = dict(BM=128, BN=256, BK=64, tma_store=0)
    ptx = kern.inspect_ptx(*_arrays(), **meta)
    assert STMATRIX not in ptx and STAGED_STORE not in ptx
    assert "st.global.v4" in ptx and ptx.count("st.u16") == 128   # the checked edge path
    assert kern.partition(*_arrays(), **meta).ws.staged == {}


def test_edge_mode_stages_the_edge_tiles_only(tmp_path):
    """tma_store=2: interior tiles keep the 16-byte stores, edge tiles go through TMA
    instead of the unrolled checked path, which leaves the PTX."""
    kern = ws.jit(kernels.matmul)
    meta = dict(BM=128, BN=256, BK=64, tma_store=2)
    edge = kern.inspect_ptx(*_arrays(), **meta)
    direct = kern.inspect_ptx(*_arrays(), **dict(meta, tma_store=0))
    assert "st.global.v4" in edge and edge.count(STAGED_STORE) == 4
    assert "st.u16" not in edge
    assert len(edge) < 0.95 * len(direct), (len(edge), len(direct))
    view = kern.partition(*_arrays(), **meta)
    assert view.ws.staging_edge_only and list(view.ws.staged.values()) == [256]
    assert any("edge tiles through shared memory + TMA" in n for n in _notes(view))
    regs, spills, stack = resources(assemble(edge, tmp_path))
    assert spills == [0, 0] and stack == 0


def test_edge_mode_leaves_stores_in_loops_direct(tmp_path):
    """In a persistent tile loop the staged code made ptxas spill the 40-register
    producer: tma_store=2 stages nothing there (tma_store=1 does)."""
    kern = ws.jit(kernels.matmul_persistent)
    meta = _persistent(tma_store=2)
    assert kern.partition(*_arrays(), **meta).ws.staged == {}
    ptx = kern.inspect_ptx(*_arrays(), **meta)
    assert STAGED_STORE not in ptx
    regs, spills, stack = resources(assemble(ptx, tmp_path))
    assert spills == [0, 0] and stack == 0


def test_where_safe_mode_stages_stores_outside_loops(tmp_path):
    """tma_store=3 stages the one-tile-per-program GEMM's store as 1 does (same PTX),
    and leaves the persistent kernel's store in its tile loop direct."""
    kern = ws.jit(kernels.matmul)
    meta = dict(BM=128, BN=256, BK=64)
    safe = kern.inspect_ptx(*_arrays(), **meta, tma_store=3)
    assert same_code(safe) == same_code(kern.inspect_ptx(*_arrays(), **meta, tma_store=1))
    assert safe.count(STAGED_STORE) == 4 and "st.u16" not in safe
    assert list(kern.partition(*_arrays(), **meta, tma_store=3).ws.staged.values()) == [256]
    regs, spills, stack = resources(assemble(safe, tmp_path))
    assert spills == [0, 0] and stack == 0
    persistent = ws.jit(kernels.matmul_persistent)
    assert persistent.partition(*_arrays(), **_persistent(tma_store=3)).ws.staged == {}


def test_where_safe_mode_leaves_an_array_the_kernel_reads_direct():
    """A bulk store completes asynchronously: with 3 a kernel that also loads ``c`` keeps
    its direct store; 1 stages it (the user asked for it)."""
    kern = ws.jit(accumulate_matmul)
    a, b, c = _arrays(512, 512, 256)
    meta = dict(BM=128, BN=256, BK=64)
    view = kern.partition(a, b, c, **meta, tma_store=3)
    assert view.ws.staged == {}
    assert any("direct store (the kernel also loads or stores 'c' elsewhere)" in n
               for n in _notes(view)), _notes(view)
    assert kern.partition(a, b, c, **meta, tma_store=1).ws.staged != {}
    assert STAGED_STORE not in kern.inspect_ptx(a, b, c, **meta, tma_store=3)


@pytest.mark.parametrize("mode", [1, 3])
@pytest.mark.parametrize("shift,staged", [(1, False), (4, False), (8, True)])
def test_store_at_an_unaligned_column_stays_direct(mode, shift, staged):
    """TMA faults on an innermost coordinate that is not a multiple of 16 bytes (the GPU
    fuzzer's ``ws.store(out, (r0, c0 + 1), acc)``, an illegal instruction, 2026-12-07):
    a store at ``pid_n * BN + SHIFT`` is staged only when SHIFT fp16 elements are."""
    kern = ws.jit(shifted_matmul)
    a, b, _ = _arrays(256, 256, 128)
    c = np.zeros((256, 256 + 16), np.float16)[:, :256 + shift]    # a 16-byte row pitch
    meta = dict(BM=128, BN=256, BK=64, SHIFT=shift, tma_store=mode)
    view = kern.partition(a, b, c, **meta)
    assert bool(view.ws.staged) == staged, _notes(view)
    if not staged:
        assert any(f"column offset is only {2 * shift}-byte aligned" in n
                   for n in _notes(view)), _notes(view)
    assert (STAGED_STORE in kern.inspect_ptx(a, b, c, **meta)) == staged


def test_default_says_why_each_store_stays_direct():
    """With the default (3) every store left direct has a plan note with its reason."""
    a, b, c = _arrays(512, 128, 256)
    masked = ws.jit(masked_matmul).partition(a, b, c, BM=128, BN=128, BK=64)
    assert masked.ws.staged == {} and any("direct store (a masked store)" in n
                                          for n in _notes(masked)), _notes(masked)
    persistent = ws.jit(kernels.matmul_persistent).partition(
        *_arrays(), **_persistent(tma_store=3))
    assert persistent.ws.staged == {}
    assert any("direct store (inside a loop" in n for n in _notes(persistent)), \
        _notes(persistent)


@pytest.mark.parametrize("why,arrays,expect", [
    ("odd row pitch", _arrays(c_pitch=1001), "TMA cannot write 'c'"),
    ("fp32 output", (*_arrays()[:2], np.zeros((1000, 1000), np.float32)),
     "stmatrix writes 2-D arrays of 2-byte elements"),
])
def test_stores_tma_cannot_write_stay_direct(why, arrays, expect):
    kern = ws.jit(kernels.matmul_persistent)
    view = kern.partition(*arrays, **_persistent(num_buffers_warp_spec=3))
    assert view.ws.staged == {}, why
    assert any("direct store" in n and expect in n for n in _notes(view)), _notes(view)
    ptx = kern.inspect_ptx(*arrays, **_persistent(num_buffers_warp_spec=3))
    assert STMATRIX not in ptx


def test_masked_store_stays_direct():
    kern = ws.jit(masked_matmul)
    a, b, c = _arrays(512, 128, 256)
    view = kern.partition(a, b, c, BM=128, BN=128, BK=64, tma_store=1)
    assert view.ws.staged == {}
    assert any("a masked store" in n for n in _notes(view))


def test_sm80_has_no_staged_store():
    kern = ws.jit(kernels.matmul)
    a, b, c = _arrays()
    view = kern.partition(a, b, c, BM=128, BN=128, BK=64, tma_store=1, cc=(8, 0))
    assert view.ws.staged == {}
    assert any("sm_80 has no TMA store" in n for n in _notes(view))


def test_ping_pong_groups_stage_whole_tiles(tmp_path):
    kern = ws.jit(kernels.matmul_persistent)
    meta = _persistent(BN=128, num_buffers_warp_spec=2, ping_pong=1)
    plan = kern.partition(*_arrays(), **meta).ws
    assert sorted(plan.staged.values()) == [128, 128]      # one store per group's clone
    assert plan.staging_bytes == 128 * 128 * 2
    assemble(kern.inspect_ptx(*_arrays(), **meta), tmp_path)


@pytest.mark.parametrize("bad", [4, -1, True])
def test_tma_store_is_validated(bad):
    with pytest.raises(WSUsageError, match="tma_store"):
        ws.jit(kernels.matmul).inspect_ptx(*_arrays(), BM=128, BN=128, BK=64, tma_store=bad)


def test_config_takes_any_option_by_name_or_position():
    cfg = Config(dict(BM=128), 2, 3, tma_store=1, nvvm_opt=1)
    assert cfg.options.num_buffers_warp_spec == 3 and cfg.options.tma_store == 1
    assert cfg.options.nvvm_opt == 1 and cfg.options.reg_dec_producer == 40
    with pytest.raises(WSUsageError, match="unknown option 'tma_stor'"):
        Config(dict(BM=128), tma_stor=1)
    with pytest.raises(WSUsageError, match="positional options"):
        Config(dict(BM=128), *range(1, 20))
    with pytest.raises(WSUsageError, match="Config: "):
        Config(dict(BM=128), 2, num_consumer_groups=1)
    assert re.search(r"tma_store=1", repr(cfg))
