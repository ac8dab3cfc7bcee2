#!/usr/bin/env python3
"""Attention configurations against each other on the GPU: A B A B in one process, cuDNN
timed in every round beside them.

    python3 scripts/config_ab.py --row 256,False,float16 [--row ...]
        --config BM=128,BN=64,num_buffers_warp_spec=2 --config BM=128,BN=80,... [--rounds 4]

``--row`` is ``D,causal,dtype[,B,H,S]`` (default B4 H32 S4096); ``--config`` is
``key=value`` pairs of one launch of ``benchmarks/attention.py`` (ints, ``persistent=1``,
``pipelined=1``). Every configuration is checked against float64 (o and lse of the first
heads, NaN-poisoned outputs) before its first timing; a wrong or refused one is reported
and left out. Prints TFLOP/s per round and the ratio to the first configuration, so a
difference under ~5 % can be read against the round-to-round spread (METHOD: alternate).
"""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "benchmarks"))
import attention as bench  # noqa: E402


def parse_config(text):
    """``BM=128,BN=64,persistent=1`` -> the benchmark's config dict (int values;
    ``persistent`` / ``pipelined`` as bools)."""
    cfg = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        if not value:
            raise SystemExit(f"--config {text!r}: {item!r} is not key=value")
        cfg[key.strip()] = int(value)
    for flag in ("persistent", "pipelined"):
        if flag in cfg:
            cfg[flag] = bool(cfg[flag])
    return cfg


def parse_row(text):
    """``D,causal,dtype[,B,H,S]`` -> (B, H, S, D, causal, torch dtype)."""
    parts = text.split(",")
    if len(parts) not in (3, 6):
        raise SystemExit(f"--row {text!r}: expected D,causal,dtype[,B,H,S]")
    D, causal, dtype = int(parts[0]), parts[1] in ("1", "True", "true"), parts[2]
    B, H, S = map(int, parts[3:]) if len(parts) == 6 else (4, 32, 4096)
    return B, H, S, D, causal, getattr(torch, dtype)


def one_row(row, configs, rounds):
    B, H, S, D, causal, dtype = row
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=dtype) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(B * H * S, device="cuda", dtype=torch.float32)
    flops = 4.0 * B * H * S * S * D / (2 if causal else 1)
    ref = bench._reference(*(x.view(B * H, S, D)[:bench.CHECK_HEADS] for x in (q, k, v)),
                           1 / math.sqrt(D), causal)
    runs = {}
    for text, cfg in configs:
        run = bench._numba_ws(q, k, v, o, lse, cfg, causal)
        _, problem = bench.first_run(run, o, lse, ref, B, H, S, D)
        if problem:
            print(f"  {text}: {problem}")
            continue
        runs[text] = run
    ctx = dict(bench._torch_backends()).get("cudnn")
    times = {name: [] for name in list(runs) + ["cudnn"]}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(flops / bench._bench(run) / 1e9)
        times["cudnn"].append(flops / bench._time_torch(q, k, v, ctx, causal) / 1e9)
    print(f"{str(dtype).split('.')[-1]} B={B} H={H} S={S} D={D} "
          f"{'causal' if causal else 'full'}: TFLOP/s per round (x first config)")
    first = times[next(iter(runs))] if runs else None
    for name, tf in times.items():
        cells = "  ".join(f"{t:6.1f}" + (f" ({t / f:.3f})" if first else "")
                          for t, f in zip(tf, first or tf))
        print(f"  {name:<64} {cells}")
    return times


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--row", action="append", required=True)
    p.add_argument("--config", action="append", required=True)
    p.add_argument("--rounds", type=int, default=4)
    opts = p.parse_args()
    configs = [(text, parse_config(text)) for text in opts.config]
    for text in opts.row:
        one_row(parse_row(text), configs, opts.rounds)


if __name__ == "__main__":
    main()
