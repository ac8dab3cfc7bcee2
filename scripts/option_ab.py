#!/usr/bin/env python3
"""Two values of one compile option on the GPU: same kernels, A B A B in one process
beside cuBLAS / cuDNN.

    python3 scripts/option_ab.py [--option shared_consumer_body --values 1 0] [--rounds N]
        [--gemm-config BM=128,BN=256,BK=64,GROUP_M=16,num_buffers_warp_spec=3,persistent=1]
        [--gemm-shape 8192x8192x1024] [--dtype bfloat16] [--no-attention]

For options that shrink the PTX (compile time, issue 17: ``shared_consumer_body``,
``nvvm_opt``) what must be shown is that they cost no run time. GEMM rows
(fp16 in and out) with the benchmark's two leading configurations, attention rows (fp16,
the best configurations of the 2026-12-06 attention_ab run). Every variant is checked
against float64 on NaN-poisoned outputs before it is timed.
"""
import argparse
import math
import os
import sys

import torch

from numba_ws.runtime.options import Options

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "benchmarks"))
import attention as abench  # noqa: E402
import gemm as gbench  # noqa: E402

GEMM_SHAPES = [(4096, 4096, 4096), (8192, 8192, 1024), (8192, 8192, 8192)]
#: the persistent BK=64 4-slot kernel and the plain BK=128 2-slot one
GEMM_CONFIGS = [dict(c) for c in gbench.CONFIGS
                if (c.get("persistent"), c["BK"], c["dot_in_flight"], c.get("tma_store", 0))
                in ((True, 64, 0, 0), (None, 128, 0, 0))][::-1]
#: (B, H, S, D, causal, config)
ATTENTION_ROWS = [
    (4, 32, 4096, 128, False, dict(BM=128, BN=128, num_buffers_warp_spec=3, dot_in_flight=1)),
    (4, 32, 4096, 64, False, dict(BM=128, BN=256, num_buffers_warp_spec=2,
                                  shared_consumer_body=0)),
    (4, 32, 4096, 128, True, dict(BM=128, BN=128, num_buffers_warp_spec=2))]


def _report(title, results, base):
    print(title)
    for label, tf in results.items():
        rel = [t / c for t, c in zip(tf, results[base])]
        print(f"  {label:<58} " + "  ".join(f"{t:6.1f} ({r:.3f})" for t, r in zip(tf, rel)))


def _gemm_config(spec):
    """``--gemm-config`` text (k=v pairs, ints) -> a benchmark config; the
    consumer-group count and dot_in_flight default to the benchmark's 2 and 0."""
    cfg = dict(num_consumer_groups=2, dot_in_flight=0)
    for item in spec.split(","):
        key, _, value = item.partition("=")
        cfg[key.strip()] = int(value)
    return cfg


def gemm_rows(rounds, option, values, configs, shapes, dtype):
    for M, N, K in shapes:
        copies = max(2, int(2 * 60e6 / (2 * (M * K + K * N + M * N))) + 1)
        sets = gbench._inputs(M, N, K, dtype, copies)
        runs = {}
        for cfg in configs:
            for value in values:
                run = gbench._variant(dict(cfg, **{option: value}), M, N)
                a, b, c = sets[0]
                c.fill_(float("nan"))
                run(a, b, c)
                torch.cuda.synchronize()
                gbench._check(a, b, c)
                regs = (f" regs {cfg['reg_dec_producer']}/{cfg['reg_inc_consumer']}"
                        if "reg_dec_producer" in cfg else "")
                runs[f"{gbench._label(cfg)}{regs} {option}={value}"] = run
        runs["cuBLAS"] = torch.matmul
        results = {label: [] for label in runs}
        flops = 2.0 * M * N * K
        for _ in range(rounds):
            for label, run in runs.items():
                fn = (lambda a, b, c: torch.matmul(a, b, out=c)) if label == "cuBLAS" else run
                results[label].append(flops / gbench._bench(fn, sets) / 1e9)
        _report(f"GEMM {M}x{N}x{K} {str(dtype).split('.')[1]}, TFLOP/s per round "
                f"(vs cuBLAS):", results, "cuBLAS")
        del sets


def attention_rows(rounds, option, values):
    for B, H, S, D, causal, cfg in ATTENTION_ROWS:
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16)
                   for _ in range(3))
        o = torch.empty_like(q)
        lse = torch.empty(B * H * S, device="cuda", dtype=torch.float32)
        ref = abench._reference(*(x.view(B * H, S, D)[:abench.CHECK_HEADS]
                                  for x in (q, k, v)), 1 / math.sqrt(D), causal)
        runs = {}
        for value in values:
            run = abench._numba_ws(q, k, v, o, lse, dict(cfg, **{option: value}), causal)
            o.fill_(float("nan"))
            lse.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            err = abench._check(o, lse, ref, B, H, S, D)
            if not err <= abench.TOL:
                raise AssertionError(f"attention {option}={value}: relative error {err:.2e}")
            runs[f"BN {cfg['BN']}, {cfg['num_buffers_warp_spec']} slots"
                 f"{', dot_in_flight' if cfg.get('dot_in_flight') else ''} {option}={value}"] = run
        cudnn = dict(abench._torch_backends())["cudnn"]
        runs["cuDNN"] = lambda: abench._time_torch(q, k, v, cudnn, causal)
        flops = 4.0 * B * H * S * S * D / (2 if causal else 1)
        results = {label: [] for label in runs}
        for _ in range(rounds):
            for label, run in runs.items():
                ms = run() if label == "cuDNN" else abench._bench(run)
                results[label].append(flops / ms / 1e9)
        _report(f"attention B={B} H={H} S={S} D={D} fp16 "
                f"{'causal' if causal else 'non-causal'}, TFLOP/s per round (vs cuDNN):",
                results, "cuDNN")
        del q, k, v, o, lse, ref


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--option", default="shared_consumer_body",
                   choices=Options.names())
    p.add_argument("--values", type=int, nargs=2, default=[1, 0])
    p.add_argument("--gemm-config", action="append", default=[],
                   help="k=v,... (repeatable; default: the benchmark's two leading configs)")
    p.add_argument("--gemm-shape", action="append", default=[], help="MxNxK (repeatable)")
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    p.add_argument("--no-attention", action="store_true")
    opts = p.parse_args()
    print(f"device: {torch.cuda.get_device_name()}; {opts.option} in {opts.values}")
    configs = [_gemm_config(s) for s in opts.gemm_config] or GEMM_CONFIGS
    shapes = [tuple(int(x) for x in s.split("x")) for s in opts.gemm_shape] or GEMM_SHAPES
    gemm_rows(opts.rounds, opts.option, opts.values, configs, shapes,
              getattr(torch, opts.dtype))
    if not opts.no_attention:
        attention_rows(opts.rounds, opts.option, opts.values)


if __name__ == "__main__":
    main()
