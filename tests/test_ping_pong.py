"""Ping-pong consumers (``ping_pong=1``) on the CPU: the partition, the schedule simulator
(clean runs and broken variants), the errors, and the PTX assembled by ptxas."""
import numpy as np
import pytest

import numba_ws as ws
from numba_ws.errors import WSCompileError, WSUsageError
from numba_ws.passes import ping_pong
from numba_ws.verify_api import check_state, verify
from ptx_tools import assemble, resources
import kernels

PP = dict(BM=128, BN=128, BK=64, GROUP_M=8, num_consumer_groups=2, num_buffers_warp_spec=3,
          ping_pong=1)


def gemm(M, N, K, seed=0):
    rng = np.random.default_rng(seed)
    a = (rng.random((M, K)) * 2 - 1).astype(np.float16)
    b = (rng.random((K, N)) * 2 - 1).astype(np.float16)
    return a, b, np.full((M, N), np.nan, np.float16)


@pytest.mark.parametrize("M,N,K,programs,extra", [
    (384, 512, 256, 5, {}),                    # 12 tiles over 5 programs: 2 or 3 each
    (130, 200, 72, 7, {}),                     # ragged edges, more programs than tiles
    (256, 256, 64, 1, {"dot_in_flight": 1}),   # one program, K = BK
    (256, 384, 200, 2, {"BM": 64, "num_consumer_groups": 3, "num_buffers_warp_spec": 2,
                        "dot_in_flight": 1, "reg_inc_consumer": 152}),
])
def test_ping_pong_schedule_is_clean_and_exact(M, N, K, programs, extra):
    report = verify(kernels.matmul_persistent, (programs,), *gemm(M, N, K), seeds=2,
                    **{**PP, **extra})
    assert report.ok, str(report)
    assert report.comparison.startswith("bitwise") and report.outputs_match


def test_explain_and_channels():
    a, b, c = gemm(256, 256, 128)
    kern = ws.jit(kernels.matmul_persistent)
    text = kern.explain(a, b, c, **PP)
    assert "ping-pong: group i computes whole tiles of tile-loop iterations i, i+2" in text
    assert "2 rings of 3 slot(s)" in text and "empty expects 1 arrival(s)" in text
    state = kern.partition(a, b, c, **PP)
    ch, = state.ws.channels
    assert (ch.num_slots, ch.group_slots, ch.arrivals) == (6, 3, 1)
    assert [ch.slot_consumers(s) for s in range(6)] == [(1,)] * 3 + [(2,)] * 3
    assert state.ws.split == {}                   # whole tiles: nothing split


def _state():
    a, b, c = gemm(384, 512, 256)
    return ws.jit(kernels.matmul_persistent).partition(a, b, c, **PP), (a, b, c)


def _check(state, args):
    return check_state(state, kernels.matmul_persistent, (5,), args, PP, seeds=2)


def test_producer_without_per_group_counters_is_caught(monkeypatch):
    """A producer that advances the group but keeps one ring counter for all groups
    acquires group 2's slots with the wrong phase: reported, never silent."""
    real = ping_pong.advance_group
    monkeypatch.setattr(ping_pong, "advance_group",
                        lambda b, group_var, rings, groups: real(b, group_var, [], groups))
    state, args = _state()
    report = _check(state, args)
    assert not report.ok
    assert report.kinds & {"wrong_phase", "deadlock", "overwrite"}, str(report)


def test_slot_owner_mismatch_is_caught():
    state, args = _state()
    state.ws.channels[0].group_slots = 6          # the plan says group 1 owns every slot
    report = _check(state, args)
    assert "bad_slot" in report.kinds, str(report)


def test_unstrided_consumer_loop_is_caught(monkeypatch):
    """If group 2 ran every tile (its range not dealt out), it would wait for fills the
    producer never makes: a deadlock the simulator names."""
    monkeypatch.setattr(ping_pong, "stride_range", lambda new, b, index, groups: None)
    state, args = _state()
    report = _check(state, args)
    assert "deadlock" in report.kinds, str(report)


def test_errors():
    a, b, c = gemm(256, 256, 128)
    with pytest.raises(WSUsageError, match="ping_pong.*num_consumer_groups"):
        ws.jit(kernels.matmul_persistent).partition(a, b, c, **{**PP, "num_consumer_groups": 1})
    meta = {k: v for k, v in PP.items() if k != "GROUP_M"}
    with pytest.raises(WSCompileError, match="'acc' is carried from one iteration"):
        ws.jit(kernels.matmul).partition(a, b, c, **meta)   # the K loop is no tile loop


@pytest.mark.parametrize("in_flight", [0, 1])
def test_ping_pong_ptx_assembles_without_spills(tmp_path, in_flight):
    z = lambda *s: np.zeros(s, np.float16)  # noqa: E731
    ptx = ws.jit(kernels.matmul_persistent).inspect_ptx(
        z(512, 256), z(256, 512), z(512, 512), **{**PP, "dot_in_flight": in_flight})
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in ptx
    assert "setmaxnreg.inc.sync.aligned.u32 232" in ptx
    log = assemble(ptx, tmp_path)
    regs, spills, stack = resources(log)
    assert spills == [0, 0] and stack == 0
    assert "C7514" not in log, log
