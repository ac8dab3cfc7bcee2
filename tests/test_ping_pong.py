"""Ping-pong consumers (``ping_pong=1``) on the CPU: the partition, the schedule simulator
(clean runs and broken variants), the errors, and the PTX assembled by ptxas."""
import operator

import numpy as np
import pytest

import numba_ws as ws
from numba.cuda.core import ir
from numba_ws.interpreter.ir_exec import stage_calls
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
    assert "(taking turns, ping-pong); 3 slot(s)" in text
    assert "empty expects 1 arrival(s)" in text
    state = kern.partition(a, b, c, **PP)
    ch, = state.ws.channels
    assert (ch.num_slots, ch.arrivals, ch.ping_pong) == (3, 1, True)
    assert state.ws.split == {}                   # whole tiles: nothing split
    assert state.ws.turn_offset > 0


def _state():
    a, b, c = gemm(384, 512, 256)
    return ws.jit(kernels.matmul_persistent).partition(a, b, c, **PP), (a, b, c)


def _check(state, args):
    return check_state(state, kernels.matmul_persistent, (5,), args, PP, seeds=2)


def _turn_calls(state, name):
    return [(lab, i, st) for lab, i, st, _ in stage_calls(state.func_ir, name)]


def test_dropped_turn_wait_is_caught():
    """Without its turn wait, group 2 starts at ring 0 on group 1's fills."""
    state, args = _state()
    lab, i, wait = _turn_calls(state, "ws_turn_wait")[1]
    block = state.func_ir.blocks[lab]
    ring = wait.target                                     # ring = 0 instead of the token
    block.body[i] = ir.Assign(ir.Const(0, wait.loc), ring, wait.loc)
    report = _check(state, args)
    assert not report.ok and not report.outputs_match, str(report)


def test_dropped_turn_pass_deadlocks():
    state, args = _state()
    lab, i, _ = _turn_calls(state, "ws_turn_pass")[0]      # group 1 never hands over
    del state.func_ir.blocks[lab].body[i]
    report = _check(state, args)
    assert "deadlock" in report.kinds, str(report)
    assert "turn barrier of task 2" in str(report)


def test_flipped_turn_parity_is_caught():
    state, args = _state()
    lab, i, wait = _turn_calls(state, "ws_turn_wait")[1]
    block = state.func_ir.blocks[lab]
    flipped = ir.Var(wait.target.scope, "$flipped_turn", wait.loc)
    one = ir.Var(wait.target.scope, "$one_turn", wait.loc)
    block.body[i:i] = [ir.Assign(ir.Const(1, wait.loc), one, wait.loc),
                       ir.Assign(ir.Expr.binop(operator.xor, wait.value.args[1], one, wait.loc),
                                 flipped, wait.loc)]
    wait.value.args[1] = flipped
    report = _check(state, args)
    assert "wrong_phase" in report.kinds, str(report)


def test_unstrided_consumer_loop_is_caught(monkeypatch):
    """If group 2 ran every tile (its range not dealt out), it would store tile 0 with the
    fills of tile 1: the outputs differ from the interpreter's."""
    monkeypatch.setattr(ping_pong, "stride_range", lambda new, b, index, groups: None)
    state, args = _state()
    report = _check(state, args)
    assert not report.ok and not report.outputs_match, str(report)


def test_errors():
    a, b, c = gemm(256, 256, 128)
    with pytest.raises(WSUsageError, match="ping_pong.*num_consumer_groups"):
        ws.jit(kernels.matmul_persistent).partition(a, b, c, **{**PP, "num_consumer_groups": 1})
    meta = {k: v for k, v in PP.items() if k != "GROUP_M"}
    with pytest.raises(WSCompileError, match="needs the loads in a loop of their own"):
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


def test_fused_mode_ignores_ping_pong():
    """NUMBA_WS_DISABLE (one warp group plays every task) turns ping-pong off too."""
    from numba_ws import knobs
    with knobs.scope(NUMBA_WS_DISABLE=True):
        report = verify(kernels.matmul_persistent, (3,), *gemm(256, 256, 128), seeds=1, **PP)
    assert report.ok, str(report)
    assert "ping_pong=0" in str(report) and "num_consumer_groups=1" in str(report)
