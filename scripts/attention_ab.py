#!/usr/bin/env python3
"""Which part of the hand-pipelined attention costs it its lead (GPU machine, diagnostic).

    python3 scripts/attention_ab.py [--rounds N] [--rows N] [--all]

``examples.attention_fwd_pipelined`` (FA3's intra-warpgroup overlap: block j+1's
``q @ k^T`` issued before block j's softmax) has been slower than the plain
``examples.attention_fwd`` since 2026-12-03. This times, fp16, A B A B in one process
beside cuDNN: the plain program; the pipelined one (since 2026-12-07 masking only the
tail / diagonal blocks under a runtime ``if``, the partitioner keeping block j+1's dot in
flight across it; it masked every block before); the pipelined one with no mask at all
(correct only when not causal and S % BN == 0: the extra block the last iteration
computes is never read), the ceiling of the pipelining without masking cost. With
``--all`` also the forms before 2026-12-06 (int64 masks: the pipelined one on every
block, the plain one on the diagonal / tail blocks; now ``examples._keep``). Result
2026-12-07 00:54 (H100, BENCHMARKS.md): the ``if`` form is 3-19 % faster than masking
every block, but even "no mask" stays 4-9 % below the plain program. (A loop over the
unmasked key blocks then one over the masked, as Triton's tutorial writes it, makes
ptxas serialise the wgmmas: C7514, 2026-12-06.) Each variant is checked against float64
(o and lse, first heads, NaN-poisoned outputs) before it is timed.
"""
import argparse
import math
import os
import sys

import torch

import numba_ws as ws
from numba_ws import examples
from numba_ws.examples import LOG2E

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "benchmarks"))
import attention as bench  # noqa: E402


def attention_fwd_pipelined_as(q, k, v, o, lse, seq_len, group, sm_scale, BM: ws.constexpr,
                               BN: ws.constexpr, D: ws.constexpr, CAUSAL: ws.constexpr,
                               MASK: ws.constexpr):
    """examples.attention_fwd_pipelined with the mask of ``MASK``: "reach", as it was
    before 2026-12-06 (``(k_idx < seq_len) & (k_idx <= q_idx + reach)`` in int64, ``reach
    = seq_len`` when not causal: a compare pair, an and and a select per element), or
    "none" (correct only when not causal and seq_len % BN == 0: the extra block the last
    iteration computes is never read). ``if MASK == ...`` is decided before typing."""
    head = ws.program_id(1)
    start = (ws.num_programs(0) - 1 - ws.program_id(0)) * BM
    q_row0 = head * seq_len + start
    kv_row0 = (head // group) * seq_len
    if CAUSAL:
        n_blocks = ws.cdiv(min(start + BM, seq_len), BN)
        reach = 0
    else:
        n_blocks = ws.cdiv(seq_len, BN)
        reach = seq_len
    qk_scale = sm_scale * LOG2E
    q_tile = ws.load(q, (q_row0, 0), (BM, D))
    q_idx = start + ws.arange(0, BM)
    m_i = ws.full((BM,), -math.inf, ws.float32)
    l_i = ws.zeros((BM,), ws.float32)
    acc = ws.zeros((BM, D), ws.float32)
    s = ws.dot(q_tile, ws.trans(ws.load(k, (kv_row0, 0), (BN, D))))
    for j in range(n_blocks):
        k_next = ws.load(k, (kv_row0 + (j + 1) * BN, 0), (BN, D))
        v_tile = ws.load(v, (kv_row0 + j * BN, 0), (BN, D))
        s_next = ws.dot(q_tile, ws.trans(k_next))
        if MASK == "reach":
            k_idx = j * BN + ws.arange(0, BN)
            keep = (k_idx[None, :] < seq_len) & (k_idx[None, :] <= q_idx[:, None] + reach)
            s = ws.where(keep, s, -math.inf)
        m_new = ws.maximum(m_i, ws.max(s, axis=1) * qk_scale)
        alpha = ws.exp2(m_i - m_new)
        p = ws.exp2(ws.fma(s, qk_scale, -m_new[:, None]))
        l_i = l_i * alpha + ws.sum(p, axis=1)
        acc = ws.dot(p.astype(v.dtype), v_tile, acc * alpha[:, None])
        m_i = m_new
        s = s_next
    examples.attention_store(o, lse, q_row0, q_idx, seq_len, acc, m_i, l_i)


def attention_fwd_reachmask(q, k, v, o, lse, seq_len, group, sm_scale, BM: ws.constexpr,
                            BN: ws.constexpr, D: ws.constexpr, CAUSAL: ws.constexpr):
    """examples.attention_fwd as it was before 2026-12-06: the masked blocks (diagonal,
    tail) compare int64 key indices, ``(k_idx < seq_len) & (k_idx <= q_idx + reach)``
    (now ``examples._keep``: int32 offsets, one compare per column or element)."""
    head = ws.program_id(1)
    start = (ws.num_programs(0) - 1 - ws.program_id(0)) * BM
    q_row0 = head * seq_len + start
    kv_row0 = (head // group) * seq_len
    if CAUSAL:
        n_blocks = ws.cdiv(min(start + BM, seq_len), BN)
        mask_from = start // BN
        reach = 0
    else:
        n_blocks = ws.cdiv(seq_len, BN)
        mask_from = seq_len // BN
        reach = seq_len
    qk_scale = sm_scale * LOG2E
    q_tile = ws.load(q, (q_row0, 0), (BM, D))
    q_idx = start + ws.arange(0, BM)
    m_i = ws.full((BM,), -math.inf, ws.float32)
    l_i = ws.zeros((BM,), ws.float32)
    acc = ws.zeros((BM, D), ws.float32)
    for j in range(n_blocks):
        k_tile = ws.load(k, (kv_row0 + j * BN, 0), (BN, D))
        v_tile = ws.load(v, (kv_row0 + j * BN, 0), (BN, D))
        s = ws.dot(q_tile, ws.trans(k_tile))
        if j >= mask_from:
            k_idx = j * BN + ws.arange(0, BN)
            keep = (k_idx[None, :] < seq_len) & (k_idx[None, :] <= q_idx[:, None] + reach)
            s = ws.where(keep, s, -math.inf)
        m_new = ws.maximum(m_i, ws.max(s, axis=1) * qk_scale)
        alpha = ws.exp2(m_i - m_new)
        p = ws.exp2(ws.fma(s, qk_scale, -m_new[:, None]))
        l_i = l_i * alpha + ws.sum(p, axis=1)
        acc = ws.dot(p.astype(v.dtype), v_tile, acc * alpha[:, None])
        m_i = m_new
    examples.attention_store(o, lse, q_row0, q_idx, seq_len, acc, m_i, l_i)


_PIPELINED_AS = ws.jit(attention_fwd_pipelined_as)
#: name -> (kernel, extra constexprs)
KERNELS = {"plain": (ws.jit(examples.attention_fwd), {}),
           "plain, mask as before 12-06": (ws.jit(attention_fwd_reachmask), {}),
           "pipelined": (ws.jit(examples.attention_fwd_pipelined), {}),
           "pipelined, mask as before 12-06": (_PIPELINED_AS, dict(MASK="reach")),
           "pipelined, no mask": (_PIPELINED_AS, dict(MASK="none"))}
TWO, THREE = dict(num_buffers_warp_spec=2), dict(num_buffers_warp_spec=3, dot_in_flight=1)
#: (kernel, BN, options) per head dim
#: the variants timed (the masks as before 12-06 were not run on a GPU either; KERNELS
#: keeps them for --all)
TIMED = ["plain", "pipelined", "pipelined, no mask"]
VARIANTS = {128: [(name, 128, opt) for name in TIMED for opt in (TWO, THREE)],
            64: [("plain", 256, TWO)] + [(name, 128, opt) for name in TIMED
                                         for opt in (TWO, THREE)]}
VARIANTS_ALL = {128: [(name, 128, opt) for name in KERNELS for opt in (TWO, THREE)],
                64: [("plain", 256, TWO)] + [(name, 128, opt) for name in KERNELS
                                             for opt in (TWO, THREE)]}
#: (B, H, S, D, causal); "no mask" is not run on causal rows (it would be wrong there)
SHAPES = [(4, 32, 4096, 128, False), (8, 16, 2048, 128, False), (4, 32, 4096, 64, False),
          (8, 16, 2048, 64, False), (4, 32, 4096, 128, True), (8, 16, 2048, 64, True)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--rows", type=int, default=len(SHAPES), help="the first N shapes only")
    p.add_argument("--all", action="store_true", help="also the masks as before 12-06")
    opts = p.parse_args()
    print(f"device: {torch.cuda.get_device_name()}")
    for B, H, S, D, causal in SHAPES[:opts.rows]:
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16)
                   for _ in range(3))
        o = torch.empty_like(q)
        lse = torch.empty(B * H * S, device="cuda", dtype=torch.float32)
        flat = [x.view(B * H * S, D) for x in (q, k, v, o)]
        flops = 4.0 * B * H * S * S * D / (2 if causal else 1)
        ref = bench._reference(*(x.view(B * H, S, D)[:bench.CHECK_HEADS] for x in (q, k, v)),
                               1 / math.sqrt(D), causal)
        runs = {}
        for name, BN, opt in (VARIANTS_ALL if opts.all else VARIANTS)[D]:
            if causal and name == "pipelined, no mask":
                continue
            label = f"{name}, BN {BN}, {opt['num_buffers_warp_spec']} slots" + (
                ", dot_in_flight" if opt.get("dot_in_flight") else "")
            kernel, extra = KERNELS[name]
            launch = kernel[(ws.cdiv(S, 128), B * H)]

            def run(launch=launch, BN=BN, opt=dict(opt, **extra)):
                launch(*flat, lse, S, 1, 1 / math.sqrt(D), BM=128, BN=BN, D=D, CAUSAL=causal,
                       **opt)
            _, problem = bench.first_run(run, o, lse, ref, B, H, S, D)
            if problem:
                print(f"  {label}: {problem}")
                continue
            runs[label] = run
        cudnn = dict(bench._torch_backends())["cudnn"]
        runs["cuDNN"] = lambda: bench._time_torch(q, k, v, cudnn, causal)
        results = {label: [] for label in runs}
        for _ in range(opts.rounds):          # A B A B: alternate every variant per round
            for label, run in runs.items():
                ms = run() if label == "cuDNN" else bench._bench(run)
                results[label].append(flops / ms / 1e9)
        print(f"B={B} H={H} S={S} D={D} fp16 {'causal' if causal else 'non-causal'}, "
              "TFLOP/s per round (vs cuDNN):")
        for label, tf in results.items():
            rel = [t / c for t, c in zip(tf, results["cuDNN"])]
            print(f"  {label:<48} " + "  ".join(f"{t:6.1f} ({r:.3f})" for t, r in zip(tf, rel)))
        del q, k, v, o, lse, ref


if __name__ == "__main__":
    main()
