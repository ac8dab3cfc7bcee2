"""The cases of ``examples.attention_fwd`` and ``attention_fwd_persistent`` (issue 18
items 1 and 3): causal and not, head dims
64 / 128 / 256, fp16 and bf16, sequence lengths that are not multiples of the blocks,
grouped-query attention, and the log-sum-exp row statistic.

Each case gives fresh inputs and float64 references for both outputs (``o`` in the
input dtype, ``lse`` in float32), NaN-poisoned with guard rows (kernels_tiles.Out).
``BM`` is 128 for two consumer groups (64 rows each) and 64 for one: one warp group
holding 128 rows of a D=128 accumulator would spill.
"""
import math

import numpy as np

from numba_ws import examples

import kernels_tiles as kt
from kernels_masks import Partial
from kernels_tiles import Case, Out

#: tolerances: o relative to max |o| (one bf16 / fp16 rounding of P, then of o);
#: lse relative to max |lse| (fp32 sums and ex2.approx)
O_TOL = {"float16": 1e-2, "bfloat16": 2e-2}
LSE_TOL = 1e-4


def reference(q, k, v, batch, heads, kv_heads, seq, scale, causal):
    """float64 (o, lse) of (B*H*S, D) q and (B*H_kv*S, D) k, v: key/value head
    ``h // (heads // kv_heads)`` serves query head h."""
    D = q.shape[1]
    q = kt.f64(q).reshape(batch, heads, seq, D)
    k, v = (np.repeat(kt.f64(x).reshape(batch, kv_heads, seq, D), heads // kv_heads, axis=1)
            for x in (k, v))
    s = q @ k.transpose(0, 1, 3, 2) * scale
    if causal:
        s = np.where(np.tril(np.ones((seq, seq), bool)), s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - m)
    l = p.sum(axis=-1, keepdims=True)
    return (p / l @ v).reshape(-1, D), (m + np.log(l)).reshape(-1)


def grid(seq, heads_total, BM, programs=None):
    """attention_fwd's grid, or ``programs`` looping over the tiles (the persistent
    kernel's)."""
    return (programs,) if programs else (-(-seq // BM), heads_total)


def case(dtype, D, seq, causal, batch=1, heads=2, kv_heads=None, BM=128, BN=64,
         slots=2, poison_from=None, programs=None, pipelined=False):
    """One ``attention_fwd`` case; ``kv_heads`` < ``heads`` is grouped-query attention.

    ``poison_from`` (causal, a multiple of BM and BN): v's rows from there on are NaN in
    every head. Query blocks ending at or before it never load those key blocks, so
    their rows must come out right; the later blocks' rows must be NaN (they read the
    poison), a check that the key loop stops at the diagonal (kernels_masks.Partial).
    ``programs``: ``attention_fwd_persistent`` with that many programs looping over the
    tiles; ``pipelined``: ``attention_fwd_pipelined``."""
    kv_heads = kv_heads or heads

    def make(rng):
        q = kt._values(rng, (batch * heads * seq, D), dtype, -2.0, 2.0)
        k, v = (kt._values(rng, (batch * kv_heads * seq, D), dtype, -2.0, 2.0)
                for _ in range(2))
        scale = 1.0 / math.sqrt(D)
        o, lse = reference(q, k, v, batch, heads, kv_heads, seq, scale, causal)
        out = Out(o.shape, dtype, o, O_TOL[dtype])
        if poison_from is not None:
            v.reshape(-1, seq, D)[:, poison_from:] = np.nan
            o.reshape(-1, seq, D)[:, poison_from:] = np.nan
            out = Partial(o.shape, dtype, o, O_TOL[dtype])
        args = [q, k, v, out, Out(lse.shape, "float32", lse, LSE_TOL), seq]
        # head groups of 3: ragged for 8 heads (3, 3, 2), one group for 2 or 3
        args += [batch * heads, 3] if programs else []
        args += [heads // kv_heads, scale]
        return args, grid(seq, batch * heads, BM, programs)
    gqa = f"-gqa{heads}:{kv_heads}" if kv_heads != heads else ""
    poison = f"-nan-v{poison_from}" if poison_from is not None else ""
    persistent = f"-p{programs}" if programs else "-pipelined" if pipelined else ""
    name = (f"attention-{'causal' if causal else 'full'}-{dtype}-d{D}-s{seq}{gqa}{poison}"
            f"-{BM}x{BN}{persistent}")
    kernel = examples.attention_fwd_persistent if programs else \
        examples.attention_fwd_pipelined if pipelined else examples.attention_fwd
    return Case(name, kernel, make,
                dict(BM=BM, BN=BN, D=D, CAUSAL=causal, num_buffers_warp_spec=slots),
                gemm=True)


def _two_groups():
    cases = []
    for causal in (False, True):
        cases += [case("float16", 64, 256, causal, BN=128),
                  case("bfloat16", 128, 200, causal),
                  case("float16", 128, 333, causal, batch=2, heads=4, kv_heads=2),
                  case("float16", 256, 192, causal)]
    cases += [case("bfloat16", 64, 77, True, heads=3, kv_heads=1, BN=128),
              case("float16", 64, 384, True, poison_from=128),
              case("float16", 128, 333, True, batch=2, heads=4, kv_heads=2, programs=5),
              case("bfloat16", 64, 256, False, heads=3, BN=128, programs=4),
              case("float16", 64, 384, True, poison_from=128, programs=3),
              case("bfloat16", 128, 333, True, batch=2, heads=4, kv_heads=2, BN=128,
                   pipelined=True),
              case("float16", 64, 200, False, BN=128, pipelined=True),
              case("float16", 256, 192, True, pipelined=True),
              # D=64 with 256-wide key blocks (the benchmark's best non-causal D64 tile)
              case("float16", 64, 600, False, BN=256),
              case("bfloat16", 64, 520, True, heads=4, kv_heads=2, BN=256)]
    return cases


def _one_group():
    return [case("float16", 128, 130, False, heads=4, kv_heads=1, BM=64),
            case("bfloat16", 64, 200, True, BM=64, BN=128),
            case("bfloat16", 256, 100, False, BM=64),
            case("float16", 128, 256, True, BM=64, poison_from=128),
            case("float16", 64, 200, True, heads=3, BM=64, programs=5),
            case("float16", 128, 256, True, BM=64, poison_from=128, pipelined=True)]


def _three_groups():
    """BM=192: three consumer groups of 64 query rows (FA3's D64 tile; at D128 with key
    blocks of 64 / 96); the register split of 4 warp groups: :data:`THREE_GROUP_REGS`."""
    return [case("float16", 64, 500, False, BM=192, BN=128),
            case("bfloat16", 64, 333, True, heads=4, kv_heads=2, BM=192, BN=128),
            case("float16", 64, 768, True, BM=192, BN=128, poison_from=384),
            case("bfloat16", 64, 450, False, BM=192, BN=192),
            case("float16", 64, 300, True, BM=192, BN=128, slots=3),
            case("float16", 128, 333, True, heads=4, kv_heads=2, BM=192, BN=64, slots=3),
            case("bfloat16", 128, 500, False, BM=192, BN=96)]


def _wide_keys():
    """Key blocks that are no power of two at 24 / 240 registers: 176 / 192 at D=128
    (FA3's 128 x 176), 80 at D=256 (FA3's 128 x 80)."""
    return [case("float16", 128, 500, False, BN=176),
            case("bfloat16", 128, 333, True, heads=4, kv_heads=2, BN=176),
            case("float16", 128, 400, True, BN=192),
            case("bfloat16", 256, 300, True, BN=80)]


#: the cases for two consumer groups (BM=128: 64 query rows each), by name
CASES = {c.name: c for c in _two_groups()}
#: 512 threads: 128 x 24 + 384 x 160 registers fit the 64K register file
THREE_GROUP_REGS = dict(reg_dec_producer=24, reg_inc_consumer=160)
#: the cases for three consumer groups (BM=192), by name
THREE_GROUPS = {c.name: c for c in _three_groups()}
#: 384 threads: 128 x 24 + 256 x 240 registers
WIDE_KEY_REGS = dict(reg_dec_producer=24, reg_inc_consumer=240)
#: D=128 / 256 cases with BN 176, 192, 80 for two consumer groups, by name
WIDE_KEYS = {c.name: c for c in _wide_keys()}
#: the cases for one consumer group (BM=64: a 128-row D=128 accumulator would spill)
ONE_GROUP = {c.name: c for c in _one_group()}
