"""PTX-level tests of numba_ws.codegen: compile for sm_90a without a GPU, check the emitted
instruction text, and assemble with ptxas (skipped only when ptxas is missing)."""
import os
import re
import shutil
import subprocess
import tempfile

import pytest
from numba import cuda
from numba.cuda import types

from numba_ws.codegen import (
    cp_async_16, cp_async_commit, cp_async_mbarrier_arrive_noinc, cp_async_wait_all,
    desc_value, elect_one, fence_mbarrier_init, fence_proxy_async_shared, frag_col,
    frag_row, frag_store, lane_id, mbarrier_arrive, mbarrier_arrive_expect_tx,
    mbarrier_init, mbarrier_try_wait, mbarrier_wait, named_barrier_sync, setmaxnreg_dec,
    setmaxnreg_inc, smem_base, thread_in_group, tma_load_2d, tma_load_3d,
    tma_prefetch_descriptor, tma_store_2d, tma_store_commit, tma_store_wait_read0,
    warp_group_id, warp_id, wgmma_commit_group, wgmma_desc, wgmma_fence,
    wgmma_fence_operand, wgmma_mma, wgmma_wait_group, wgmma_zero_acc,
)
from numba_ws.codegen.fragments import col_of, row_of

CC = (9, 0, "a")
U32_ARR = types.uint32[:]


def compile_ptx(fn, sig, **kw):
    ptx, _ = cuda.compile_ptx(fn, sig, cc=CC, **kw)
    return ptx


def assemble(ptx, verbose=False):
    """Assemble with ptxas for sm_90a; returns ptxas' output. Skips if ptxas is missing."""
    exe = shutil.which("ptxas")
    if exe is None:
        pytest.skip("ptxas not on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        cmd = [exe, "-arch=sm_90a", src, "-o", os.path.join(tmp, "k.cubin")]
        if verbose:
            cmd.insert(1, "-v")
        res = subprocess.run(cmd, capture_output=True, text=True)
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"ptxas failed:\n{out}\n--- PTX ---\n{ptx[-4000:]}"
    return out


def body(ptx):
    """The PTX without comment lines (inline asm markers)."""
    return "\n".join(ln for ln in ptx.splitlines() if not ln.strip().startswith("//"))


# ---------------------------------------------------------------- kernels, one per family

def k_smem(out):
    dyn = cuda.shared.array(0, dtype=types.float32)  # numba's own dynamic smem, same base
    dyn[0] = 1.0
    out[0] = smem_base()
    out[1] = warp_group_id()
    out[2] = thread_in_group()
    out[3] = lane_id()
    out[4] = warp_id()
    named_barrier_sync(1, 256)
    named_barrier_sync(out[5], out[6])
    fence_proxy_async_shared()


def k_mbarrier(out):
    bar = smem_base()
    if thread_in_group() == 0:
        mbarrier_init(bar, 1)
        mbarrier_init(bar + 8, 2)
        fence_mbarrier_init()
    cuda.syncthreads()
    mbarrier_arrive(bar)
    mbarrier_arrive_expect_tx(bar + 8, 32768)
    mbarrier_wait(bar, 0)
    mbarrier_wait(bar + 8, out[0])  # a second wait: its scoped label must not clash
    out[1] = 1 if mbarrier_try_wait(bar, 1) else 0


def k_elect(out):
    if elect_one():
        out[lane_id()] = 1


def k_tma(out, tmap):
    base = smem_base()
    if elect_one():
        tma_prefetch_descriptor(tmap)
        mbarrier_arrive_expect_tx(base, 16384)
        tma_load_2d(base + 1024, tmap, base, out[0], out[1])
        tma_load_3d(base + 2048, tmap, base, out[0], out[1], out[2])
        tma_store_2d(tmap, base + 4096, out[0], out[1])
        tma_store_commit()
        tma_store_wait_read0()


def k_cp_async(out, src):
    base = smem_base()
    t = thread_in_group()
    cp_async_16(base + 16 * t, src + 16 * t, out[t])
    cp_async_mbarrier_arrive_noinc(base)
    cp_async_commit()
    cp_async_wait_all()


def k_setmaxnreg(out):
    if warp_group_id() == 0:
        setmaxnreg_dec(40)
    else:
        setmaxnreg_inc(232)
    out[0] = 1


def k_wgmma_small(out, a_desc, b_desc):
    acc = wgmma_zero_acc(64)
    wgmma_fence()
    acc = wgmma_mma(acc, a_desc, b_desc, 0, "bf16", 0, 0)
    acc = wgmma_mma(acc, a_desc, b_desc, 1, "bf16", 1, 1)
    wgmma_commit_group()
    wgmma_wait_group(1)
    wgmma_wait_group(0)
    acc = wgmma_fence_operand(acc)
    out[0] = acc[0] + acc[31]


def k_wgmma_256(cptr, nk, m, n):
    base = smem_base()
    acc = wgmma_zero_acc(256)
    for _ in range(nk):
        wgmma_fence()
        acc = wgmma_mma(acc, wgmma_desc(base, 16, 1024, 1),
                        wgmma_desc(base + 16384, 8192, 1024, 1), 1, "f16", 0, 1)
        acc = wgmma_mma(acc, wgmma_desc(base + 32, 16, 1024, 1),
                        wgmma_desc(base + 16384 + 2048, 8192, 1024, 1), 1, "f16", 0, 1)
        wgmma_commit_group()
        wgmma_wait_group(0)
    acc = wgmma_fence_operand(acc)
    frag_store(acc, cptr, n, 0, 0, m, n, "f16")


# ---------------------------------------------------------------- tests

CASES = {
    "smem": (k_smem, (U32_ARR,), [
        ".extern .shared .align 1024 .b8 __numba_ws_dsmem[]", "%tid.x", "%laneid",
        "shfl.sync.idx.b32", "bar.sync 1, 256;", "fence.proxy.async.shared::cta;"]),
    "mbarrier": (k_mbarrier, (U32_ARR,), [
        "mbarrier.init.shared::cta.b64", "fence.mbarrier_init.release.cluster;",
        "mbarrier.arrive.shared::cta.b64 _,", "mbarrier.arrive.expect_tx.shared::cta.b64 _,",
        "mbarrier.try_wait.parity.shared::cta.b64", "bra WS_WAIT_LOOP;"]),
    "elect": (k_elect, (U32_ARR,), ["elect.sync _|ws_p, 0xffffffff;"]),
    "tma": (k_tma, (U32_ARR, types.uint64), [
        "prefetch.tensormap [",
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [",
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [",
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [",
        "cp.async.bulk.commit_group;", "cp.async.bulk.wait_group.read 0;"]),
    "cp_async": (k_cp_async, (U32_ARR, types.uint64), [
        "cp.async.cg.shared.global [", "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [",
        "cp.async.commit_group;", "cp.async.wait_all;"]),
    "setmaxnreg": (k_setmaxnreg, (U32_ARR,), [
        "setmaxnreg.dec.sync.aligned.u32 40;", "setmaxnreg.inc.sync.aligned.u32 232;"]),
    "wgmma": (k_wgmma_small, (types.float32[:], types.uint64, types.uint64), [
        "wgmma.fence.sync.aligned;", "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16",
        ", ws_p, 1, 1, 0, 0;", ", ws_p, 1, 1, 1, 1;", "setp.ne.b32 ws_p,",
        "wgmma.commit_group.sync.aligned;", "wgmma.wait_group.sync.aligned 1;",
        "wgmma.wait_group.sync.aligned 0;"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_family_ptx(name):
    fn, sig, expected = CASES[name]
    ptx = compile_ptx(fn, sig, launch_bounds=(384, 1))
    text = body(ptx)
    for needle in expected:
        assert needle in text, f"{name}: {needle!r} not in PTX:\n{text[-3000:]}"
    assert ".target sm_90a" in ptx
    assemble(ptx)


def test_cp_async_line_shape():
    text = body(compile_ptx(k_cp_async, (U32_ARR, types.uint64)))
    assert re.search(r"cp\.async\.cg\.shared\.global \[%r\d+\], \[%rd\d+\], 16, %r\d+;", text)


def test_tma_operands_innermost_first():
    text = body(compile_ptx(k_tma, (U32_ARR, types.uint64)))
    assert re.search(r"\[%r\d+\], \[%rd\d+, \{%r\d+, %r\d+\}\], \[%r\d+\];", text)
    assert re.search(r"\[%rd\d+, \{%r\d+, %r\d+, %r\d+\}\], \[%r\d+\];", text)


def test_mma_n256_accumulator_in_registers():
    """N=256: 128 f32 registers carried through a loop: no spills, no local memory."""
    ptx = compile_ptx(k_wgmma_256, (types.uint64, types.int32, types.int32, types.int32),
                      launch_bounds=(384, 1))
    text = body(ptx)
    mma = [ln for ln in text.splitlines() if "wgmma.mma_async" in ln]
    assert mma and all("m64n256k16.f32.f16.f16" in ln for ln in mma)
    regs = re.search(r"\{(%f\d+(?:, %f\d+)*)\}", text[text.index("m64n256k16"):])
    assert regs and len(regs.group(1).split(", ")) == 128
    assert "ws_p, 1, 1, 0, 1;" in text
    assert ".local" not in text and "ld.local" not in text and "st.local" not in text
    out = assemble(ptx, verbose=True)
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", out), out
    assert re.search(r"0 bytes stack frame", out), out
    assert "C7519" not in out, out  # ptxas did not have to inject wgmma fences


@pytest.mark.parametrize("addr,lbo,sbo,swz", [
    (0, 16, 1024, 1), (0x1000 + 32, 16, 1024, 1), (0x9000, 8192, 1024, 1), (0x7FF0, 0, 0, 3)])
def test_wgmma_desc_bits(addr, lbo, sbo, swz):
    value = desc_value(addr, lbo, sbo, swz)
    assert value & 0x3FFF == (addr & 0x3FFFF) >> 4
    assert (value >> 16) & 0x3FFF == lbo >> 4
    assert (value >> 32) & 0x3FFF == sbo >> 4
    assert (value >> 49) & 0x7 == 0 and value >> 62 == swz

    def k(out):
        out[0] = wgmma_desc(addr, lbo, sbo, swz)

    text = body(compile_ptx(k, (types.uint64[:],)))
    signed = value - (1 << 64) if value >> 63 else value  # PTX prints 64-bit ints signed
    assert re.search(rf"(?<![\d-]){signed}\b", text), f"{value} not folded into:\n{text}"


def test_fragment_layout_covers_tile_once():
    for n in (8, 64, 256):
        seen = set()
        for warp in range(4):
            for lane in range(32):
                for i in range(n // 2):
                    seen.add((row_of(i, lane, warp), col_of(i, lane)))
        assert seen == {(r, c) for r in range(64) for c in range(n)}
    # the m16n8 C layout: lane 5 holds (1, 2), (1, 3), (9, 2), (9, 3) of block 0
    assert [(row_of(i, 5, 0), col_of(i, 5)) for i in range(4)] == [(1, 2), (1, 3), (9, 2), (9, 3)]


@pytest.mark.parametrize("i,lane,warp", [(0, 0, 0), (5, 13, 2), (127, 31, 3), (66, 7, 1)])
def test_frag_intrinsics_match_reference(i, lane, warp):
    def k(out):
        out[0] = frag_row(i, lane, warp) * 4096 + frag_col(i, lane)

    text = body(compile_ptx(k, (types.int32[:],)))
    expected = row_of(i, lane, warp) * 4096 + col_of(i, lane)
    assert re.search(rf"\b{expected}\b", text), f"{expected} not in:\n{text}"


def test_frag_store_is_unrolled_and_masked():
    ptx = compile_ptx(k_wgmma_256, (types.uint64, types.int32, types.int32, types.int32),
                      launch_bounds=(384, 1))
    text = body(ptx)
    assert text.count("cvt.rn.f16.f32") == 128
    assert len(re.findall(r"st\.global\.(?:b16|u16)", text)) == 128


def _bad_dtype(out, d):
    out[0] = wgmma_mma(wgmma_zero_acc(8), d, d, 0, "f32", 0, 0)[0]


def _bad_trans(out, d):
    out[0] = wgmma_mma(wgmma_zero_acc(8), d, d, 0, "f16", 2, 0)[0]


def _bad_reg(out):
    setmaxnreg_inc(20)


def _bad_wait(out, n):
    wgmma_wait_group(n)


@pytest.mark.parametrize("fn,sig,match", [
    (_bad_dtype, (types.float32[:], types.uint64), "f16' or 'bf16"),
    (_bad_trans, (types.float32[:], types.uint64), "trans_a"),
    (_bad_reg, (U32_ARR,), "multiple of 8|not allowed"),
    (_bad_wait, (U32_ARR, types.int32), "compile-time constant|constant int"),
])
def test_typing_errors(fn, sig, match):
    with pytest.raises(Exception, match=match):
        compile_ptx(fn, sig)


def test_hand_gemm_kernel_assembles_without_spills():
    """The GPU test's hand-written GEMM compiles for sm_90a here (no GPU needed)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu", "test_hand_gemm.py")
    spec = importlib.util.spec_from_file_location("_hand_gemm", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sig = (types.int64,) * 7 + (types.uint32[::1],)
    ptx = compile_ptx(mod.hand_gemm.py_func, sig, launch_bounds=(384, 1))
    text = body(ptx)
    assert "m64n256k16.f32.f16.f16" in text and "setmaxnreg.inc.sync.aligned.u32 232;" in text
    out = assemble(ptx, verbose=True)
    assert "0 bytes spill stores, 0 bytes spill loads" in out, out
    assert "C7508" not in out, out  # setmaxnreg honoured: register count known at entry


def test_mma_shape_contract_is_shared_by_both_a_sources():
    """gpu_dot (A in shared memory) and gpu_dot_rs (A in registers) check one contract:
    matching K, M % 64, K % 16, N % 8, N <= 256 and the accumulator's type."""
    from numba.cuda import types
    from numba.cuda.core.errors import TypingError
    from numba_ws.codegen.tile_ops import dot_result_type, mma_result_type
    from numba_ws.language.types import FragType, SmemTileType
    b = SmemTileType(types.float16, (64, 256), (64, 256, False))
    assert mma_result_type(128, 64, b, None) == (FragType(types.float32, (128, 256)), False)
    for m, k in ((128, 32), (96, 64), (128, 40)):
        with pytest.raises(TypingError, match="need matching K"):
            mma_result_type(m, k, b, None)
    with pytest.raises(TypingError, match=r"dot\(acc\) must be"):
        mma_result_type(128, 64, b, FragType(types.float32, (64, 256)))
    a = SmemTileType(types.float16, (128, 32), (128, 32, False))
    with pytest.raises(TypingError, match="need matching K"):       # was unchecked here
        dot_result_type(a, b, None)
