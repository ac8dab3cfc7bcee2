"""ws.autotune on the GPU: every config that fits is compiled ahead (ptxas in the
background) and timed with CUDA events; the winner's output matches float64 on a ragged
shape (NaN-poisoned output), and a second launch with the same key is not tuned again."""
import numpy as np
import pytest

import numba_ws as ws
from gemm_checks import check_gemm, gemm_inputs
from kernels import matmul
from numba_ws import knobs
from numba_ws.runtime import ptxas

cp = pytest.importorskip("cupy")

CONFIGS = [ws.Config({"BM": 128, "BN": 128, "BK": 64}, num_buffers_warp_spec=4),
           ws.Config({"BM": 128, "BN": 256, "BK": 64}, num_buffers_warp_spec=3),
           ws.Config({"BM": 128, "BN": 128, "BK": 64}, num_consumer_groups=1,
                     num_buffers_warp_spec=3),
           ws.Config({"BM": 128, "BN": 256, "BK": 64}, num_buffers_warp_spec=6)]  # too big


def grid(M, N):
    return lambda m: (ws.cdiv(M, m["BM"]) * ws.cdiv(N, m["BN"]),)


def inputs(M, N, K, dtype):
    """gemm_inputs with the output in the input dtype (bf16 in, bf16 out via torch)."""
    a, b, c, ref = gemm_inputs(M, N, K, dtype)
    if dtype == "bfloat16":
        import torch
        c = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
    return a, b, c, ref


def check(c, ref):
    if not isinstance(c, cp.ndarray):                  # torch bf16: compare in float64
        c = cp.asarray(c.double())
    check_gemm(c, ref)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_autotuned_gemm_matches_float64_and_is_tuned_once(tmp_path, dtype):
    M, N, K = 1000, 776, 520
    with knobs.scope(NUMBA_WS_HOME=str(tmp_path), NUMBA_WS_ALWAYS_COMPILE="1"):
        tuner = ws.autotune(CONFIGS, key=["a", "b"], warmup=2, rep=5)(matmul)
        a, b, c, ref = inputs(M, N, K, dtype)
        tuner[grid(M, N)](a, b, c)
        cp.cuda.runtime.deviceSynchronize()
        assert set(tuner.configs_timings) == set(CONFIGS[:3])
        assert CONFIGS[3] in tuner.pruned and "shared memory" in tuner.pruned[CONFIGS[3]]
        assert all(ms > 0 for ms in tuner.configs_timings.values())
        assert not ptxas._STARTED                 # every started ptxas run was used
        check(c, ref)
        timings = dict(tuner.configs_timings)
        a2, b2, c2, ref2 = inputs(M, N, K, dtype)          # same key: no tuning
        tuner[grid(M, N)](a2, b2, c2)
        cp.cuda.runtime.deviceSynchronize()
        assert tuner.configs_timings == timings
        check(c2, ref2)


@pytest.mark.parametrize("D, causal", [(64, True), (128, False)])
def test_autotuned_attention_from_library_configs(tmp_path, D, causal):
    """ws.autotune over numba_ws.configs.attention (three consumer groups among them) on a
    ragged grouped-query problem, bf16 in and out, against float64."""
    import case_runner
    import kernels_attention as ka
    from numba_ws import configs, examples
    seq, heads = 333, 4
    case = ka.case("bfloat16", D, seq, causal, heads=heads, kv_heads=2)
    seed = np.random.SeedSequence().entropy
    args, _ = case.make(np.random.default_rng(seed))
    launch, outs = case_runner.device_args(args)
    table = configs.attention(D, causal)
    with knobs.scope(NUMBA_WS_HOME=str(tmp_path)):
        tuner = ws.autotune(table, key=["seq_len"], warmup=2, rep=5)(examples.attention_fwd)
        tuner[lambda m: (ws.cdiv(seq, m["BM"]), heads)](*launch, D=D, CAUSAL=causal)
        case_runner.check_outputs(outs, f"autotuned attention D={D} causal={causal} (seed {seed})")
    assert set(tuner.configs_timings) == set(table)
