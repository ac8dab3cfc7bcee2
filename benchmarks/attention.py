"""Flash-attention forward throughput: numba_ws beside torch's scaled_dot_product_attention.

    python benchmarks/attention.py [--quick] [--explore] [--only D,causal,dtype] [--json out.json]

numba_ws runs ``examples.attention_fwd`` (the flash-attention tile program:
``exp2`` with the scale folded into one FMA, causal key loop stopping at the diagonal,
only the diagonal / tail blocks masked, log-sum-exp written) on q, k, v of shape
(B, H, S, D) viewed as (B*H*S, D); grid (cdiv(S, BM), B*H) or, for ``persistent``
configurations, ``examples.attention_fwd_persistent`` on one program per SM. Every configuration is
checked against float64 (on the first heads, o and lse) before it is timed; a wrong
one is reported and not timed. torch runs ``F.scaled_dot_product_attention``
(``is_causal`` for the causal rows) with each available backend (flash, cuDNN) and its
default choice. Times: medians of triton.testing.do_bench. TFLOP/s = 4*B*H*S*S*D / t,
halved for causal rows. Same dtype in and out (fp16 or bf16).
"""
import argparse
import json
import math
import sys

import torch
import torch.nn.functional as F

import numba_ws as ws
from numba_ws import configs, examples

#: (B, H, S) x D x causal x dtype
BATCHES = [(4, 32, 4096), (8, 16, 2048)]
HEAD_DIMS = (64, 128, 256)
DTYPES = (torch.float16, torch.bfloat16)
QUICK = [(4, 32, 4096, 128, c, dt) for c in (False, True) for dt in DTYPES]
#: per head dim: BM=128 is two consumer warp groups of 64 query rows each. Shared
#: memory: Q (BM x D) + slots x (K + V) (BN x D each), 2 bytes per element.
#: ``dot_in_flight=1``: the PV dot of block j stays in flight while block j+1's QK^T dot
#: is issued (its slot is released one iteration later, so it wants 3 slots).
#: ``dot_turns=1``: the two consumer groups take turns issuing their QK^T dots.
#: ``pipelined``: ``examples.attention_fwd_pipelined`` (block j+1's QK^T issued before
#: block j's softmax): correct but 20-35 % slower on the H200 (2026-12-03), and 4-9 %
#: slower even with no mask at all (H100, 2026-12-07, scripts/attention_ab.py), so --explore.
#: ``persistent``: one program per SM looping over the (query block, head) tiles in head
#: groups (D=256 spills 1 KB, not a candidate). D=64 with BN=256 (2 slots): the widest
#: key block, best on the non-causal D64 rows (2026-12-04: 432 vs 404 TFLOP/s at S=4096),
#: with a clone per consumer group: one shared body was 4-5 % slower there in both A B
#: rounds (H100, 2026-12-06 17:13, BENCHMARKS.md), within noise at D128. D128 with
#: ``nvvm_opt=1`` (NVVM -opt=1): 1-5 % faster than -opt=3 on the non-causal rows, -2 to
#: +1.5 % on the causal ones (A/B and explore run, 2026-12-06 18:45 / 19:32); the best
#: config on 3 of the 6 rows of the explore run.
#: The persistent programs' producer computes each tile's head and query block with five
#: 64-bit divisions; at 40 registers ptxas 13.0 spills 8-16 bytes there once the consumer
#: groups share one body (2026-12-06, CPU VM); 56 / 224 spills nothing at D64 and D128.
#: ``lag_last_dot=1`` (2 slots: the prologue's K and the epilogue's V take single-slot
#: buffers of their own, 3 slots do not fit at D128): the PV dot of block j-1 issued
#: after block j's QK^T, block j's softmax overlapping it (FA3's intra-warpgroup overlap,
#: passes/lag_last_dot.py). With ``dot_in_flight=1`` it measured 3-8 % below the plain
#: program at D128, within 1 % at D64 (H100, 2026-12-07 03:05): the slot holding K_j and
#: V_{j-1} was released an iteration late; since 6dfbfac K and V have rings of their own,
#: released as their dot retires, without dot_in_flight: within noise of the plain
#: program at D128, 2-4 % above plain BN 128 at D64 (H100, 2026-12-07 03:20).
#: D=64 with BM=192: three consumer groups of 64 query rows (FA3's D64 tile), 512
#: threads at 24 / 160 registers: 0.96-1.04x cuDNN non-causal, +9 % over the best 2-group
#: config on the S=2048 causal row (H100, 2026-12-07 07:33, BENCHMARKS.md); 192-wide key
#: blocks there spill ~100 bytes and ran 12 % slower. D=128 with 176 / 192-wide key
#: blocks at 24 / 240 (FA3's 128 x 176) ran 2-8 % slower than BN=128 in the same run.
PERSISTENT_REGS = dict(reg_dec_producer=56, reg_inc_consumer=224)
LAG = dict(num_buffers_warp_spec=2, lag_last_dot=1)


def _library(D):
    """numba_ws.configs' candidates for head dim D (causal and not), first: the
    benchmark times every one of them."""
    out = []
    for causal in (False, True):
        out += [m for m in map(configs.as_meta, configs.attention(D, causal)) if m not in out]
    return out


# D=128 over three groups (BN=128 spills 20-32 bytes, BN=96 none): the best config on the
# non-causal rows (+3.7-5.7 %), 2-9 % below two groups on the causal ones; BN=64 10-18 % slower
# (H100, 2026-12-07 07:45, BENCHMARKS.md)
CONFIGS = {64: _library(64) + [
                dict(BM=128, BN=128, **LAG),
                dict(BM=128, BN=128, num_buffers_warp_spec=3, dot_in_flight=1),
                dict(BM=128, BN=128, num_buffers_warp_spec=4, dot_in_flight=1),
                dict(BM=128, BN=128, num_buffers_warp_spec=2, dot_turns=1),
                dict(BM=128, BN=256, num_buffers_warp_spec=2, shared_consumer_body=0),
                dict(BM=128, BN=128, num_buffers_warp_spec=3, dot_in_flight=1, persistent=True,
                     **PERSISTENT_REGS),
                dict(BM=128, BN=128, num_buffers_warp_spec=2, dot_turns=1, persistent=True),
                # three groups, persistent (snake order; 32 / 152: 24 / 160 spills 48 bytes
                # in the tile loop): 330.8 against 327.4 non-persistent on the S=2048 causal
                # row, 369.5 against 386.8 at S=4096 (H100, 2026-12-07 08:19, one round)
                dict(BM=192, BN=128, num_buffers_warp_spec=2, num_consumer_groups=3,
                     persistent=True, reg_dec_producer=32, reg_inc_consumer=152)],
           128: _library(128) + [
                 dict(BM=128, BN=128, num_buffers_warp_spec=2),
                 dict(BM=128, BN=128, num_buffers_warp_spec=3, dot_in_flight=1, nvvm_opt=1),
                 dict(BM=128, BN=128, num_buffers_warp_spec=2, dot_turns=1),
                 dict(BM=128, BN=128, num_buffers_warp_spec=2, persistent=True, **PERSISTENT_REGS),
                 dict(BM=128, BN=128, num_buffers_warp_spec=2, dot_turns=1, persistent=True)],
           # D=256 with 80-wide key blocks (FA3's 128 x 80 tile; Q 64 KB + 2 x (K + V) 40 KB
           # = 224 KB): 611 / 509 TFLOP/s in two rounds against 599 / 593 for BN=64 (H100,
           # 2026-12-07 07:55), a candidate until an A/B settles it
           256: _library(256) + [dict(BM=128, BN=128, num_buffers_warp_spec=1),
                                 dict(BM=128, BN=80, num_buffers_warp_spec=2)]}
EXPLORE = {64: [dict(BM=128, BN=128, num_buffers_warp_spec=2),
                dict(BM=128, BN=128, num_buffers_warp_spec=2, pipelined=True),
                dict(BM=128, BN=192, num_buffers_warp_spec=3),
                dict(BM=128, BN=256, num_buffers_warp_spec=3),
                dict(BM=128, BN=256, num_buffers_warp_spec=3, persistent=True),
                dict(BM=128, BN=64, num_buffers_warp_spec=4),
                dict(BM=128, BN=128, num_buffers_warp_spec=4, dot_in_flight=1,
                     shared_consumer_body=0)],
           128: [dict(BM=128, BN=64, num_buffers_warp_spec=3),
                 dict(BM=128, BN=128, num_buffers_warp_spec=2, dot_turns=1, nvvm_opt=1),
                 dict(BM=128, BN=128, num_buffers_warp_spec=3, dot_in_flight=1,
                      shared_consumer_body=0),
                 dict(BM=128, BN=64, num_buffers_warp_spec=3, dot_in_flight=1, pipelined=True),
                 dict(BM=128, BN=128, num_buffers_warp_spec=3),
                 dict(BM=128, BN=128, num_buffers_warp_spec=3, dot_in_flight=1, dot_turns=1)],
           256: [dict(BM=128, BN=64, num_buffers_warp_spec=1),
                 dict(BM=128, BN=64, num_buffers_warp_spec=2, dot_turns=1)]}
CHECK_HEADS = 2
TOL = 2e-2

attention = ws.jit(examples.attention_fwd)
attention_persistent = ws.jit(examples.attention_fwd_persistent)
attention_pipelined = ws.jit(examples.attention_fwd_pipelined)


def _bench(fn):
    import triton.testing
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def _reference(q, k, v, scale, causal):
    """float64 (o, lse) of softmax(q k^T * scale (+ causal mask)) v, (heads, S, D) in."""
    q, k, v = (x.double() for x in (q, k, v))
    s = q @ k.transpose(1, 2) * scale
    if causal:
        S = s.shape[-1]
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=s.device).triu(1),
                          float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[..., None]) @ v, lse


def _numba_ws(q, k, v, o, lse, cfg, causal):
    """The launch of one configuration: ``persistent`` (not a kernel option) runs one
    program per SM looping over the tiles; otherwise one program per tile."""
    B, H, S, D = q.shape
    cfg = dict(cfg)
    flat = [x.view(B * H * S, D) for x in (q, k, v, o)]
    scale = 1.0 / math.sqrt(D)
    if cfg.pop("pipelined", False):
        launch = attention_pipelined[(ws.cdiv(S, cfg["BM"]), B * H)]
        return lambda: launch(*flat, lse, S, 1, scale, D=D, CAUSAL=causal, **cfg)
    if cfg.pop("persistent", False):
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        programs = min(sms, ws.cdiv(S, cfg["BM"]) * B * H)
        launch = attention_persistent[(programs,)]
        head_group = examples.persistent_head_group(S, cfg["BM"], programs)
        return lambda: launch(*flat, lse, S, B * H, head_group, 1, scale, D=D,
                              CAUSAL=causal, **cfg)
    launch = attention[(ws.cdiv(S, cfg["BM"]), B * H)]
    return lambda: launch(*flat, lse, S, 1, scale, D=D, CAUSAL=causal, **cfg)


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


def _rows(opts):
    if opts.quick:
        rows = QUICK
    else:
        rows = [(B, H, S, D, c, dt) for dt in DTYPES for c in (False, True)
                for D in HEAD_DIMS for (B, H, S) in BATCHES
                if D != 256 or (B, H, S) == BATCHES[0]]
    if opts.only:
        d, c, name = opts.only.split(",")
        rows = [r for r in rows if str(r[3]) == d and str(r[4]) == c
                and str(r[5]).endswith(name)]
    return rows


def _check(o, lse, ref, B, H, S, D):
    got = o.view(B * H, S, D)[:CHECK_HEADS].double()
    err = ((got - ref[0]).abs().max() / ref[0].abs().max()).item()
    lse_err = ((lse.view(B * H, S)[:CHECK_HEADS].double() - ref[1]).abs().max()
               / ref[1].abs().max()).item()
    return max(err, lse_err)


def first_run(run, o, lse, ref, B, H, S, D):
    """Poison ``o`` / ``lse``, launch ``run`` once and check it against ``ref``: (relative
    error or None when refused, None when it is right or else what went wrong)."""
    o.fill_(float("nan"))
    lse.fill_(float("nan"))
    try:
        run()
        torch.cuda.synchronize()
    except ws.WSError as e:
        return None, f"refused: {str(e).splitlines()[0][:100]}"
    err = _check(o, lse, ref, B, H, S, D)
    return err, (None if err <= TOL else f"WRONG, relative error {err:.3e} (not timed)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--explore", action="store_true", help="more configurations per head dim")
    p.add_argument("--only", help="one class of rows, e.g. 128,True,bfloat16")
    p.add_argument("--json")
    opts = p.parse_args()
    rows, wrong = [], []
    for (B, H, S, D, causal, dtype) in _rows(opts):
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=dtype) for _ in range(3))
        o = torch.empty_like(q)
        lse = torch.empty(B * H * S, device="cuda", dtype=torch.float32)
        flops = 4.0 * B * H * S * S * D / (2 if causal else 1)
        ref = _reference(*(x.view(B * H, S, D)[:CHECK_HEADS] for x in (q, k, v)),
                         1 / math.sqrt(D), causal)
        best = None
        for cfg in CONFIGS[D] + (EXPLORE[D] if opts.explore else []):
            run = _numba_ws(q, k, v, o, lse, cfg, causal)
            err, problem = first_run(run, o, lse, ref, B, H, S, D)
            if problem:
                if err is not None:
                    wrong.append(f"B={B} H={H} S={S} D={D} causal={causal} {dtype} {cfg}: "
                                 f"relative error {err:.3e}")
                print(f"    {cfg}: {problem}", flush=True)
                continue
            ms = _bench(run)
            print(f"    numba_ws {cfg}: {flops / ms / 1e9:7.1f} TFLOP/s  err {err:.1e}",
                  flush=True)
            if best is None or ms < best[0]:
                best = (ms, cfg, err)
        row = dict(B=B, H=H, S=S, D=D, causal=causal, dtype=str(dtype).split(".")[-1],
                   config=best[1] if best else None, err=best[2] if best else None,
                   numba_ws=flops / best[0] / 1e9 if best else float("nan"))
        for name, ctx in _torch_backends():
            row[name] = flops / _time_torch(q, k, v, ctx, causal) / 1e9
        rows.append(row)
        cudnn = row.get("cudnn", float("nan"))
        print(f"{row['dtype']:8s} B={B} H={H} S={S:5d} D={D:3d} "
              f"{'causal' if causal else 'full  '}  numba_ws {row['numba_ws']:7.1f}  "
              + "  ".join(f"{n} {row[n]:7.1f}" for n, _ in _torch_backends())
              + f"  TFLOP/s  vs cuDNN {row['numba_ws'] / cudnn:.3f}", flush=True)
        del q, k, v, o, lse, ref
    ratios = [r["numba_ws"] / r["cudnn"] for r in rows
              if r.get("cudnn", float("nan")) > 0 and r["numba_ws"] > 0]
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan")
    print(f"geomean numba_ws / cuDNN = {geo:.3f} over {len(ratios)} rows"
          + (f"; lowest row {min(ratios):.3f}" if ratios else ""))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"rows": rows, "device": torch.cuda.get_device_name(), "wrong": wrong,
                       "geomean_vs_cudnn": geo}, f, indent=1, default=str)
    if wrong:
        sys.exit("wrong results (not timed):\n  " + "\n  ".join(wrong))


if __name__ == "__main__":
    main()
