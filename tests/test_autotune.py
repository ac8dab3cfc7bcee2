"""ws.autotune / ws.Config on the CPU: pruning, interpreter mode, fake timers, caches."""
import numpy as np
import pytest

import kernels
import numba_ws as ws
from numba_ws import knobs
from numba_ws.errors import WSUsageError
from numba_ws.runtime.autotune import Autotuner, median_time
from numba_ws.runtime.options import Options

GOOD = ws.Config({"BM": 128, "BN": 128, "BK": 64})
GOOD_N64 = ws.Config({"BM": 128, "BN": 64, "BK": 64}, num_buffers_warp_spec=2)
REGS = ws.Config({"BM": 128, "BN": 128, "BK": 64}, reg_inc_consumer=256)
SMEM = ws.Config({"BM": 128, "BN": 256, "BK": 64}, num_buffers_warp_spec=6)


@pytest.fixture(autouse=True)
def home(tmp_path):
    with knobs.scope(NUMBA_WS_HOME=str(tmp_path), NUMBA_WS_ALWAYS_COMPILE=None,
                     NUMBA_WS_INTERPRET=None, NUMBA_WS_PRINT_AUTOTUNING=None):
        yield tmp_path


def grid(meta):
    return (ws.cdiv(M, meta["BM"]) * ws.cdiv(N, meta["BN"]),)


M, N, K = 128, 128, 128


def arrays(m=M, n=N, k=K, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    return a, b, np.full((m, n), np.nan, np.float16)


def check_gemm(a, b, c):
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2e-2, atol=5e-2)


class FakeBench:
    """A do_bench that returns the next of ``times`` and counts its calls."""

    def __init__(self, *times):
        self.times, self.calls = list(times), 0

    def __call__(self, fn):
        self.calls += 1
        return self.times.pop(0)


def tuner(configs, do_bench=None, **kw):
    return ws.autotune(configs=configs, key=["a", "b"], do_bench=do_bench, **kw)(kernels.matmul)


def test_config_repr_equality_hash():
    c = ws.Config({"BM": 128, "BN": 256, "BK": 64}, num_buffers_warp_spec=4)
    assert repr(c) == ("Config({'BM': 128, 'BN': 256, 'BK': 64}, num_consumer_groups=2, "
                       "num_buffers_warp_spec=4, reg_dec_producer=40, reg_inc_consumer=232, "
                       "dot_in_flight=0, ping_pong=0, dot_turns=0, shared_consumer_body=1, "
                       "nvvm_opt=3, tma_store=3, lag_last_dot=0, shared_operand_buffer=0)")
    assert str(c).startswith("BM=128 BN=256 BK=64 num_consumer_groups=2")
    assert c == ws.Config({"BK": 64, "BN": 256, "BM": 128}, num_buffers_warp_spec=4)
    assert c != ws.Config({"BM": 128, "BN": 256, "BK": 64})
    assert len({c, ws.Config({"BK": 64, "BN": 256, "BM": 128}, num_buffers_warp_spec=4)}) == 1
    assert c.kwargs == {"BM": 128, "BN": 256, "BK": 64}
    assert c.options == Options(num_buffers_warp_spec=4)
    assert c.all_kwargs() == {"BM": 128, "BN": 256, "BK": 64, "num_consumer_groups": 2,
                              "num_buffers_warp_spec": 4, "reg_dec_producer": 40,
                              "reg_inc_consumer": 232, "dot_in_flight": 0, "ping_pong": 0,
                              "dot_turns": 0, "shared_consumer_body": 1, "nvvm_opt": 3,
                              "tma_store": 3, "lag_last_dot": 0, "shared_operand_buffer": 0}
    with pytest.raises(WSUsageError, match="launch options"):
        ws.Config({"BM": 128, "num_consumer_groups": 1})
    with pytest.raises(WSUsageError, match="reg_inc_consumer"):
        ws.Config({"BM": 128}, reg_inc_consumer=250)


def test_decorator_forms_and_argument_checks():
    assert isinstance(tuner([GOOD]), Autotuner)
    assert isinstance(ws.autotune([GOOD], key=["a"])(ws.jit(kernels.matmul)), Autotuner)
    with pytest.raises(WSUsageError, match=r"\['M'\] are not parameters"):
        ws.autotune([GOOD], key=["M"])(kernels.matmul)
    with pytest.raises(WSUsageError, match=r"\['BX'\] are not parameters"):
        ws.autotune([ws.Config({"BX": 1})], key=["a"])(kernels.matmul)
    with pytest.raises(WSUsageError, match="non-empty list"):
        ws.autotune([], key=["a"])(kernels.matmul)
    with pytest.raises(WSUsageError, match="early_config_prune"):
        tuner([GOOD], prune_configs_by={"bogus": 1})
    with pytest.raises(WSUsageError, match=r"matmul\[grid\]"):
        tuner([GOOD])(*arrays())


def test_meta_repeating_tuned_keys_is_an_error():
    t = tuner([GOOD])
    with pytest.raises(WSUsageError, match=r"\['BM', 'num_consumer_groups'\] are set by"):
        t[grid](*arrays(), BM=128, num_consumer_groups=1)


def test_key_uses_shapes_dtypes_strides_and_untuned_meta():
    t = tuner([GOOD])
    a, b, c = arrays()
    k = t.key_of((a, b, c), {})
    assert k == t.key_of((a.copy(), b.copy(), c), {"stream": 7})
    assert k[0][0] == ("a", ("array", (128, 128), "float16", (256, 2)))
    assert k != t.key_of((a.astype(np.float32), b, c), {})
    assert k != t.key_of((np.asfortranarray(a), b, c), {})
    assert k != t.key_of(arrays(m=256)[:2] + (c,), {})
    assert k == t.key_of((a, b, arrays(n=256)[2]), {})            # c is not in key
    assert t.key_of((a, b), {"c": c}) != k                         # untuned meta is keyed


def test_prunes_by_registers_and_shared_memory_with_reasons(capsys):
    bench = FakeBench(1.0)
    t = tuner([REGS, SMEM, GOOD], do_bench=bench)
    a, b, c = arrays()
    t[grid](a, b, c)
    assert t.best_config == GOOD and bench.calls == 1
    assert set(t.pruned) == {REGS, SMEM}
    assert "register budget" in t.pruned[REGS] and "70656 registers" in t.pruned[REGS]
    assert "shared memory" in t.pruned[SMEM] and "6 x 49152 B" in t.pruned[SMEM]
    assert t.configs_timings == {GOOD: 1.0}
    err = capsys.readouterr().err
    assert f"autotuning matmul [1/3] {REGS} pruned: [ws_registers] register budget" in err
    assert f"autotuning matmul [2/3] {SMEM} pruned: [ws_verify] shared memory" in err
    assert f"autotuning matmul [3/3] {GOOD} 1.000 ms" in err
    check_gemm(a, b, c)


def test_all_pruned_lists_every_reason():
    t = tuner([REGS, SMEM], do_bench=FakeBench())
    with pytest.raises(WSUsageError) as info:
        t[grid](*arrays())
    msg = str(info.value)
    assert "no config fits" in msg
    assert f"{REGS}: [ws_registers] register budget" in msg
    assert f"{SMEM}: [ws_verify] shared memory" in msg


def test_interpreter_mode_uses_first_valid_config(capsys):
    t = tuner([REGS, GOOD, GOOD_N64])
    a, b, c = arrays(m=256, n=192, k=192)
    g = lambda meta: (ws.cdiv(256, meta["BM"]) * ws.cdiv(192, meta["BN"]),)  # noqa: E731
    t[g](a, b, c)
    assert t.best_config == GOOD
    assert set(t.pruned) == {REGS} and t.configs_timings == {}   # GOOD_N64 never checked
    assert "interpreter mode, not timed: using the first config that fits" in \
        capsys.readouterr().err
    check_gemm(a, b, c)


def test_fastest_config_wins_and_is_cached_in_memory():
    bench = FakeBench(3.0, 1.0, 2.0)
    configs = [GOOD, GOOD_N64, ws.Config({"BM": 128, "BN": 128, "BK": 64}, 1, 2)]
    t = tuner(configs, do_bench=bench)
    a, b, c = arrays()
    t[grid](a, b, c)
    assert t.best_config == GOOD_N64 and bench.calls == 3
    assert t.configs_timings == dict(zip(configs, [3.0, 1.0, 2.0]))
    check_gemm(a, b, c)
    c2 = np.zeros_like(c)
    t[grid](a.copy(), b.copy(), c2)                                 # same key: no timing
    assert bench.calls == 3
    check_gemm(a, b, c2)
    bench.times = [5.0, 4.0, 0.5]
    a3, b3, c3 = arrays(k=64)                                       # new key: tuned again
    t[grid](a3, b3, c3)
    assert bench.calls == 6 and t.best_config == configs[2]
    check_gemm(a3, b3, c3)


def test_winner_is_cached_on_disk_for_a_fresh_tuner(home):
    first = tuner([GOOD, GOOD_N64, REGS], do_bench=FakeBench(2.0, 1.0))
    first[grid](*arrays())
    assert first.best_config == GOOD_N64
    assert list(home.joinpath("cache").rglob("*.bin"))

    def no_timing(fn):
        raise AssertionError("the cached winner should have been used")
    second = tuner([GOOD, GOOD_N64, REGS], do_bench=no_timing)
    a, b, c = arrays()
    second[grid](a, b, c)
    assert second.best_config == GOOD_N64
    assert second.configs_timings == {GOOD: 2.0, GOOD_N64: 1.0} and REGS in second.pruned
    check_gemm(a, b, c)
    other = tuner([GOOD, GOOD_N64], do_bench=FakeBench(1.0, 2.0))   # other configs: miss
    other[grid](*arrays())
    assert other.best_config == GOOD
    with knobs.scope(NUMBA_WS_ALWAYS_COMPILE=True):                  # cache bypassed
        again = tuner([GOOD, GOOD_N64, REGS], do_bench=FakeBench(1.0, 2.0))
        again[grid](*arrays())
        assert again.best_config == GOOD


def test_print_autotuning_knob(capsys):
    with knobs.scope(NUMBA_WS_PRINT_AUTOTUNING=True):
        t = tuner([GOOD, GOOD_N64], do_bench=FakeBench(0.25, 0.5))
        t[grid](*arrays())
        out = capsys.readouterr().out
        assert f"autotuning matmul: best config {GOOD} (0.250 ms); tuning took" in out
        tuner([GOOD, GOOD_N64], do_bench=FakeBench())[grid](*arrays())
        assert f"cached best config {GOOD} (on disk)" in capsys.readouterr().out
    tuner([GOOD], do_bench=FakeBench(1.0))[grid](*arrays(k=64))
    assert capsys.readouterr().out == ""


def test_prune_configs_by_hooks():
    seen = {}

    def early(configs, named):
        seen["named"] = sorted(named)
        return [c for c in configs if c.kwargs["BN"] == 128]
    bench = FakeBench(1.0, 2.0)
    model = lambda **kw: kw["num_buffers_warp_spec"]  # noqa: E731
    slow = ws.Config({"BM": 128, "BN": 128, "BK": 64}, num_buffers_warp_spec=4)
    t = tuner([slow, GOOD_N64, GOOD], do_bench=bench,
              prune_configs_by={"early_config_prune": early, "perf_model": model, "top_k": 1})
    t[grid](*arrays())
    assert seen["named"] == ["a", "b", "c"]
    assert t.best_config == GOOD and bench.calls == 1
    with pytest.raises(WSUsageError, match="left no config"):
        tuner([GOOD], prune_configs_by={"early_config_prune": lambda c, n: []})[grid](*arrays())


def test_inspection_uses_best_or_first_config():
    t = tuner([GOOD_N64, GOOD], do_bench=FakeBench(2.0, 1.0))
    a, b, c = arrays()
    assert t.partition(a, b, c).ws.options == GOOD_N64.options
    t[grid](a, b, c)
    assert t.partition(a, b, c).ws.options == GOOD.options
    assert "async_task" in t.explain(a, b, c)


def test_median_time_with_fake_events():
    clock = iter(range(100))

    class Event:
        def record(self):
            self.t = next(clock)

        def synchronize(self):
            pass

    class Events:
        new = Event
        record = staticmethod(lambda e: e.record())
        elapsed = staticmethod(lambda s, e: (e.t - s.t) * (1 + s.t % 3))

    calls = []
    ms = median_time(lambda: calls.append(1), warmup=4, rep=5, events=Events())
    assert len(calls) == 9
    assert ms == 2                                 # elapsed values 1, 3, 2, 1, 3 -> median 2
