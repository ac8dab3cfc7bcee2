"""Reference tile programs: the GEMM of the design notes and its persistent form.

Plain functions (wrap them with ``ws.jit``); ``python -m numba_ws``, the benchmarks, the
notebooks and the tests all use these, so there is one copy of each.
"""
import math

import numba_ws as ws


def matmul(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """c = a @ b, stored in c's dtype (the fp32 accumulator rounded once: fp16 in, fp16
    out; bf16 in, bf16 out). Grid: (cdiv(M, BM) * cdiv(N, BN),)."""
    M, K = a.shape
    N = b.shape[1]
    pid = ws.program_id(0)
    num_pid_n = ws.cdiv(N, BN)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(K, BK)):
        x = ws.load(a, (pid_m * BM, k * BK), (BM, BK))
        y = ws.load(b, (k * BK, pid_n * BN), (BK, BN))
        acc = ws.dot(x, y, acc)
    ws.store(c, (pid_m * BM, pid_n * BN), acc)


def matmul_persistent(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr,
                      GROUP_M: ws.constexpr):
    """c = a @ b (in c's dtype) with one program per SM looping over output tiles in
    grouped order.

    Grid: (number of SMs,). The producer runs ahead across tiles: its ring of slots and
    phases carries over from one tile to the next.
    """
    M, K = a.shape
    N = b.shape[1]
    num_pid_m = ws.cdiv(M, BM)
    num_pid_n = ws.cdiv(N, BN)
    num_tiles = num_pid_m * num_pid_n
    for tile in range(ws.program_id(0), num_tiles, ws.num_programs(0)):
        group = tile // (GROUP_M * num_pid_n)
        first_m = group * GROUP_M
        rows = min(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (tile % rows)
        pid_n = (tile % (GROUP_M * num_pid_n)) // rows
        acc = ws.zeros((BM, BN), ws.float32)
        for k in range(ws.cdiv(K, BK)):
            x = ws.load(a, (pid_m * BM, k * BK), (BM, BK))
            y = ws.load(b, (k * BK, pid_n * BN), (BK, BN))
            acc = ws.dot(x, y, acc)
        ws.store(c, (pid_m * BM, pid_n * BN), acc)


def splitk_slice_product(a, b, pid_m, pid_n, s, BM, BN, BK, SPLIT_K):
    """Helper: the float32 (BM, BN) tile (pid_m, pid_n) of the product of a's columns and
    b's rows in the ``s``-th of ``SPLIT_K`` slices of the K blocks (ceil-divided; a slice
    past the last block is zeros)."""
    nk = ws.cdiv(a.shape[1], BK)
    per = ws.cdiv(nk, SPLIT_K)
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(s * per, min(nk, s * per + per)):
        x = ws.load(a, (pid_m * BM, k * BK), (BM, BK))
        y = ws.load(b, (k * BK, pid_n * BN), (BK, BN))
        acc = ws.dot(x, y, acc)
    return acc


def matmul_splitk(a, b, partial, slice_rows, BM: ws.constexpr, BN: ws.constexpr,
                  BK: ws.constexpr, SPLIT_K: ws.constexpr):
    """Split-K first pass, for shapes with too few output tiles to fill the GPU: program
    ``(tile, s)`` multiplies the ``s``-th of ``SPLIT_K`` slices of K and stores its fp32
    tile to rows ``s * slice_rows + ...`` of ``partial`` (``SPLIT_K * slice_rows`` rows;
    ``slice_rows >= cdiv(M, BM) * BM``, :func:`splitk_slice_rows`, so a ragged last row
    tile never reaches the next slice). Grid: (cdiv(M, BM) * cdiv(N, BN) * SPLIT_K,).
    :func:`splitk_reduce` sums the slices."""
    pid = ws.program_id(0)
    s = pid % SPLIT_K
    pid_m = (pid // SPLIT_K) // ws.cdiv(b.shape[1], BN)
    pid_n = (pid // SPLIT_K) % ws.cdiv(b.shape[1], BN)
    acc = splitk_slice_product(a, b, pid_m, pid_n, s, BM, BN, BK, SPLIT_K)
    ws.store(partial, (s * slice_rows + pid_m * BM, pid_n * BN), acc)


def matmul_splitk_atomic(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr,
                         SPLIT_K: ws.constexpr):
    """Split-K in one pass: program ``(tile, s)`` multiplies the ``s``-th of ``SPLIT_K``
    slices of K and adds its tile to ``c`` with ``ws.atomic_add`` (rounded to c's dtype
    per slice, so an fp16 / bf16 result is rounded SPLIT_K times, not once as with
    :func:`matmul_splitk`). ``c`` must hold zeros first. Grid:
    (cdiv(M, BM) * cdiv(N, BN) * SPLIT_K,)."""
    pid = ws.program_id(0)
    s = pid % SPLIT_K
    pid_m = (pid // SPLIT_K) // ws.cdiv(b.shape[1], BN)
    pid_n = (pid // SPLIT_K) % ws.cdiv(b.shape[1], BN)
    acc = splitk_slice_product(a, b, pid_m, pid_n, s, BM, BN, BK, SPLIT_K)
    ws.atomic_add(c, (pid_m * BM, pid_n * BN), acc)


def splitk_reduce(partial, c, slice_rows, BM: ws.constexpr, BN: ws.constexpr,
                  SPLIT_K: ws.constexpr):
    """Split-K second pass: ``c = sum`` of the ``SPLIT_K`` fp32 slices of ``partial``
    (``slice_rows`` rows each, as :func:`matmul_splitk` writes them), rounded once to
    c's dtype. Grid: (cdiv(M, BM) * cdiv(N, BN),)."""
    M, N = c.shape
    pid = ws.program_id(0)
    num_pid_n = ws.cdiv(N, BN)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    acc = ws.zeros((BM, BN), ws.float32)
    for s in range(SPLIT_K):
        acc = acc + ws.load(partial, (s * slice_rows + pid_m * BM, pid_n * BN), (BM, BN))
    ws.store(c, (pid_m * BM, pid_n * BN), acc)


def splitk_slice_rows(M, BM):
    """Rows per K slice of a split-K workspace for a GEMM with BM-row tiles."""
    return ws.cdiv(M, BM) * BM


#: log2(e) and ln(2): the softmax runs in base 2 (``exp2``, one FMA per score).
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def attention_fwd(q, k, v, o, lse, seq_len, group, sm_scale, BM: ws.constexpr,
                  BN: ws.constexpr, D: ws.constexpr, CAUSAL: ws.constexpr):
    """Flash-attention forward: ``o = softmax(q k^T * sm_scale (+ causal mask)) v`` and
    the row statistic ``lse = log(sum(exp(q k^T * sm_scale)))`` (natural log, fp32) for
    a backward pass.

    q, o: (B * H * seq_len, D), each head's rows contiguous; k, v: (B * H_kv * seq_len,
    D) with ``group = H // H_kv`` query heads per key/value head (grouped-query
    attention; 1: multi-head); lse: (B * H * seq_len,) float32. fp16 or bf16 in, o in
    its own dtype. ``seq_len`` need not be a multiple of BM or BN: keys past it are
    masked, rows past it are not stored. ``CAUSAL``: query i attends to keys j <= i;
    the key loop stops at the diagonal. Only the key blocks that cross the diagonal or
    the sequence end are masked. Grid: (cdiv(seq_len, BM), B * H); program 0 of axis 0
    takes the last (longest, when causal) query block, so long blocks start first.
    """
    start = (ws.num_programs(0) - 1 - ws.program_id(0)) * BM
    attention_tile(q, k, v, o, lse, ws.program_id(1), start, seq_len, group, sm_scale,
                   BM, BN, D, CAUSAL)


def attention_fwd_persistent(q, k, v, o, lse, seq_len, num_heads, head_group, group,
                             sm_scale, BM: ws.constexpr, BN: ws.constexpr, D: ws.constexpr,
                             CAUSAL: ws.constexpr):
    """:func:`attention_fwd` with programs looping over the (query block, head) tiles;
    ``num_heads`` = B * H. Tiles come in groups of ``head_group`` heads (the last group
    may have fewer), heads fastest, so the tiles in flight read the keys and values of
    few heads and those stay in L2 (:func:`persistent_head_group` picks it; head-fastest
    order over all heads streamed every head's K and V from HBM at once). Even groups run
    the last (longest, when causal) query blocks first, odd groups the first: when a group
    has as many tiles as there are programs, each program would otherwise get the query
    block of the same length in every group (causal D64 at BM=192: 132 tiles a group on
    132 SMs ran at 0.6x the non-persistent kernel, 2026-12-07). Grid: (P,) for any P
    (e.g. the number of SMs). Q is loaded once per tile into its own ring of
    ``num_buffers_warp_spec`` slots (the next tile's Q arrives during this tile), which
    D=256 cannot afford."""
    n_qblocks = ws.cdiv(seq_len, BM)
    per_group = head_group * n_qblocks
    for tile in range(ws.program_id(0), n_qblocks * num_heads, ws.num_programs(0)):
        group_index = tile // per_group
        first_head = group_index * head_group
        heads_here = min(num_heads - first_head, head_group)
        r = tile % per_group
        qblock = r // heads_here
        if group_index % 2 == 0:                   # even groups: the last query block first
            qblock = n_qblocks - 1 - qblock
        start = qblock * BM
        attention_tile(q, k, v, o, lse, first_head + r % heads_here, start, seq_len, group,
                       sm_scale, BM, BN, D, CAUSAL)


def persistent_head_group(seq_len, BM, programs):
    """``head_group`` for :func:`attention_fwd_persistent`: enough heads that
    ``programs`` tiles in flight fall in one or two groups."""
    return max(1, ws.cdiv(programs, ws.cdiv(seq_len, BM)))


def _keep(cols, rows, keys_left, diagonal, BN, CAUSAL):
    """The (BM, BN) mask of a key block, in offsets from the block's first key and the
    query block's first row: key column ``c`` is before the sequence end (``c <
    keys_left``) and, when causal, at or before query row ``r`` (``c <= r + diagonal``).
    Both scalars are clamped to ``BN``, so the int32 tiles keep them (a scalar takes the
    tile's dtype in arithmetic): one 32-bit compare per column, or when causal one per
    element against the row's limit ``min(r + diagonal, keys_left - 1)``, instead of
    pairs of int64 compares per element."""
    if CAUSAL:
        last = ws.minimum(rows + min(diagonal, BN), min(keys_left, BN) - 1)
        return cols[None, :] <= last[:, None]
    return cols[None, :] - min(keys_left, BN) < 0


def attention_tile(q, k, v, o, lse, head, start, seq_len, group, sm_scale, BM, BN, D,
                   CAUSAL):
    """One (query block, head) tile of attention: query rows ``start .. start + BM`` of
    query head ``head``, key / value head ``head // group`` (a helper the kernels
    above inline)."""
    q_row0 = head * seq_len + start
    kv_row0 = (head // group) * seq_len
    if CAUSAL:
        n_blocks = ws.cdiv(min(start + BM, seq_len), BN)
        mask_from = start // BN
    else:
        n_blocks = ws.cdiv(seq_len, BN)
        mask_from = seq_len // BN
    qk_scale = sm_scale * LOG2E
    q_tile = ws.load(q, (q_row0, 0), (BM, D))
    rows, cols = ws.arange(0, BM), ws.arange(0, BN)
    q_idx = start + rows
    m_i = ws.full((BM,), -math.inf, ws.float32)
    l_i = ws.zeros((BM,), ws.float32)
    acc = ws.zeros((BM, D), ws.float32)
    for j in range(n_blocks):
        k_tile = ws.load(k, (kv_row0 + j * BN, 0), (BN, D))
        v_tile = ws.load(v, (kv_row0 + j * BN, 0), (BN, D))
        s = ws.dot(q_tile, ws.trans(k_tile))
        if j >= mask_from:
            s = ws.where(_keep(cols, rows, seq_len - j * BN, start - j * BN, BN, CAUSAL), s,
                         -math.inf)
        m_new = ws.maximum(m_i, ws.max(s, axis=1) * qk_scale)
        alpha = ws.exp2(m_i - m_new)
        p = ws.exp2(ws.fma(s, qk_scale, -m_new[:, None]))
        l_i = l_i * alpha + ws.sum(p, axis=1)
        acc = ws.dot(p.astype(v.dtype), v_tile, acc * alpha[:, None])
        m_i = m_new
    attention_store(o, lse, q_row0, q_idx, seq_len, acc, m_i, l_i)


def attention_store(o, lse, q_row0, q_idx, seq_len, acc, m_i, l_i):
    """The attention epilogue: ``o = acc / l`` and ``lse = m ln 2 + log l`` for the query
    rows before the sequence end (a helper the kernels inline)."""
    rows_ok = q_idx < seq_len
    # one reciprocal per row, then a multiply per element: 64 div.rn.f32 a thread were
    # most of the epilogue's issue slots (a ~1 ulp fp32 difference, below o's rounding)
    inv_l = 1.0 / l_i
    ws.store(o, (q_row0, 0), acc * inv_l[:, None], mask=rows_ok[:, None])
    ws.store(lse, (q_row0,), m_i * LN2 + ws.log(l_i), mask=rows_ok)


def softmax_step(s, m_i, l_i, qk_scale, v):
    """One online-softmax step of a score block ``s`` (base 2, ``qk_scale`` folded into
    one FMA): the new row maxima and sums, P in v's dtype for the PV dot, and the factor
    ``alpha`` that rescales the accumulator (a helper the kernels inline)."""
    m_new = ws.maximum(m_i, ws.max(s, axis=1) * qk_scale)
    alpha = ws.exp2(m_i - m_new)
    p = ws.exp2(ws.fma(s, qk_scale, -m_new[:, None]))
    return m_new, l_i * alpha + ws.sum(p, axis=1), p.astype(v.dtype), alpha


def attention_fwd_pipelined(q, k, v, o, lse, seq_len, group, sm_scale, BM: ws.constexpr,
                            BN: ws.constexpr, D: ws.constexpr, CAUSAL: ws.constexpr):
    """:func:`attention_fwd` software-pipelined by hand (FA3's intra-warpgroup overlap):
    key block j+1's ``q @ k^T`` is issued before block j's softmax, so the softmax runs
    while the tensor cores compute it (the partitioner waits with ``wgmma.wait_group 1``
    for the older dot, also inside the ``if``: a block entered only from built blocks
    inherits their in-flight dots). Only the blocks that cross the diagonal or the
    sequence end are masked; the softmax is written in both branches (a masked score
    tile merged at the join would make ptxas serialise the wgmmas), the PV dot after the
    join. The last iteration computes one key block past the loop's end, which nothing
    reads. Same arguments and grid as :func:`attention_fwd`. Slower than it on the H100
    (2026-12-07: 4-9 % even with no mask at all)."""
    head = ws.program_id(1)
    start = (ws.num_programs(0) - 1 - ws.program_id(0)) * BM
    q_row0 = head * seq_len + start
    kv_row0 = (head // group) * seq_len
    if CAUSAL:
        n_blocks = ws.cdiv(min(start + BM, seq_len), BN)
        mask_from = start // BN
    else:
        n_blocks = ws.cdiv(seq_len, BN)
        mask_from = seq_len // BN
    qk_scale = sm_scale * LOG2E
    q_tile = ws.load(q, (q_row0, 0), (BM, D))
    rows, cols = ws.arange(0, BM), ws.arange(0, BN)
    m_i = ws.full((BM,), -math.inf, ws.float32)
    l_i = ws.zeros((BM,), ws.float32)
    acc = ws.zeros((BM, D), ws.float32)
    s = ws.dot(q_tile, ws.trans(ws.load(k, (kv_row0, 0), (BN, D))))
    for j in range(n_blocks):
        k_next = ws.load(k, (kv_row0 + (j + 1) * BN, 0), (BN, D))
        v_tile = ws.load(v, (kv_row0 + j * BN, 0), (BN, D))
        s_next = ws.dot(q_tile, ws.trans(k_next))
        if j >= mask_from:
            if CAUSAL:   # int64 compares: the int32 form of _keep spills here (16 bytes)
                k_idx = j * BN + cols
                keep = (k_idx[None, :] < seq_len) & (k_idx[None, :] <= (start + rows)[:, None])
            else:
                keep = _keep(cols, rows, seq_len - j * BN, 0, BN, CAUSAL)
            m_i, l_i, p, alpha = softmax_step(ws.where(keep, s, -math.inf), m_i, l_i,
                                              qk_scale, v)
        else:
            m_i, l_i, p, alpha = softmax_step(s, m_i, l_i, qk_scale, v)
        acc = ws.dot(p, v_tile, acc * alpha[:, None])
        s = s_next
    attention_store(o, lse, q_row0, start + rows, seq_len, acc, m_i, l_i)
