"""Register-fragment math on the GPU (codegen/frag_math.py, codegen/wgmma_rs.py), no GPU.

- PTX of the flash-attention forward (tests/kernels.py) for sm_90a, assembled by ptxas:
  no spills, no ptxas warnings, ex2.approx + shfl.sync.bfly, and both wgmma forms: SS
  (q k^T, A and B in shared memory) and RS (p v, A = p.astype(fp16) in registers).
- NumPy models of the register layouts: the packing of an accumulator-layout fp16
  fragment into wgmma's A registers (a0..a3 per k-step), the row reductions (in-thread
  tree + butterfly over lanes xor 1, 2) and the row-vector broadcast.
- Clear compile errors for what has no GPU form (axis-0 reductions) and for a
  non-boolean ``ws.where`` condition; ``ws.where`` on the accumulator.

``lowering._dot`` sends a dot whose A operand is a register tile to ``gpu_dot_rs``.
"""
import re

import numpy as np
import pytest

import numba_ws as ws
import kernels
from ptx_tools import assemble
from numba_ws.codegen import lowering
from numba_ws.codegen.fragments import col_of, row_of
from numba_ws.codegen import layouts
from numba_ws.codegen.wgmma_rs import a_register_indices, gpu_dot_rs

def _assemble(ptx, tmp_path):
    """(spill bytes, stack bytes); ptxas must not warn (C7514/C7519: serialised wgmma)."""
    log = assemble(ptx, tmp_path, "sm_90a")
    assert "warning" not in log.lower(), log
    spills = [int(x) for x in re.findall(r"(\d+) bytes spill", log)]
    stack = [int(x) for x in re.findall(r"(\d+) bytes stack frame", log)]
    return spills, stack


_SS = re.compile(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.f16\.f16\s*"
                 r"\{[^}]*\},\s*%rd\d+, %rd\d+,")
_RS = re.compile(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.f16\.f16\s*"
                 r"\{[^}]*\},\s*\{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+,")


@pytest.mark.parametrize("BN,D", [(64, 64), (128, 64), (128, 128)])
def test_attention_ptx_assembles_with_both_wgmma_forms(tmp_path, BN, D):
    q = np.zeros((1024, D), np.float16)
    ptx = ws.jit(kernels.attention_fwd).inspect_ptx(q, q, q, q, 512, 0.125,
                                                    BM=128, BN=BN, D=D)
    spills, stack = _assemble(ptx, tmp_path)
    assert spills == [0, 0] and stack == [0]
    assert "ex2.approx.ftz.f32" in ptx and "shfl.sync.bfly.b32" in ptx
    ss, rs = _SS.findall(ptx), _RS.findall(ptx)
    # per consumer (2 x 64 rows): q k^T = D/16 SS wgmmas of N = BN; p v = BN/16 RS of N = D
    assert ss == [str(BN)] * (D // 16), ss      # once: the groups share one consumer body
    assert rs == [str(D)] * (BN // 16), rs
    # q k^T is read by the softmax right away: a wait_group 0 follows each SS batch (and
    # the PV dot before the slot release), in the one consumer body
    assert ptx.count("wgmma.wait_group.sync.aligned 0;") >= 2


# --- NumPy models of the register layouts ---------------------------------------------

def _acc_fragment(mat):
    """regs[w, lane, r] = mat[row, col] of a 64 x N matrix in the accumulator layout."""
    n = mat.shape[1]
    regs = np.empty((4, 32, n // 2), mat.dtype)
    for w in range(4):
        for lane in range(32):
            for r in range(n // 2):
                regs[w, lane, r] = mat[row_of(r, lane, w), col_of(r, lane)]
    return regs


def _isa_a_position(i, lane, warp):
    """PTX ISA 9.7.15.5.1.1.1 (Fig. 148, the mma.m16n8k16 A layout of Fig. 79 per warp):
    row/col of element a_i (i = 0..7) of the 64 x 16 A slice."""
    g, t = lane >> 2, lane % 4
    row = 16 * warp + g + (8 if i in (2, 3, 6, 7) else 0)
    col = 2 * t + (i & 1) + (8 if i >= 4 else 0)
    return row, col


def test_register_a_packing_reconstructs_p():
    rng = np.random.default_rng(0)
    K = 64                      # four k-steps of 16, as p (64 x BN=64) in attention
    p = rng.standard_normal((64, K)).astype(np.float16)
    frag = _acc_fragment(p)     # what p.astype(fp16) holds, per thread
    bits = frag.view(np.uint16).astype(np.uint32)
    out = np.full((64, K), np.nan, np.float16)
    for s in range(K // 16):
        pairs = a_register_indices(s, 0, K)
        for w in range(4):
            for lane in range(32):
                # the .b32 registers a0..a3 as gpu_dot_rs packs them (low half first)
                regs = [bits[w, lane, lo] | (bits[w, lane, hi] << 16) for lo, hi in pairs]
                for i in range(8):
                    half = (regs[i // 2] >> (16 * (i % 2))) & 0xFFFF
                    row, col = _isa_a_position(i, lane, w)
                    assert np.isnan(out[row, 16 * s + col]), "element written twice"
                    out[row, 16 * s + col] = np.array([half], np.uint16).view(np.float16)[0]
    np.testing.assert_array_equal(out, p)


def test_register_a_indices_cover_each_block_once():
    K = 128
    for mi in range(2):
        seen = sorted(x for s in range(K // 16) for pair in a_register_indices(s, mi, K)
                      for x in pair)
        assert seen == list(range(mi * K // 2, (mi + 1) * K // 2))


@pytest.mark.parametrize("N", [16, 64, 128])
def test_row_reduction_and_broadcast_model(N):
    """The accumulator layout's row slice (what ws.max(x, 1, keepdims=True) leaves,
    codegen/layouts.py) on the fragment model of this file: a thread's registers with one row fold in-thread,
    lanes ^ 1 and ^ 2 (the column lane bits) finish the row, and the broadcast back is
    the register selection ``broadcast_index``."""
    rng = np.random.default_rng(N)
    x = rng.standard_normal((128, N)).astype(np.float32)
    frags = [_acc_fragment(x[64 * mi:64 * mi + 64]) for mi in range(2)]
    regs = np.concatenate(frags, axis=2)                    # (warp, lane, 2 blocks * N/2)
    acc = layouts.acc(128, N)
    vec = layouts.slice_of(acc, 1)
    assert vec.count == 4
    index = layouts.broadcast_index(vec, acc, 1)
    part = np.full((4, 32, 4), -np.inf, np.float32)
    for k in range(acc.count):
        part[:, :, index[k]] = np.maximum(part[:, :, index[k]], regs[:, :, k])
    assert [b for b, basis in enumerate(acc.lanes) if basis[1]] == [0, 1]
    for mask in (1, 2):
        part = np.maximum(part, part[:, np.arange(32) ^ mask, :])
    rows = x.max(axis=1)
    for w in range(4):
        for lane in range(32):
            for v in range(4):
                assert part[w, lane, v] == rows[vec.coord(v, lane, w)[0]]
    shifted = regs - part[:, :, index]
    for mi in range(2):
        block = shifted[:, :, mi * N // 2:(mi + 1) * N // 2]
        want = _acc_fragment(x[64 * mi:64 * mi + 64] - rows[64 * mi:64 * mi + 64, None])
        np.testing.assert_array_equal(block, want)


# --- the other ops, and what stays unsupported ------------------------------------------

def mathmix(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(a.shape[1], BK)):
        x = ws.load(a, (ws.program_id(0) * BM, k * BK), (BM, BK))
        y = ws.load(b, (k * BK, 0), (BK, BN))
        acc = ws.dot(x, y, acc)
    r = ws.log(ws.exp2(-acc) + 1.0)
    r = ws.maximum(r, ws.max(acc, 1, keepdims=True))
    r = ws.sum(acc, 1, keepdims=True) - ws.maximum(ws.exp(r), 0.5)
    ws.store(c, (ws.program_id(0) * BM, 0), (r / ws.sum(r, 1, keepdims=True)).astype(ws.float16))


def chained_gemm(a, b, c, o, BM: ws.constexpr, BN: ws.constexpr, D: ws.constexpr):
    """o = (a @ b).astype(fp16) @ c: the register-A dot alone (no softmax). a (M, D),
    b (D, N), c (N, D); N % BN == 0. Grid: (cdiv(M, BM),)."""
    row = ws.program_id(0) * BM
    x = ws.load(a, (row, 0), (BM, D))
    acc = ws.zeros((BM, D), ws.float32)
    for j in range(ws.cdiv(b.shape[1], BN)):
        y = ws.load(b, (0, j * BN), (D, BN))
        z = ws.load(c, (j * BN, 0), (BN, D))
        s = ws.dot(x, y)
        acc = ws.dot(s.astype(ws.float16), z, acc)
    ws.store(o, (row, 0), acc.astype(ws.float16))


def test_chained_gemm_ptx(tmp_path):
    ptx = ws.jit(chained_gemm).inspect_ptx(_f16(256, 64), _f16(64, 512), _f16(512, 64),
                                           _f16(256, 64), BM=128, BN=128, D=64)
    spills, _ = _assemble(ptx, tmp_path)
    assert spills == [0, 0]
    assert len(_SS.findall(ptx)) == 64 // 16 and len(_RS.findall(ptx)) == 128 // 16


def colmax(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    x = ws.load(a, (0, 0), (BM, BK))
    y = ws.load(b, (0, 0), (BK, BN))
    acc = ws.dot(x, y)
    ws.store(c, (0, 0), acc - ws.max(acc, 0, keepdims=True))


def where_kernel(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    x = ws.load(a, (0, 0), (BM, BK))
    y = ws.load(b, (0, 0), (BK, BN))
    acc = ws.dot(x, y)
    ws.store(c, (0, 0), ws.where(acc > 0.5, acc, acc * 0.25))


def where_float_cond(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    x = ws.load(a, (0, 0), (BM, BK))
    y = ws.load(b, (0, 0), (BK, BN))
    acc = ws.dot(x, y)
    ws.store(c, (0, 0), ws.where(acc, acc, 0.0))  # a float tile as the condition


def _f16(*shape):
    return np.zeros(shape, np.float16)


def test_math_ops_ptx(tmp_path):
    # tma_store=0: the direct epilogue (its quad transposes are counted below)
    ptx = ws.jit(mathmix).inspect_ptx(_f16(256, 128), _f16(128, 128), _f16(256, 128),
                                      BM=128, BN=128, BK=64, tma_store=0)
    spills, _ = _assemble(ptx, tmp_path)
    assert spills == [0, 0]
    for instr in ("ex2.approx.ftz.f32", "lg2.approx.ftz.f32", "neg.f32", "max.f32",
                  "shfl.sync.bfly.b32"):
        assert instr in ptx, instr
    # per consumer: 3 row reductions x 2 rows per thread x 2 butterfly steps, plus the
    # 16-byte epilogue's quad transposes (64x128 fp16: 8 groups x 4 shuffles)
    assert ptx.count("shfl.sync.bfly.b32") == 3 * 2 * 2 + 8 * 4     # one consumer body


def test_where_on_the_accumulator_and_a_non_boolean_condition(tmp_path):
    """Issue 15: ``ws.where`` has a GPU form (a compare and a select per register of the
    accumulator, no conversion); a float tile as the condition is a typing error that
    names the kernel line."""
    args = (_f16(256, 128), _f16(128, 256), _f16(256, 256))
    # tma_store=0: the default's TMA path for edge tiles syncs the group (bar.sync)
    ptx = ws.jit(where_kernel).inspect_ptx(*args, BM=128, BN=256, BK=64, tma_store=0)
    spills, _ = _assemble(ptx, tmp_path)
    assert spills == [0, 0]
    assert re.search(r"setp\.(gt|le|leu|gtu)\.f32", ptx) and "selp." in ptx
    assert not re.search(r"bar\.sync\s+%r\d+, 128", ptx)    # no exchange through scratch
    with pytest.raises(ws.WSCompileError, match=r"cond must be a boolean tile") as info:
        ws.jit(where_float_cond).inspect_ptx(*args, BM=128, BN=256, BK=64)
    assert "a float tile as the condition" in str(info.value)


def test_column_max_of_an_accumulator_compiles(tmp_path):
    """``acc - ws.max(acc, 0, keepdims=True)``: the column maxima cross the 4 warps (scratch
    exchange), then broadcast back along the columns' slice of the accumulator layout."""
    ptx = ws.jit(colmax).inspect_ptx(_f16(256, 128), _f16(128, 256), _f16(256, 256),
                                     BM=128, BN=256, BK=64)
    spills, _ = _assemble(ptx, tmp_path)
    assert spills == [0, 0]
    assert "bar.sync" in ptx and "max.f32" in ptx
