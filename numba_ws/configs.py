"""Measured starting points for ``ws.autotune``: per kernel of :mod:`numba_ws.examples`
and shape class, the configurations that won in ``benchmarks/gemm.py`` and
``benchmarks/attention.py`` (H100, 2026-12-07 07:43-07:55 UTC, BENCHMARKS.md), best
first. Each list is a few :class:`~numba_ws.runtime.autotune.Config` objects, so the
tuner's first key miss compiles and times only those::

    from numba_ws import configs, examples
    attention = ws.autotune(configs.attention(D=64, causal=True), key=["seq_len"])(
        ws.jit(examples.attention_fwd))
    attention[lambda m: (ws.cdiv(S, m["BM"]), B * H)](q, k, v, o, lse, S, 1, scale,
                                                      D=64, CAUSAL=True)

Invariant (tests/test_configs.py): every configuration here is one the benchmark times on
every run (its ``CONFIGS`` / ``FEW_CONFIGS``), so a new measurement that moves the winner
shows up in the benchmark's table.
"""
from .runtime.autotune import Config

#: 128 x 256 tiles split over two consumer groups (64 x 256 each): the GEMM's main tile.
_GEMM_TILE = dict(BM=128, BN=256)


#: float32 operands (tf32 dots): BK = 32 is a 128-byte row. 4 slots won with a
#: column-major b (read in place; 0.91x cuBLAS tf32 at 4096^3), 3 with a row-major b (its
#: per-group operand buffers leave no room for 4). H100, 2026-12-08 00:15 / 00:31.
_TF32 = dict(BK=32)


def matmul(M, N, K, dtype="float16"):
    """``examples.matmul`` (one program per output tile). Few output tiles (fewer than
    the 132 SMs of 128 x 256) take 128 x 128 tiles, BK=128, 3 slots; otherwise BK=64
    with 4 slots and BK=128 with 2 (the benchmark's persistent configs beat both).
    ``dtype`` "float32" (tf32 dots): 128 x 256 tiles, BK=32, 4 or 3 slots."""
    if dtype == "float32":
        return [Config(dict(_GEMM_TILE, **_TF32), num_buffers_warp_spec=nb) for nb in (4, 3)]
    if -(-M // 128) * -(-N // 256) < 132:
        return [Config(dict(BM=128, BN=128, BK=128), num_buffers_warp_spec=3),
                Config(dict(BM=128, BN=128, BK=64), num_buffers_warp_spec=4)]
    return [Config(dict(_GEMM_TILE, BK=64), num_buffers_warp_spec=4),
            Config(dict(_GEMM_TILE, BK=128), num_buffers_warp_spec=2)]


def matmul_persistent(M, N, K, dtype="float16"):
    """``examples.matmul_persistent`` (grid: the number of SMs): BK=128 with 2 slots and
    the staged epilogue (best on 11 of the 12 large-shape rows), BK=64 with 4 slots and
    the dot in flight (best at 8192^2 x 1024 bf16), BK=64 with 4 slots (best at M = 512).
    ``dtype`` "float32" (tf32 dots): BK=32, 3 slots (the best config at 8192^3 with either
    b, 2026-12-08 00:15), then 4 (not yet timed)."""
    if dtype == "float32":
        return [Config(dict(_GEMM_TILE, GROUP_M=16, **_TF32), num_buffers_warp_spec=nb)
                for nb in (3, 4)]
    return [Config(dict(_GEMM_TILE, BK=128, GROUP_M=16), num_buffers_warp_spec=2,
                   tma_store=1, reg_dec_producer=56, reg_inc_consumer=224),
            Config(dict(_GEMM_TILE, BK=64, GROUP_M=16), num_buffers_warp_spec=4,
                   dot_in_flight=1),
            Config(dict(_GEMM_TILE, BK=64, GROUP_M=16), num_buffers_warp_spec=4)]


def matmul_splitk_atomic(M, N, K):
    """``examples.matmul_splitk_atomic`` (``c`` zeroed first) for M of 256 or less: at
    M = 256 256 x 128 tiles over two K slices read each tile of B into one SM (0.94x
    cuBLAS, against 0.88x for the best unsplit tile); TMA reduce-adds."""
    return [Config(dict(BM=256, BN=128, BK=64, SPLIT_K=2), num_buffers_warp_spec=4,
                   tma_store=1),
            Config(dict(BM=256, BN=128, BK=128, SPLIT_K=2), num_buffers_warp_spec=2,
                   tma_store=1)]


def attention(D, causal):
    """``examples.attention_fwd`` for head dim ``D`` (64, 128 or 256). Grid:
    ``(cdiv(seq_len, BM), B * H)``. D=64 and non-causal D=128: BM=192 over three
    consumer groups (FA3's tile; 0.85-1.07x cuDNN at D64, the best config on 7 of its 8
    rows, tied on the eighth); causal D=128: two groups with
    the PV dot in flight or lagged; D=256: 64-wide key blocks."""
    three = dict(num_consumer_groups=3)
    if D <= 64:
        return [Config(dict(BM=192, BN=128), num_buffers_warp_spec=2, **three),
                Config(dict(BM=192, BN=128), num_buffers_warp_spec=3, dot_in_flight=1,
                       **three)]
    if D <= 128 and not causal:
        return [Config(dict(BM=192, BN=128), num_buffers_warp_spec=2, **three),
                Config(dict(BM=192, BN=96), num_buffers_warp_spec=2, **three),
                Config(dict(BM=128, BN=128), num_buffers_warp_spec=2, lag_last_dot=1)]
    if D <= 128:
        return [Config(dict(BM=128, BN=128), num_buffers_warp_spec=3, dot_in_flight=1),
                Config(dict(BM=128, BN=128), num_buffers_warp_spec=2, lag_last_dot=1)]
    return [Config(dict(BM=128, BN=64), num_buffers_warp_spec=2)]


def as_meta(config):
    """A launch's keyword arguments for ``config``: its constexprs, the group count, slots
    and ``dot_in_flight``, and every other option that differs from its default."""
    chosen = config.options.as_dict()
    default = type(config.options)(num_consumer_groups=chosen["num_consumer_groups"]).as_dict()
    always = ("num_consumer_groups", "num_buffers_warp_spec", "dot_in_flight")
    return {**config.kwargs, **{k: v for k, v in chosen.items()
                                if k in always or v != default[k]}}
