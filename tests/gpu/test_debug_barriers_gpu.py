"""Debug barriers on the GPU (issue 19 item 3): a schedule broken on purpose
(NUMBA_WS_DEBUG_DROP_RELEASE) under NUMBA_WS_DEBUG_BARRIERS=1 raises WSBarrierTimeout
naming the channel, slot and phase within a few seconds instead of hanging; the process
stays usable (normal launches afterwards are correct); a debug build of a correct
schedule gives correct results. The CPU side is tests/test_debug_barriers.py.

Timeouts here are 2e8 SM cycles (about 0.1 s at the H200's clock) so that each broken
launch ends quickly; the default is 4e9 (about 2 s).
"""
import time

import pytest

import numba_ws as ws
from numba_ws import knobs
from numba_ws.errors import WSScheduleError
from numba_ws.runtime.launcher import WSBarrierTimeout
from gemm_checks import check_gemm, gemm_inputs
from kernels import attention_fwd, matmul, matmul_persistent

cp = pytest.importorskip("cupy")
gemm = ws.jit(matmul)
persistent = ws.jit(matmul_persistent)
attention = ws.jit(attention_fwd)
TIMEOUT = 200_000_000
DEBUG = dict(NUMBA_WS_DEBUG_BARRIERS=True, NUMBA_WS_DEBUG_TIMEOUT_CYCLES=TIMEOUT)
#: Each broken launch must end within this (the timeout plus the waves of CTAs that
#: start after it and give up at their first blocked wait).
PROMPT_S = 5.0


def _gemm(a, b, c, **meta):
    M, N = c.shape
    gemm[(ws.cdiv(M, meta["BM"]) * ws.cdiv(N, meta["BN"]),)](a, b, c, **meta)
    cp.cuda.runtime.deviceSynchronize()


def _timed_failure(launch):
    """Run ``launch`` twice under the knobs in force; both raise WSBarrierTimeout (the
    first compiles, the second reuses the kernel: its time is the hang turned error)."""
    with pytest.raises(WSBarrierTimeout):
        launch()
    start = time.perf_counter()
    with pytest.raises(WSBarrierTimeout) as info:
        launch()
    return info.value, time.perf_counter() - start


#: The two waits a dropped release of slot 0 blocks (one CTA, 2 slots): the producer's
#: acquire of slot 0 for its second pass (phase 1, parity 0 of the empty barrier, warp
#: group 0's thread 0) and the consumers' wait for that pass's data (phase 1, parity 1
#: of the full barrier). Both start within a k-step of each other and time out about
#: together; the report names the first to be recorded (either, 2026-12-03 on the H200:
#: the consumer's).
BLOCKED = {"producer acquire": (0, 0, 1, 0, {0}),
           "consumer wait": (0, 0, 1, 1, {1, 2}),
           "cp.async producer acquire": (0, 0, 1, 0, {0})}


def _check_blocked(err, waits):
    assert isinstance(err, WSScheduleError)
    assert err.kernel == "matmul" and err.wait in waits, str(err)
    channel, slot, phase, parity, groups = BLOCKED[err.wait]
    assert (err.channel, err.slot, err.phase, err.parity) == (channel, slot, phase, parity), \
        str(err)
    assert err.warp_group in groups and err.cta == (0, 0, 0), str(err)
    assert err.cycles >= TIMEOUT and err.timeouts >= 1


def test_dropped_release_raises_instead_of_hanging():
    """One CTA, a 2-slot ring, 8 k-steps: after both slots are filled, slot 0's second
    pass never starts (:data:`BLOCKED`)."""
    a, b, c, ref = gemm_inputs(128, 128, 512, "float16")
    meta = dict(BM=128, BN=128, BK=64, num_buffers_warp_spec=2)
    with knobs.scope(**DEBUG, NUMBA_WS_DEBUG_DROP_RELEASE="0"):
        err, seconds = _timed_failure(lambda: _gemm(a, b, c, **meta))
    _check_blocked(err, ("producer acquire", "consumer wait"))
    assert seconds < PROMPT_S, f"the broken launch took {seconds:.1f} s"
    for part in ("kernel matmul", "channel 0: x, y", "slot 0, phase 1",
                 "NUMBA_WS_DEBUG_DROP_RELEASE dropped channel 0"):
        assert part in str(err), (part, str(err))
    # the process is still usable: a normal launch of the same kernel is correct
    c.fill(cp.nan)
    _gemm(a, b, c, **meta)
    check_gemm(c, ref)


def test_many_ctas_all_give_up():
    """1024 CTAs (several waves on 132 SMs): the first timeout ends the launch promptly,
    later CTAs leave at their first blocked wait; then normal launches are correct."""
    a, b, c, ref = gemm_inputs(4096, 4096, 512, "float16")
    meta = dict(BM=128, BN=128, BK=64, num_buffers_warp_spec=3)
    with knobs.scope(**DEBUG, NUMBA_WS_DEBUG_DROP_RELEASE="a"):     # by loaded array
        err, seconds = _timed_failure(lambda: _gemm(a, b, c, **meta))
    assert err.channel == 0 and err.phase == 1 and err.wait in ("producer acquire",
                                                                  "consumer wait"), str(err)
    assert seconds < PROMPT_S, f"the broken launch took {seconds:.1f} s"
    c.fill(cp.nan)
    _gemm(a, b, c, **meta)
    check_gemm(c, ref)


def test_dropped_release_on_the_sm80_path():
    """cp.async producer (every producer thread waits: test_wait probes)."""
    a, b, c, ref = gemm_inputs(128, 128, 512, "float16")
    meta = dict(BM=128, BN=128, BK=64, num_buffers_warp_spec=2)
    with knobs.scope(**DEBUG, NUMBA_WS_DEBUG_DROP_RELEASE="0", NUMBA_WS_CC="8.0"):
        err, seconds = _timed_failure(lambda: _gemm(a, b, c, **meta))
    _check_blocked(err, ("cp.async producer acquire", "consumer wait"))
    assert seconds < PROMPT_S
    with knobs.scope(NUMBA_WS_CC="8.0"):
        c.fill(cp.nan)
        _gemm(a, b, c, **meta)
    check_gemm(c, ref)


def test_dropped_release_in_attention_names_the_channel():
    from test_attention import run
    heads, seq, D = 2, 1024, 64
    q = cp.zeros((heads * seq, D), cp.float16)
    o = cp.zeros_like(q)

    def launch():
        attention[(seq // 128, heads)](q, q, q, o, seq, 0.125, BM=128, BN=64, D=D)
        cp.cuda.runtime.deviceSynchronize()

    with knobs.scope(**DEBUG, NUMBA_WS_DEBUG_DROP_RELEASE="k_tile"):
        err, seconds = _timed_failure(launch)
    assert err.kernel == "attention_fwd" and err.channel == 1 and err.phase == 1, str(err)
    assert "channel 1: k_tile, v_tile" in str(err) and seconds < PROMPT_S
    run(heads, seq, D, 0.125)                    # normal attention afterwards: correct


@pytest.mark.parametrize("case", ["tma_g2", "tma_g1_in_flight", "persistent", "ping_pong",
                                  "cp_async", "ld_global", "sm80"])
def test_debug_build_of_a_correct_schedule_is_correct(case):
    """Bounded waits change nothing when nothing hangs (default timeout)."""
    M, N, K = {"cp_async": (130, 300, 200), "ld_global": (130, 301, 200)}.get(
        case, (1000, 1000, 1000))
    a, b, c, ref = gemm_inputs(M, N, K, "float16")
    with knobs.scope(NUMBA_WS_DEBUG_BARRIERS=True,
                     NUMBA_WS_CC="8.0" if case == "sm80" else None):
        if case in ("persistent", "ping_pong"):
            sms = cp.cuda.Device().attributes["MultiProcessorCount"]
            extra = dict(BN=128, ping_pong=1) if case == "ping_pong" else dict(BN=256)
            persistent[(sms,)](a, b, c, BM=128, BK=64, GROUP_M=8, **extra)
            cp.cuda.runtime.deviceSynchronize()
        else:
            extra = {"tma_g1_in_flight": dict(BN=128, num_consumer_groups=1, dot_in_flight=1),
                     "sm80": dict(BN=128)}.get(case, dict(BN=256))
            _gemm(a, b, c, BM=128, BK=64, **extra)
    check_gemm(c, ref)


def test_debug_attention_is_correct():
    from test_attention import run
    with knobs.scope(NUMBA_WS_DEBUG_BARRIERS=True):
        run(2, 1024, 64, 0.125)
        run(1, 512, 128, 0.1, BN=128, num_buffers_warp_spec=2)


def test_debug_and_normal_kernels_are_separate_specializations():
    """Same arguments, knob on then off: two loaded modules, only the debug one has a
    record (the launch fast path and the cache tell them apart)."""
    kernel = ws.jit(matmul)
    a, b, c, ref = gemm_inputs(256, 256, 128, "float16")
    meta = dict(BM=128, BN=128, BK=64)
    with knobs.scope(NUMBA_WS_DEBUG_BARRIERS=True):
        kernel[(4,)](a, b, c, **meta)
    c.fill(cp.nan)
    kernel[(4,)](a, b, c, **meta)
    cp.cuda.runtime.deviceSynchronize()
    check_gemm(c, ref)
    records = sorted(loaded.module.debug is not None for loaded in kernel._loaded.values())
    assert records == [False, True], records
