"""A NumPy model of the sm_80 dot (codegen/mma_sync.py), run on the CPU.

The shared-memory image of A and B tiles is built the way cp_async_ops writes it (per
producer thread and vector piece, through ``swizzle.swizzled_offset``); every lane's
ldmatrix address comes from the same ``swizzle`` helpers the codegen calls; ldmatrix and
mma.m16n8k16 are modelled from their PTX ISA fragment layouts (9.7.14.5.15 and
9.7.14.5.8); the accumulator registers are read back through the FragType layout of
codegen/fragments.py and must equal A @ B. Integer-valued inputs make the float32 sums
exact, so the comparison is bitwise.

The register-A dot (``gpu_dot_rs_sm80``, attention's ``p.astype(fp16) @ v``) is modelled
the same way, with A taken from an accumulator-layout fragment and packed by
``wgmma_rs.a_register_indices``. Last, the sm_80 PTX of attention and of the chained
GEMM (the register-A dot alone) is assembled by ``ptxas -arch=sm_80``: no spills.
"""
import ctypes
import re

import numpy as np
import pytest

import numba_ws as ws
import kernels
from ptx_tools import assemble, resources
from numba_ws.codegen import swizzle as sw
from numba_ws.codegen.fragments import col_of, row_of
from numba_ws.codegen.wgmma_rs import a_register_indices

BF16 = ws.bfloat16.dtype
VEC_THREADS = 128


def _bits(x, dtype):
    return np.asarray(x, dtype=dtype).view(np.uint16)


def _decode(bits, dtype):
    bits = np.asarray(bits, dtype=np.uint16)
    if dtype == np.float16:
        return bits.view(np.float16).astype(np.float32)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def cp_async_image(tile, dtype, vec):
    """Shared memory (uint16 elements) of one part, as gpu_cp_async_copy writes it."""
    rows, cols = tile.shape
    bits = _bits(tile, dtype)
    epv = vec // 2
    per_row, nvec = cols * 2 // vec, rows * cols * 2 // vec
    smem = np.full(rows * cols, 0xFFFF, np.uint16)          # poison: every element is written
    for tid in range(VEC_THREADS):
        for i in range(nvec // VEC_THREADS):
            v = tid + i * VEC_THREADS
            r, col = v // per_row, (v % per_row) * epv
            off = sw.swizzled_offset(r, col, rows, 2)
            assert off % vec == 0
            smem[off // 2:off // 2 + epv] = bits[r, col:col + epv]
    return smem


def ldmatrix(smem, addrs, count, trans):
    """Per lane, ``count`` registers, each the (low, high) pair of 16-bit elements.

    Matrix i's row r is the 16 bytes at ``addrs[8 * i + r]``. Without ``.trans`` lane l
    gets row l // 4, elements 2 (l % 4) and 2 (l % 4) + 1; with ``.trans`` the elements
    (2 (l % 4), l // 4) and (2 (l % 4) + 1, l // 4) of the matrix."""
    mats = []
    for i in range(count):
        rows = []
        for r in range(8):
            a = addrs[8 * i + r]
            assert a % 16 == 0 and 0 <= a and a + 16 <= 2 * smem.size
            rows.append(smem[a // 2:a // 2 + 8])
        mats.append(np.array(rows))
    out = []
    for lane in range(32):
        g, t = lane // 4, lane % 4
        out.append([(m[g, 2 * t], m[g, 2 * t + 1]) if not trans
                    else (m[2 * t, g], m[2 * t + 1, g]) for m in mats])
    return out


def mma_m16n8k16(a_regs, b_regs, c_regs, dtype):
    """D = A B + C of one warp from the PTX fragments (g = lane // 4, t = lane % 4)."""
    A, B, C = np.zeros((16, 16)), np.zeros((16, 8)), np.zeros((16, 8), np.float32)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        a, b, c = a_regs[lane], b_regs[lane], c_regs[lane]
        for reg, (row, k) in enumerate([(g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8),
                                        (g + 8, 2 * t + 8)]):
            A[row, k:k + 2] = _decode(a[reg], dtype)
        for reg, k in enumerate([2 * t, 2 * t + 8]):
            B[k:k + 2, g] = _decode(b[reg], dtype)
        C[g, 2 * t:2 * t + 2], C[g + 8, 2 * t:2 * t + 2] = c[0:2], c[2:4]
    D = (A.astype(np.float32) @ B.astype(np.float32) + C).astype(np.float32)
    return [[D[lane // 4, 2 * (lane % 4)], D[lane // 4, 2 * (lane % 4) + 1],
             D[lane // 4 + 8, 2 * (lane % 4)], D[lane // 4 + 8, 2 * (lane % 4) + 1]]
            for lane in range(32)]


def model_mma_steps(a_regs_of, b_smem, b_rows, b_trans, m, n, kdim, dtype):
    """The loops of mma_sync._mma_steps (both sm_80 dots) for each of the 4 warps, with
    ``a_regs_of(warp, k16)`` giving, per 64-row block, each lane's four A registers as
    (low, high) pairs; the (m, n) result in the FragType layout read back through
    fragments.row_of / col_of."""
    per_block = n // 2
    out = np.full((m, n), np.nan, np.float32)
    for warp in range(4):
        acc = [np.zeros(m // 64 * per_block, np.float32) for _ in range(32)]
        for k16 in range(kdim // 16):
            a_regs = a_regs_of(warp, k16)
            for j, nregs in sw.b_loads(n):
                b_addr = [sum(sw.b_offset(lane, k16, j, b_rows, 2, b_trans))
                          for lane in range(32)]
                b_regs = ldmatrix(b_smem, b_addr, nregs, trans=not b_trans)
                for mi in range(m // 64):
                    for jj in range(nregs // 2):
                        at = mi * per_block + 4 * (j + jj)
                        d = mma_m16n8k16(a_regs[mi], [r[2 * jj:2 * jj + 2] for r in b_regs],
                                         [acc[lane][at:at + 4] for lane in range(32)], dtype)
                        for lane in range(32):
                            acc[lane][at:at + 4] = d[lane]
        for lane in range(32):
            for idx, v in enumerate(acc[lane]):
                mi, i = divmod(idx, per_block)
                out[64 * mi + row_of(i, lane, warp), col_of(i, lane)] = v
    return out


def model_dot(a_smem, a_rows, b_smem, b_rows, b_trans, m, n, kdim, dtype):
    """gpu_dot_sm80: A from shared memory, one ldmatrix.x4 per (64-row block, K step)."""
    def a_regs_of(warp, k16):
        return [ldmatrix(a_smem, [sum(sw.a_offset(lane, warp, mi, k16, a_rows, 2))
                                  for lane in range(32)], 4, trans=False)
                for mi in range(m // 64)]
    return model_mma_steps(a_regs_of, b_smem, b_rows, b_trans, m, n, kdim, dtype)


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("m,n,kdim,b_trans,vec", [
    (64, 256, 64, False, 16),     # the GEMM consumer tile: B K x N, N contiguous (.trans)
    (128, 128, 128, False, 8),    # two 64-row blocks, two K boxes
    (64, 192, 64, False, 4),      # three N boxes
    (64, 72, 128, True, 16),      # ws.trans of an N x K tile: no .trans, a last x2 load
    (128, 64, 64, True, 8),
])
def test_model_of_the_sm80_dot_equals_a_at_b(dtype, m, n, kdim, b_trans, vec):
    rng = np.random.default_rng(m * 7 + n * 3 + kdim)
    a = rng.integers(-4, 5, (m, kdim)).astype(dtype)
    b = rng.integers(-4, 5, (kdim, n)).astype(dtype)
    a_smem = cp_async_image(a, dtype, vec)
    b_phys = b.T.copy() if b_trans else b           # the tile as loaded (rows, cols)
    b_smem = cp_async_image(b_phys, dtype, vec)
    got = model_dot(a_smem, m, b_smem, b_phys.shape[0], b_trans, m, n, kdim, dtype)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_swizzled_offset_is_the_128_byte_swizzle():
    """Chunk c of row r stored at chunk c ^ (r % 8), boxes of 64 columns of rows * 128 B."""
    rows, cols = 24, 192
    for r in range(rows):
        for c in range(cols):
            box, cb = divmod(c, 64)
            want = box * rows * 128 + r * 128 + (((cb // 8) ^ (r % 8)) * 8 + cb % 8) * 2
            assert sw.swizzled_offset(r, c, rows, 2) == want


def test_block_offset_splits_the_swizzled_offset():
    for lane in range(32):
        for split in ("rows", "cols"):
            row, chunk = sw.ldmatrix_lane(lane, split)
            for r0 in (0, 8, 64):
                for c0 in (0, 16, 48, 64, 112):
                    fixed, part = sw.block_offset(r0, c0, row, chunk, 80, 2)
                    assert fixed + part == sw.swizzled_offset(r0 + row, c0 + 8 * chunk, 80, 2)
    with pytest.raises(ValueError):
        sw.block_offset(4, 0, 0, 0, 64, 2)


def _jit_lane_parts(fn):
    """Compile ``fn(IRInt lane, IRInt warp) -> IRInt`` to host code through llvmlite (the
    IR the intrinsic would emit) and return it as a Python callable."""
    import llvmlite.binding as llvm
    from llvmlite import ir
    from numba_ws.codegen._util import IRInt
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mod = ir.Module("lane_parts")
    i32 = ir.IntType(32)
    f = ir.Function(mod, ir.FunctionType(i32, [i32, i32]), "f")
    builder = ir.IRBuilder(f.append_basic_block())
    builder.ret(fn(IRInt(builder, f.args[0]), IRInt(builder, f.args[1])).value)
    target = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(mod)), target)
    engine.finalize_object()
    cfn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.c_int32)(
        engine.get_function_address("f"))
    cfn.engine = engine
    return cfn


def test_irint_codegen_computes_the_same_lane_offsets():
    """The LLVM arithmetic IRInt emits for the helpers equals their host-int value."""
    for mi, k16, rows in ((0, 0, 64), (1, 3, 128), (0, 5, 64)):
        f = _jit_lane_parts(lambda lane, warp: sw.a_offset(lane, warp, mi, k16, rows, 2)[1])
        for warp in range(4):
            for lane in range(32):
                assert f(lane, warp) == sw.a_offset(lane, warp, mi, k16, rows, 2)[1]
    for trans in (False, True):
        f = _jit_lane_parts(lambda lane, warp: sw.b_offset(lane, 2, 6, 64, 2, trans)[1])
        for lane in range(32):
            assert f(lane, 0) == sw.b_offset(lane, 2, 6, 64, 2, trans)[1]
    f = _jit_lane_parts(lambda r, c: sw.swizzled_offset(r, c, 48, 2))
    for r, c in ((0, 0), (7, 63), (13, 100), (47, 127)):
        assert f(r, c) == sw.swizzled_offset(r, c, 48, 2)


# --- the register-A dot (mma_sync.gpu_dot_rs_sm80): attention's p.astype(fp16) @ v -------

def acc_fragment_bits(mat, warp, dtype):
    """Per lane, the 16-bit registers of warp ``warp`` of an (M, K) fp16/bf16 fragment in
    the accumulator layout (what ``p.astype(ws.float16)`` holds): register ``mi*K/2 + i``
    of lane l is ``mat[64*mi + row_of(i, l, warp), col_of(i, l)]``."""
    m, k = mat.shape
    bits = _bits(mat, dtype)
    return [[bits[64 * mi + row_of(i, lane, warp), col_of(i, lane)]
             for mi in range(m // 64) for i in range(k // 2)] for lane in range(32)]


def packed_a_registers(frag, mi, k16, kdim):
    """Per lane, a0..a3 of (block mi, K step k16) as gpu_dot_rs_sm80 packs them: the .b32
    ``frag[lo] | frag[hi] << 16`` (wgmma_rs._pack_halves), read by the mma model as the
    (bits 0-15, bits 16-31) pair, i.e. (element k, element k + 1) of an .f16x2 operand."""
    out = []
    for lane in range(32):
        regs = [int(frag[lane][lo]) | int(frag[lane][hi]) << 16
                for lo, hi in a_register_indices(k16, mi, kdim)]
        out.append([(r & 0xFFFF, r >> 16) for r in regs])
    return out


def model_dot_rs(a, b_smem, b_rows, b_trans, n, dtype):
    """gpu_dot_rs_sm80: A from the accumulator-layout fragment of ``a``, no memory."""
    m, kdim = a.shape
    frags = [acc_fragment_bits(a, warp, dtype) for warp in range(4)]

    def a_regs_of(warp, k16):
        return [packed_a_registers(frags[warp], mi, k16, kdim) for mi in range(m // 64)]
    return model_mma_steps(a_regs_of, b_smem, b_rows, b_trans, m, n, kdim, dtype)


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("m,kdim,n,b_trans", [
    (64, 64, 64, False),      # attention BN = D = 64: p (64 x BN) @ v (BN x D), N contiguous
    (64, 128, 128, False),    # BN = D = 128: two 64-column boxes of v
    (128, 64, 128, False),    # two 64-row blocks of A share each B load
    (128, 128, 64, False),
    (64, 64, 128, True),      # B a transposed view (N x K stored): ldmatrix without .trans
    (128, 128, 64, True),
])
def test_model_of_the_register_a_sm80_dot_equals_a_at_b(dtype, m, kdim, n, b_trans):
    rng = np.random.default_rng(m * 5 + n * 3 + kdim + b_trans)
    a = rng.integers(-4, 5, (m, kdim)).astype(dtype)
    b = rng.integers(-4, 5, (kdim, n)).astype(dtype)
    b_phys = b.T.copy() if b_trans else b
    b_smem = cp_async_image(b_phys, dtype, 16)
    got = model_dot_rs(a, b_smem, b_phys.shape[0], b_trans, n, dtype)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_packed_a_registers_are_the_ldmatrix_a_fragment():
    """Per lane and warp the packed registers equal what gpu_dot_sm80's ldmatrix.x4 reads
    for the same (block, K step) of A in shared memory: the two dots feed the same mma."""
    rng = np.random.default_rng(3)
    a = rng.integers(-100, 100, (128, 64)).astype(np.float16)
    a_smem = cp_async_image(a, np.float16, 16)
    for warp in range(4):
        frag = acc_fragment_bits(a, warp, np.float16)
        for mi in range(2):
            for k16 in range(4):
                loaded = ldmatrix(a_smem, [sum(sw.a_offset(lane, warp, mi, k16, 128, 2))
                                           for lane in range(32)], 4, trans=False)
                packed = packed_a_registers(frag, mi, k16, 64)
                assert [[tuple(map(int, p)) for p in regs] for regs in loaded] == packed


@pytest.mark.parametrize("dtype", [ws.float16, ws.bfloat16], ids=["f16", "bf16"])
def test_pack_halves_puts_the_low_element_in_bits_0_to_15(dtype):
    """The LLVM that gpu_dot_rs_sm80 emits for one .b32 A register, on a fragment
    element's own LLVM type (numba-cuda's data model), run on the host (LLVM's vector
    layout is the same little-endian one on NVPTX): (lo, hi) -> lo | hi << 16."""
    import llvmlite.binding as llvm
    from llvmlite import ir
    from numba.cuda.descriptor import cuda_target
    from numba_ws.codegen.wgmma_rs import _pack_halves
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    elem = cuda_target.target_context.get_value_type(dtype.numba)
    mod = ir.Module("pack")
    i16, i32 = ir.IntType(16), ir.IntType(32)
    f = ir.Function(mod, ir.FunctionType(i32, [i16, i16]), "f")
    builder = ir.IRBuilder(f.append_basic_block())
    lo, hi = (builder.bitcast(x, elem) for x in f.args)
    builder.ret(_pack_halves(builder, lo, hi))
    target = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(str(mod)), target)
    engine.finalize_object()
    cfn = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_uint16, ctypes.c_uint16)(
        engine.get_function_address("f"))
    for lo, hi in ((0x3C00, 0xC000), (0x0001, 0xFFFF), (0xABCD, 0x1234)):
        assert cfn(lo, hi) == lo | hi << 16


# --- PTX of the sm_80 attention and chained GEMM, assembled by ptxas -sm_80 ---------------

_MMA = re.compile(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32")


def _sm80_resources(ptx, tmp_path):
    log = assemble(ptx, tmp_path, "sm_80")
    assert "warning" not in log.lower(), log
    return resources(log)


@pytest.mark.parametrize("BN,D", [(64, 64), (64, 128), (128, 64)])
def test_sm80_attention_ptx_assembles_without_spills(tmp_path, BN, D):
    q = np.zeros((1024, D), np.float16)
    ptx = ws.jit(kernels.attention_fwd).inspect_ptx(q, q, q, q, 512, 0.125, cc=(8, 0),
                                                    BM=128, BN=BN, D=D)
    assert ".target sm_80" in ptx
    for instr in ("wgmma", "setmaxnreg", "cp.async.bulk"):
        assert instr not in ptx, instr
    assert "ex2.approx.ftz.f32" in ptx and "shfl.sync.bfly.b32" in ptx
    # per consumer (2 x 64 rows): q k^T = D/16 K steps x BN/8 n8 blocks, p v = BN/16 x D/8
    assert len(_MMA.findall(ptx)) == 2 * (D // 16 * BN // 8 + BN // 16 * D // 8)
    # v (BN x D, D contiguous) is read with .trans: BN/16 x D/16 x4 loads per consumer;
    # k^T (a transposed view) and q without: D/16 x (BN/16 + 1)
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") == 2 * BN * D // 256
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 2 * D // 16 * (BN // 16 + 1)
    regs, spills, stack = _sm80_resources(ptx, tmp_path)
    assert spills == [0, 0] and stack == 0 and regs <= 168


@pytest.mark.parametrize("BN,D", [(128, 64), (64, 128)])
def test_sm80_chained_gemm_ptx(tmp_path, BN, D):
    from test_frag_math import chained_gemm
    f16 = lambda *shape: np.zeros(shape, np.float16)  # noqa: E731
    ptx = ws.jit(chained_gemm).inspect_ptx(f16(256, D), f16(D, 512), f16(512, D),
                                           f16(256, D), cc=(8, 0), BM=128, BN=BN, D=D)
    assert "wgmma" not in ptx
    assert len(_MMA.findall(ptx)) == 2 * 2 * (D // 16 * BN // 8)
    regs, spills, stack = _sm80_resources(ptx, tmp_path)
    assert spills == [0, 0] and stack == 0 and regs <= 168
