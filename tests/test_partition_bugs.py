"""Partitioning bugs of issue 14, item 4, on the CPU (partition, schedule simulator,
explain).

1. A ``ws.load`` after a use of an earlier load of the same block (attention with V loaded
   after the QKᵀ dot, a GEMM that loads a residual after its dot) raised an internal
   ``IndexError`` in code partitioning: both loads formed one channel, its slot was
   released after the first tile's last use, and the second view found no pending slot.
   Now loads are grouped only while no statement reads the group (channels.py), so such a
   load gets a channel of its own.
2. ``explain()`` after data partitioning printed every consumer's loads with the same
   offsets and shape (``x_1``, ``x_2`` identical); it now writes each consumer's rows
   (the seed's ``offs_m_1`` / ``offs_m_2``).
3. With ``dot_in_flight=1``, a dead copy of the accumulator (an inlined helper's unused
   parameter) was fenced after the loop and failed typing (2026-12-07).
4. ``t - ws.trans(t)`` of a dot result ``t`` with two consumer groups: the element-wise op
   links t's rows with its columns, so the M split also split N and each group computed
   only its diagonal block of ``t`` (the fuzzer's seed 54584132 under the schedule
   simulator: wrong outputs, 2026-12-07). Now such a split is refused with a clear error.
"""
import math

import numpy as np
import pytest

import numba_ws as ws
from numba_ws.passes.data_partition import PartitionFallbackWarning
from numba_ws import knobs
import kernels


def attention_v_after_dot(q, k, v, o, seq_len, sm_scale,
                          BM: ws.constexpr, BN: ws.constexpr, D: ws.constexpr):
    """kernels.attention_fwd with V loaded after the QKᵀ dot in the loop body."""
    row0 = ws.program_id(1) * seq_len
    q_tile = ws.load(q, (row0 + ws.program_id(0) * BM, 0), (BM, D))
    m_i = ws.full((BM, 1), -math.inf, ws.float32)
    l_i = ws.zeros((BM, 1), ws.float32)
    acc = ws.zeros((BM, D), ws.float32)
    for j in range(ws.cdiv(seq_len, BN)):
        k_tile = ws.load(k, (row0 + j * BN, 0), (BN, D))
        s = ws.dot(q_tile, ws.trans(k_tile)) * sm_scale
        v_tile = ws.load(v, (row0 + j * BN, 0), (BN, D))
        m_new = ws.maximum(m_i, ws.max(s, 1, keepdims=True))
        alpha = ws.exp(m_i - m_new)
        p = ws.exp(s - m_new)
        l_i = l_i * alpha + ws.sum(p, 1, keepdims=True)
        acc = ws.dot(p.astype(ws.float16), v_tile, acc * alpha)
        m_i = m_new
    acc = acc / l_i
    ws.store(o, (row0 + ws.program_id(0) * BM, 0), acc.astype(ws.float16))


def matmul_residual_after_loop(a, b, r, c, BM: ws.constexpr, BN: ws.constexpr,
                               BK: ws.constexpr):
    """c = a @ b + r, the residual tile loaded after the main loop."""
    K = a.shape[1]
    pid = ws.program_id(0)
    num_pid_n = ws.cdiv(b.shape[1], BN)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    acc = ws.zeros((BM, BN), ws.float32)
    for kk in range(ws.cdiv(K, BK)):
        x = ws.load(a, (pid_m * BM, kk * BK), (BM, BK))
        y = ws.load(b, (kk * BK, pid_n * BN), (BK, BN))
        acc = ws.dot(x, y, acc)
    res = ws.load(r, (pid_m * BM, pid_n * BN), (BM, BN))
    ws.store(c, (pid_m * BM, pid_n * BN), (acc + res).astype(ws.float16))


def matmul_bias_after_loop(a, b, bias, c, BM: ws.constexpr, BN: ws.constexpr,
                           BK: ws.constexpr):
    """kernels.matmul_bias_relu with the (BN,) bias tile loaded after the main loop."""
    K = a.shape[1]
    pid = ws.program_id(0)
    num_pid_n = ws.cdiv(b.shape[1], BN)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    acc = ws.zeros((BM, BN), ws.float32)
    for kk in range(ws.cdiv(K, BK)):
        x = ws.load(a, (pid_m * BM, kk * BK), (BM, BK))
        y = ws.load(b, (kk * BK, pid_n * BN), (BK, BN))
        acc = ws.dot(x, y, acc)
    bias_tile = ws.load(bias, (pid_n * BN,), (BN,))
    acc = ws.maximum(acc + bias_tile, 0.0)
    ws.store(c, (pid_m * BM, pid_n * BN), acc.astype(ws.float16))


def dot_then_residual(a, b, r, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """One K step, no loop: the residual is loaded in the dot's own block, after it."""
    pid_m = ws.program_id(0)
    x = ws.load(a, (pid_m * BM, 0), (BM, BK))
    y = ws.load(b, (0, 0), (BK, BN))
    acc = ws.dot(x, y)
    res = ws.load(r, (pid_m * BM, 0), (BM, BN))
    ws.store(c, (pid_m * BM, 0), (acc + res).astype(ws.float16))


def f16(rng, *shape):
    return (rng.random(shape) * 2 - 1).astype(np.float16)


RNG = np.random.default_rng(14)
SEQ, D = 256, 64
ATTN = tuple(f16(RNG, SEQ, D) for _ in range(3)) + (np.zeros((SEQ, D), np.float16), SEQ,
                                                     0.125)
# M, N, K not multiples of the tiles
M, N, K = 200, 300, 150
GEMM_RES = (f16(RNG, M, K), f16(RNG, K, N), f16(RNG, M, N), np.zeros((M, N), np.float16))
GEMM_BIAS = (GEMM_RES[0], GEMM_RES[1], f16(RNG, N), np.zeros((M, N), np.float16))
GEMM_GRID = (math.ceil(M / 128) * math.ceil(N / 128),)
CONFIGS = [dict(num_consumer_groups=g, num_buffers_warp_spec=nb)
           for g in (1, 2) for nb in (1, 2, 3)]


def _ok(report):
    assert report.ok, str(report)
    assert report.outputs_match and not report.findings


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "g{num_consumer_groups}b"
                         "{num_buffers_warp_spec}".format(**c))
def test_attention_with_v_loaded_after_the_first_dot(cfg):
    _ok(ws.verify(attention_v_after_dot, (SEQ // 128, 1), *ATTN, BM=128, BN=64, D=D,
                  seeds=2, **cfg))


def test_attention_v_after_dot_gets_its_own_channel():
    """K and V are not issued together any more: the consumer releases K's slot after
    the QKᵀ dot, before V arrives, and V has a ring of its own."""
    state = ws.jit(attention_v_after_dot).partition(*ATTN, BM=128, BN=64, D=D)
    chans = [[m["var"] for m in c.members] for c in state.ws.channels]
    assert chans == [["q_tile"], ["k_tile"], ["v_tile"]]
    assert [c.num_slots for c in state.ws.channels] == [1, 3, 3]


def test_attention_loads_issued_together_stay_one_channel():
    """The reference attention (K and V loaded back to back) keeps one K+V channel."""
    state = ws.jit(kernels.attention_fwd).partition(*ATTN, BM=128, BN=64, D=D)
    chans = [[m["var"] for m in c.members] for c in state.ws.channels]
    assert chans == [["q_tile"], ["k_tile", "v_tile"]]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "g{num_consumer_groups}b"
                         "{num_buffers_warp_spec}".format(**c))
@pytest.mark.parametrize("kernel, args", [
    (matmul_residual_after_loop, GEMM_RES),
    (matmul_bias_after_loop, GEMM_BIAS),
], ids=["residual", "bias"])
def test_gemm_epilogue_load_after_the_loop(kernel, args, cfg):
    _ok(ws.verify(kernel, GEMM_GRID, *args, BM=128, BN=128, BK=64, seeds=2, **cfg))


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "g{num_consumer_groups}b"
                         "{num_buffers_warp_spec}".format(**c))
def test_residual_loaded_after_the_dot_in_its_block(cfg):
    a, b, r = f16(RNG, M, 64), f16(RNG, 64, 128), f16(RNG, M, 128)
    c = np.zeros((M, 128), np.float16)
    _ok(ws.verify(dot_then_residual, (2,), a, b, r, c, BM=128, BN=128, BK=64, seeds=2,
                  **cfg))


@pytest.mark.skipif("NUMBA_WS_DISABLE" not in knobs.KNOBS, reason="no fused mode")
def test_fused_mode_views_each_load_where_it_is_loaded():
    """One warp group playing every task (NUMBA_WS_DISABLE) views a channel's tiles once
    all were copied; with V a channel of its own, K is viewed before the QKᵀ dot."""
    with knobs.scope(NUMBA_WS_DISABLE=True):
        _ok(ws.verify(attention_v_after_dot, (SEQ // 128, 1), *ATTN, BM=128, BN=64, D=D,
                      seeds=2))


# -- explain(): each consumer's rows -------------------------------------------------

README_GEMM_AFTER = """\
    acc_1 = ws.zeros((BM // 2, BN), ws.float32) # async_task 1
    acc_2 = ws.zeros((BM // 2, BN), ws.float32) # async_task 2
    for k in range(ws.cdiv(K, BK)): # async_task 0, 1, 2
        x_1 = ws.load(a, (pid_m * BM, k * BK), (BM // 2, BK)) # async_task 0
        x_2 = ws.load(a, (pid_m * BM + BM // 2, k * BK), (BM // 2, BK)) # async_task 0
        y = ws.load(b, (k * BK, pid_n * BN), (BK, BN)) # async_task 0
        acc_1 = ws.dot(x_1, y, acc_1) # async_task 1
        acc_2 = ws.dot(x_2, y, acc_2) # async_task 2
    ws.store(c, (pid_m * BM, pid_n * BN), acc_1) # async_task 1
    ws.store(c, (pid_m * BM + BM // 2, pid_n * BN), acc_2) # async_task 2"""

GEMM_ARGS = (f16(RNG, 256, 128), f16(RNG, 128, 512), np.zeros((256, 512), np.float16))


def _after(text):
    after = text.split("# after data partitioning")[1]
    lines = after.splitlines()
    start = next(i for i, line in enumerate(lines) if "acc_1 = ws.zeros" in line)
    end = next(i for i, line in enumerate(lines) if line.startswith("# channels"))
    return "\n".join(lines[start:end]).rstrip()


def test_explain_shows_each_consumers_rows_for_the_readme_gemm():
    from numba_ws.examples import matmul
    text = ws.jit(matmul).explain(*GEMM_ARGS, BM=128, BN=256, BK=64, num_consumer_groups=2)
    assert "split along M, 64 per consumer" in text
    assert _after(text) == README_GEMM_AFTER


def test_explain_shows_each_consumers_columns_for_an_n_split():
    text = ws.jit(kernels.matmul).explain(*GEMM_ARGS, BM=64, BN=256, BK=64)
    assert "split along N, 128 per consumer" in text
    assert "y_1 = ws.load(b, (k * BK, pid_n * BN), (BK, BN // 2))" in text
    assert "y_2 = ws.load(b, (k * BK, pid_n * BN + BN // 2), (BK, BN // 2))" in text
    assert "ws.store(c, (pid_m * BM, pid_n * BN + BN // 2), acc_2" in text


def test_explain_four_consumers_offsets():
    """Consumer g of 4 starts (g - 1) quarters down: ``+ BM // 4``, ``+ 2 * BM // 4``..."""
    text = ws.jit(kernels.matmul).explain(*GEMM_ARGS, BM=256, BN=128, BK=64,
                                          num_consumer_groups=4, reg_inc_consumer=104,
                                          num_buffers_warp_spec=2)
    assert "x_1 = ws.load(a, (pid_m * BM, k * BK), (BM // 4, BK))" in text
    assert "x_3 = ws.load(a, (pid_m * BM + 2 * BM // 4, k * BK), (BM // 4, BK))" in text
    assert "ws.store(c, (pid_m * BM + 3 * BM // 4, pid_n * BN), acc_4" in text
    # the listing's offsets are the ones the partitioned program uses: 64-row slices
    state = ws.jit(kernels.matmul).partition(*GEMM_ARGS, BM=256, BN=128, BK=64,
                                             num_consumer_groups=4, reg_inc_consumer=104,
                                             num_buffers_warp_spec=2)
    x = state.ws.channels[0].members[0]
    assert [p["offset"] for p in x["parts"]] == [(0, 0), (64, 0), (128, 0), (192, 0)]


# -- on the GPU path: V after the QKᵀ dot compiles (V feeds a dot, no new lowering) ---

@pytest.mark.parametrize("groups", [1, 2])
def test_attention_v_after_dot_assembles_for_sm90a(groups, tmp_path):
    """With K and V in separate channels the sm_90a PTX assembles with ptxas, without
    spills (running it is for tests/gpu, on the H200)."""
    from ptx_tools import assemble, resources
    q = np.zeros((1024, D), np.float16)
    ptx = ws.jit(attention_v_after_dot).inspect_ptx(q, q, q, q, 1024, 0.125, BM=128,
                                                    BN=64, D=D, num_consumer_groups=groups)
    assert "wgmma.mma_async" in ptx
    _, spills, _ = resources(assemble(ptx, tmp_path))
    assert spills == [0, 0]


def _acc_step(acc, a_tile, b_tile, acc_copy):
    """One k-step of a GEMM through a helper whose last parameter it never reads."""
    return ws.dot(a_tile, b_tile, acc)


def matmul_helper_unused_acc(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """kernels.matmul with its k-step in a helper given an unused copy of the accumulator
    (inlined: a dead copy of the loop-carried accumulator)."""
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(a.shape[1], BK)):
        acc = _acc_step(acc, ws.load(a, (ws.program_id(0) * BM, k * BK), (BM, BK)),
                        ws.load(b, (k * BK, 0), (BK, BN)), acc)
    ws.store(c, (ws.program_id(0) * BM, 0), acc)


def test_dot_in_flight_with_a_dead_accumulator_copy():
    """3. With ``dot_in_flight=1`` the accumulators carried out of the loop are fenced
    after it; a dead copy of the accumulator (an inlined helper's unused parameter) was
    fenced too and failed typing (``cannot be determined``). Now only read names are."""
    a, b = np.zeros((256, 128), np.float16), np.zeros((128, 128), np.float16)
    c = np.zeros((256, 128), np.float16)
    ptx = ws.jit(matmul_helper_unused_acc).inspect_ptx(
        a, b, c, BM=128, BN=128, BK=64, num_buffers_warp_spec=3, dot_in_flight=1)
    assert ptx.count("wgmma.wait_group.sync.aligned 1;") >= 1


def dot_minus_its_transpose(a, b, out, BM: ws.constexpr, BN: ws.constexpr,
                            BK: ws.constexpr):
    r0 = ws.program_id(0) * BM
    for k in range(ws.cdiv(b.shape[0], BK)):
        t = ws.dot(ws.load(a, (r0, k * BK), (BM, BK)), ws.load(b, (k * BK, 0), (BK, BN)))
        ws.store(out, (r0, k * BN), t - ws.trans(t))


def test_a_dot_result_linked_to_its_transpose_is_not_split():
    """Splitting t would cut it along both dims (each group would compute only its
    diagonal block): the kernel falls back to one consumer group, and the simulator's run
    of what was compiled matches the interpreter."""
    rng = np.random.default_rng(8)
    a = rng.uniform(-1, 1, (128, 128)).astype(np.float16)
    b = rng.uniform(-1, 1, (128, 128)).astype(np.float16)
    out = np.full((128, 256), np.nan, np.float32)
    meta = dict(BM=128, BN=128, BK=64)
    with pytest.warns(PartitionFallbackWarning, match="t would be split along both dims") as w:
        plan = ws.jit(dot_minus_its_transpose).partition(a, b, out, **meta,
                                                         num_consumer_groups=2).ws
    # larger tiles would not help here: no size hint
    assert "larger tiles" not in str(w[0].message)
    assert plan.num_consumers == 1 and plan.split == {}
    with pytest.warns(PartitionFallbackWarning):
        report = ws.verify(dot_minus_its_transpose, (1,), a, b, out, **meta,
                           num_consumer_groups=2, seeds=1)
    assert report.ok, str(report)


def test_a_dot_too_small_to_split_suggests_larger_tiles():
    """M = N = 64 over two groups: 32 rows or columns each, below a wgmma's 64; both dims
    fail for their size only, so the warning says larger tiles would split."""
    a = np.zeros((64, 64), np.float16)
    b = np.zeros((64, 64), np.float16)
    out = np.zeros((64, 64), np.float32)
    with pytest.warns(PartitionFallbackWarning,
                      match="not a multiple of 64.*larger tiles would let it split"):
        ws.jit(dot_minus_its_transpose).partition(a, b, out, BM=64, BN=64, BK=64,
                                                  num_consumer_groups=2)


def test_dot_turns_with_work_that_cannot_be_split_is_a_clear_error():
    """The one-group fallback cannot keep dot_turns (turns need two groups): an error of
    the partition pass that names both, not Options' complaint about a group count the
    user did not pass."""
    a, b, c = (np.zeros(s, np.float16) for s in ((256, 128), (128, 256), (256, 256)))
    with pytest.raises(ws.WSCompileError, match=r"dot_turns=1 takes turns between >= 2 "
                                                r"consumer groups.*M: M=64"):
        ws.jit(kernels.matmul).partition(a, b, c, BM=64, BN=64, BK=64, dot_turns=1)
