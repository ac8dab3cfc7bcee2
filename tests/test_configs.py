"""numba_ws.configs: the measured starting points for ws.autotune are valid, fit their
kernels (shared memory, the register split) and are timed by the benchmarks on every
run."""
import os
import sys

import numpy as np
import pytest

import numba_ws as ws
from numba_ws import configs, examples
from numba_ws.runtime.autotune import Config

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import attention as attention_bench  # noqa: E402
import gemm as gemm_bench  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 1024), (128, 8192, 8192), (256, 8192, 8192)]
ATTENTION = [(D, causal) for D in (64, 128, 256) for causal in (False, True)]


def _gemm_tables():
    for M, N, K in SHAPES:
        yield "matmul", configs.matmul(M, N, K)
        yield "matmul_persistent", configs.matmul_persistent(M, N, K)
    yield "matmul_splitk_atomic", configs.matmul_splitk_atomic(256, 8192, 8192)


def test_every_table_is_a_short_list_of_configs():
    tables = [t for _, t in _gemm_tables()] + [configs.attention(D, c) for D, c in ATTENTION]
    for table in tables:
        assert 1 <= len(table) <= 4 and all(isinstance(c, Config) for c in table)


def test_few_tiles_choose_narrow_tiles():
    assert configs.matmul(256, 8192, 8192)[0].kwargs["BN"] == 128
    assert configs.matmul(4096, 4096, 4096)[0].kwargs["BN"] == 256


def test_benchmarks_time_every_library_config():
    gemm = [dict(m) for m in gemm_bench.CONFIGS + gemm_bench.FEW_CONFIGS]
    for name, table in _gemm_tables():
        for c in table:
            marker = {"matmul_persistent": dict(persistent=True),
                      "matmul_splitk_atomic": dict(ATOMIC=1)}.get(name, {})
            meta = dict(configs.as_meta(c), **marker)
            assert meta in gemm, (name, meta)
    for D, causal in ATTENTION:
        for c in configs.attention(D, causal):
            assert configs.as_meta(c) in attention_bench.CONFIGS[D], (D, causal, c.kwargs)


@pytest.mark.parametrize("D, causal", ATTENTION)
def test_attention_configs_fit(D, causal):
    """Each candidate partitions (shared memory, the register split of its group count)."""
    S = 512
    q = np.zeros((2 * S, D), np.float16)
    lse = np.zeros(2 * S, np.float32)
    kernel = ws.jit(examples.attention_fwd)
    for c in configs.attention(D, causal):
        kernel.partition(q, q, q, q, lse, S, 1, 0.125, D=D, CAUSAL=causal, **c.all_kwargs())


def test_tf32_tables_are_timed_by_the_tf32_benchmark():
    timed = [dict(m) for m in gemm_bench.TF32_CONFIGS]
    for c in configs.matmul(4096, 4096, 4096, "float32"):
        assert configs.as_meta(c) in timed
    for c in configs.matmul_persistent(4096, 4096, 4096, "float32"):
        assert dict(configs.as_meta(c), persistent=True) in timed


@pytest.mark.parametrize("order", ["C", "F"])
def test_tf32_configs_fit_a_column_major_b_and_the_first_a_row_major_one(order):
    """Every float32 config partitions with a column-major b; with a row-major b (its
    per-group operand buffers) 3 slots fit, 4 do not (the tuner drops that one)."""
    a, c = np.zeros((512, 256), np.float32), np.zeros((512, 512), np.float32)
    b = np.zeros((256, 512), np.float32, order=order)
    for fn, table in ((examples.matmul, configs.matmul(512, 512, 256, "float32")),
                      (examples.matmul_persistent,
                       configs.matmul_persistent(512, 512, 256, "float32"))):
        for cfg in table:
            fits = order == "F" or cfg.options.num_buffers_warp_spec == 3
            if fits:
                ws.jit(fn).partition(a, b, c, **cfg.all_kwargs())
            else:
                with pytest.raises(ws.WSResourceError, match="shared memory"):
                    ws.jit(fn).partition(a, b, c, **cfg.all_kwargs())
