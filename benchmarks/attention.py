"""Flash-attention forward throughput: numba_ws beside torch's scaled_dot_product_attention.

    python benchmarks/attention.py [--quick] [--json out.json]

numba_ws runs ``attention_fwd`` of tests/kernels.py (fp16, no mask) or, for the causal
rows, ``causal_attention_fwd`` (every key block masked with ``ws.where``) and
``causal_attention_diag_fwd`` (only the blocks crossing the diagonal) of
tests/kernels_masks.py, the key loop stopping at the diagonal, on q, k, v of shape (B, H, S, D)
viewed as (B*H*S, D); grid (S / BM, B*H). Every numba_ws configuration is checked against
float64 (on the first heads) before it is timed. torch runs
``F.scaled_dot_product_attention`` (``is_causal`` for the causal rows) with each
available backend (flash, cuDNN) and its default choice. Times: medians of
triton.testing.do_bench. TFLOP/s = 4*B*H*S*S*D / t, halved for causal rows.
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

import numba_ws as ws

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from kernels import attention_fwd  # noqa: E402
from kernels_masks import causal_attention_diag_fwd, causal_attention_fwd  # noqa: E402

#: (B, H, S, D, causal)
SHAPES = [(4, 32, 4096, 128, False), (4, 32, 4096, 64, False), (4, 16, 1024, 64, False),
          (4, 16, 1024, 128, False), (8, 16, 2048, 128, False), (4, 32, 4096, 128, True),
          (4, 32, 4096, 64, True), (8, 16, 2048, 128, True)]
QUICK = [(4, 32, 4096, 128, False), (4, 16, 1024, 64, False), (4, 32, 4096, 128, True)]
#: BM=128: two consumer warp groups of 64 rows each. D=128 with BN=128 fits the
#: registers (0 spills) and, with 3 slots, 224 KB of shared memory.
CONFIGS = [dict(BM=128, BN=64, num_buffers_warp_spec=3),
           dict(BM=128, BN=128, num_buffers_warp_spec=2),
           dict(BM=128, BN=128, num_buffers_warp_spec=3)]
CHECK_HEADS = 2

attention = ws.jit(attention_fwd)
#: causal candidates: every key block masked, or only those crossing the diagonal
CAUSAL = {"mask-all": ws.jit(causal_attention_fwd),
          "mask-diagonal": ws.jit(causal_attention_diag_fwd)}


def _bench(fn):
    import triton.testing
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def _reference(q, k, v, scale, heads, causal):
    """float64 softmax(q k^T * scale (+ causal mask)) v for the first ``heads`` of
    (B*H, S, D) tensors."""
    q, k, v = (x[:heads].double() for x in (q, k, v))
    s = q @ k.transpose(1, 2) * scale
    if causal:
        S = s.shape[-1]
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=s.device).triu(1),
                          float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def _numba_ws(q, k, v, o, cfg, kernel):
    B, H, S, D = q.shape
    flat = [x.view(B * H * S, D) for x in (q, k, v, o)]
    launch = kernel[(S // cfg["BM"], B * H)]
    return lambda: launch(*flat, S, 1.0 / math.sqrt(D), D=D, **cfg)


def _torch_backends():
    """(name, context-manager factory) per SDPA backend to time."""
    out = [("sdpa", None)]
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        out += [("flash", lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)),
                ("cudnn", lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION))]
    except ImportError:
        pass
    return out


def _time_torch(q, k, v, ctx, causal):
    def call():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    try:
        if ctx is None:
            call()
            return _bench(call)
        with ctx():
            call()
            return _bench(call)
    except RuntimeError as e:          # backend not available for this shape / build
        print(f"    (torch backend unavailable: {str(e).splitlines()[0][:80]})")
        return float("nan")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json")
    opts = p.parse_args()
    rows, wrong = [], []
    for (B, H, S, D, causal) in (QUICK if opts.quick else SHAPES):
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16)
                   for _ in range(3))
        o = torch.empty_like(q)
        flops = 4.0 * B * H * S * S * D / (2 if causal else 1)
        ref = _reference(*(x.view(B * H, S, D) for x in (q, k, v)), 1 / math.sqrt(D),
                         CHECK_HEADS, causal)
        best = None
        kernels = CAUSAL if causal else {"": attention}
        for name, cfg in [(n, c) for n in kernels for c in CONFIGS]:
            if S % cfg["BM"] or S % cfg["BN"]:
                continue
            o.fill_(float("nan"))
            try:
                run = _numba_ws(q, k, v, o, cfg, kernels[name])
                run()
                torch.cuda.synchronize()
            except ws.WSError as e:
                print(f"    {cfg}: {str(e).splitlines()[0][:100]}")
                continue
            got = o.view(B * H, S, D)[:CHECK_HEADS].double()
            err = ((got - ref).abs().max() / ref.abs().max()).item()
            if not err <= 2e-2:
                wrong.append(f"B={B} H={H} S={S} D={D} causal={causal} {name} {cfg}: "
                             f"relative error {err:.3e}")
                print(f"    WRONG {wrong[-1]} (not timed)", flush=True)
                continue
            ms = _bench(run)
            print(f"    numba_ws {name} {cfg}: {flops / ms / 1e9:7.1f} TFLOP/s  err {err:.1e}",
                  flush=True)
            if best is None or ms < best[0]:
                best = (ms, dict(cfg, kernel=name) if name else cfg, err)
        row = dict(B=B, H=H, S=S, D=D, causal=causal, config=best[1] if best else None,
                   err=best[2] if best else None,
                   numba_ws=flops / best[0] / 1e9 if best else float("nan"))
        for name, ctx in _torch_backends():
            row[name] = flops / _time_torch(q, k, v, ctx, causal) / 1e9
        rows.append(row)
        torch_best = max((row[n] for n, _ in _torch_backends()
                          if not math.isnan(row[n])), default=float("nan"))
        print(f"B={B} H={H} S={S:5d} D={D:3d} {'causal' if causal else 'full  '}  "
              f"numba_ws {row['numba_ws']:7.1f}  "
              + "  ".join(f"{n} {row[n]:7.1f}" for n, _ in _torch_backends())
              + f"  TFLOP/s  ratio vs best torch {row['numba_ws'] / torch_best:.3f}",
              flush=True)
        del q, k, v, o, ref
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"rows": rows, "device": torch.cuda.get_device_name(), "wrong": wrong},
                      f, indent=1, default=str)
    if wrong:
        sys.exit("wrong results (not timed):\n  " + "\n  ".join(wrong))


if __name__ == "__main__":
    main()
