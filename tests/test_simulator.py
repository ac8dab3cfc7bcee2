"""The schedule simulator: clean kernels run clean, broken schedules are reported.

The broken ones start from the correct partitioned IR of the GEMM and break it on purpose
(drop a release, release before the dot completes, flip a phase, one slot fewer, wrong
arrival count, ...); each must be reported with the right kind, naming channel, slot,
phase, task and line. The two partitioner bugs the simulator found (a slot released
between ``getattr(x, 'astype')`` and the call; a dot result read before any wgmma wait)
keep their minimal kernels here as regression tests.
"""
import inspect
import operator

import numpy as np
import pytest
from numba.cuda.core import ir

import numba_ws as ws
from numba_ws import knobs
from numba_ws.errors import WSResourceError, WSScheduleError
from numba_ws.interpreter.barriers import Barrier
from numba_ws.interpreter.ir_exec import stage_calls
from numba_ws.verify_api import check_state, verify
import kernels


def f16(rng, *shape):
    return (rng.random(shape) * 2 - 1).astype(np.float16)


RNG = np.random.default_rng(1)
GEMM = (f16(RNG, 128, 512), f16(RNG, 512, 256), np.zeros((128, 256), np.float16))
GEMM_META = dict(BM=128, BN=128, BK=64)          # 8 k steps, 2 programs


def _dot_line(fn):
    lines, start = inspect.getsourcelines(fn)
    return next(start + i for i, line in enumerate(lines) if "ws.dot(" in line)


DOT_LINE = _dot_line(kernels.matmul)


def gemm_state(**cfg):
    return ws.jit(kernels.matmul).partition(*GEMM, **GEMM_META, **cfg)


def check(state, **cfg):
    return check_state(state, kernels.matmul, (2,), GEMM, {**GEMM_META, **cfg}, seeds=2)


def calls(state, name, task):
    """Stage-op calls ``name`` in the clone of ``task`` (block labels of its branch)."""
    lo = state.ws.branches[task]
    hi = min([lab for lab in state.ws.branches.values() if lab > lo], default=10**9)
    return [(lab, i, s) for lab, i, s, _ in stage_calls(state.func_ir, name) if lo <= lab < hi]


def wait_before(state, release_name, task):
    """(wait, release): the release call and the ws_dot_wait just before it in its block."""
    (label, i, rel), = calls(state, release_name, task)
    waits = [(j, s) for lab, j, s in calls(state, "ws_dot_wait", task) if lab == label and j < i]
    return waits[-1][1], rel


def move_after(state, stmt, anchor):
    """Move call ``stmt`` to just after call ``anchor`` (same block; its inputs stay put)."""
    for block in state.func_ir.blocks.values():
        if stmt in block.body and anchor in block.body:
            block.body.remove(stmt)
            block.body.insert(block.body.index(anchor) + 1, stmt)
            return
    raise AssertionError("not in one block")


def remove(state, stmt):
    for block in state.func_ir.blocks.values():
        if stmt in block.body:
            block.body.remove(stmt)


# -- the mbarrier model ---------------------------------------------------------------

def test_barrier_parity_arrivals_and_tx():
    bar = Barrier(1, "full")
    assert bar.passes(1) and not bar.passes(0)      # a fresh barrier: "previous" phase done
    bar.complete_tx(64)                             # a copy may land before expect_tx
    assert bar.completed == 0 and bar.tx == -64
    assert bar.arrive(0, tx=128) is None
    assert bar.completed == 0 and bar.partial()     # 64 bytes still outstanding
    bar.complete_tx(64)
    assert bar.completed == 1 and bar.passes(0) and bar.partial() is None
    empty = Barrier(2, "empty")
    empty.arrive(1)
    assert "twice" in empty.arrive(1)               # same task twice in one phase
    assert empty.completed == 1 and empty.history == [(1, 1)]


# -- clean kernels --------------------------------------------------------------------

@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("buffers", [1, 2, 3, 4])
@pytest.mark.parametrize("in_flight", [0, 1])
def test_matmul_clean(groups, buffers, in_flight):
    cfg = dict(num_consumer_groups=groups, num_buffers_warp_spec=buffers,
               dot_in_flight=in_flight)
    report = verify(kernels.matmul, (2,), *GEMM, seeds=2, **GEMM_META, **cfg)
    assert report.ok, str(report)
    assert report.smem_bytes > 0 and report.registers["producer"] == 40
    assert report.comparison.startswith("bitwise")


@pytest.mark.parametrize("groups,buffers", [(1, 1), (1, 3), (2, 2), (2, 4)])
def test_matmul_bias_relu_clean(groups, buffers):
    rng = np.random.default_rng(2)
    a, b, bias = f16(rng, 192, 192), f16(rng, 192, 256), f16(rng, 256)
    c = np.zeros((192, 256), np.float16)          # ragged M: the last row tile is masked
    report = verify(kernels.matmul_bias_relu, (4,), a, b, bias, c, BM=128, BN=128, BK=64,
                    num_consumer_groups=groups, num_buffers_warp_spec=buffers)
    assert report.ok, str(report)


@pytest.mark.skipif("NUMBA_WS_DISABLE" not in knobs.KNOBS, reason="no fused mode")
@pytest.mark.parametrize("buffers", [1, 3])
def test_matmul_fused_single_warp_group_clean(buffers):
    with knobs.scope(NUMBA_WS_DISABLE=True):
        report = verify(kernels.matmul, (2,), *GEMM, seeds=2, **GEMM_META,
                        num_buffers_warp_spec=buffers)
    assert report.ok, str(report)


def _attention(groups, buffers, bn):
    rng = np.random.default_rng(3)
    heads, seq, d = 2, 256, 64
    q, k, v = (f16(rng, heads * seq, d) for _ in range(3))
    o = np.zeros((heads * seq, d), np.float16)
    return verify(kernels.attention_fwd, (seq // 128, heads), q, k, v, o, seq, 0.125,
                  BM=128, BN=bn, D=d, num_consumer_groups=groups,
                  num_buffers_warp_spec=buffers, seeds=2, max_programs=2)


@pytest.mark.parametrize("groups,buffers,bn", [(1, 1, 64), (1, 3, 128), (2, 2, 64)])
def test_attention_outputs_match(groups, buffers, bn):
    report = _attention(groups, buffers, bn)
    assert report.outputs_match, str(report)
    assert report.ok, str(report)


def test_attention_clean():
    report = _attention(2, 3, 64)
    assert report.ok, str(report)


# -- broken on purpose ----------------------------------------------------------------

# one clone per consumer group, so a mutation below breaks one task's code only (the
# shared consumer body, the default, is mutated for both groups at once)
CLASSIC = dict(num_consumer_groups=2, num_buffers_warp_spec=2, dot_in_flight=0,
               shared_consumer_body=0)
DEFERRED = dict(num_consumer_groups=2, num_buffers_warp_spec=2, dot_in_flight=1,
                shared_consumer_body=0)


def _assert_named(finding, kind):
    assert finding.kind == kind
    text = str(finding)
    assert "channel 0" in text and "task" in text and f"{finding.file}:" in text, text
    assert finding.file.endswith(".py")
    assert finding.line is not None and finding.task is not None


def first(report, kind):
    found = [f for f in report.findings if f.kind == kind]
    assert found, f"no {kind} finding:\n{report}"
    _assert_named(found[0], kind)
    return found[0]


def test_dropped_release_deadlocks():
    state = gemm_state(**CLASSIC)
    (_, _, rel), = calls(state, "ws_consumer_release", 1)
    remove(state, rel)
    report = check(state, **CLASSIC)
    dead = first(report, "deadlock")
    assert dead.slot is not None and dead.phase is not None
    assert "no arrival yet from tasks [1]" in dead.message
    assert "arrival_count" in report.kinds          # the empty phase stays at 1 of 2
    assert not report.outputs_match


def test_dropped_deferred_release_deadlocks():
    state = gemm_state(**DEFERRED)
    loop_release = calls(state, "ws_consumer_release_prev", 2)[0][2]
    remove(state, loop_release)
    first(check(state, **DEFERRED), "deadlock")


def test_release_before_dot_wait():
    state = gemm_state(**CLASSIC)
    for task in (1, 2):
        wait, rel = wait_before(state, "ws_consumer_release", task)
        move_after(state, wait, rel)
    report = check(state, **CLASSIC)
    assert f"line {DOT_LINE}" in first(report, "dot_in_flight").message


def test_deferred_release_before_dot_wait_1():
    state = gemm_state(**DEFERRED)
    (_, _, wait) = [c for c in calls(state, "ws_dot_wait", 1)          # wait(1) in the loop
                    if state.func_ir.get_definition(c[2].value.args[0]).value == 1][0]
    (_, _, rel), _ = calls(state, "ws_consumer_release_prev", 1)
    assert state.func_ir.get_definition(wait.value.args[0]).value == 1
    move_after(state, wait, rel)
    first(check(state, **DEFERRED), "dot_in_flight")


def test_dropped_dot_wait_reads_accumulator_in_flight():
    state = gemm_state(**CLASSIC)
    for _, _, wait in calls(state, "ws_dot_wait", 1):   # the loop's and the epilogue's
        remove(state, wait)
    report = check(state, **CLASSIC)
    first(report, "dot_in_flight")
    assert any(f.kind == "acc_in_flight" and f.task == 1 for f in report.findings)


@pytest.mark.parametrize("cfg", [CLASSIC, DEFERRED], ids=["classic", "deferred"])
def test_flipped_consumer_phase(cfg):
    state = gemm_state(**cfg)
    label, i, wait = calls(state, "ws_consumer_wait", 1)[0]
    phase = wait.value.args[2]
    one, flipped = (ir.Var(phase.scope, n, wait.loc) for n in ("$one_t", "$flipped_t"))
    block = state.func_ir.blocks[label]
    block.body[i:i] = [ir.Assign(ir.Const(1, wait.loc), one, wait.loc),
                       ir.Assign(ir.Expr.binop(operator.sub, one, phase, wait.loc), flipped,
                                 wait.loc)]
    wait.value.args[2] = flipped                    # ws_consumer_wait(ch, slot, 1 - phase)
    report = check(state, **cfg)
    wrong = first(report, "wrong_phase")
    assert wrong.task == 1 and wrong.phase == 1 and "pass 0" in wrong.message
    assert "read_not_full" in report.kinds


def test_flipped_producer_phase():
    state = gemm_state(**CLASSIC)
    (label, i, acq), = calls(state, "ws_producer_acquire", 0)
    phase = acq.value.args[2]
    one, flipped = (ir.Var(phase.scope, n, acq.loc) for n in ("$one_p", "$flipped_p"))
    state.func_ir.blocks[label].body[i:i] = [
        ir.Assign(ir.Const(1, acq.loc), one, acq.loc),
        ir.Assign(ir.Expr.binop(operator.sub, one, phase, acq.loc), flipped, acq.loc)]
    acq.value.args[2] = flipped
    report = check(state, **CLASSIC)
    assert first(report, "wrong_phase").task == 0
    assert "deadlock" in report.kinds               # a fresh empty barrier never passes 0


def test_one_slot_fewer_in_the_plan():
    state = gemm_state(**CLASSIC)
    state.ws.channels[0].num_slots -= 1             # the IR still computes ring % 2
    bad = first(check(state, **CLASSIC), "bad_slot")
    assert bad.slot == 1 and "has 1 slot(s)" in bad.message


def test_producer_ring_modulus_one_less():
    state = gemm_state(**CLASSIC)
    (label, _, acq), = calls(state, "ws_producer_acquire", 0)
    block = state.func_ir.blocks[label]
    defs = {s.target.name: s for s in block.body if isinstance(s, ir.Assign)}
    modulus = defs[defs[acq.value.args[1].name].value.rhs.name]
    modulus.value = ir.Const(modulus.value.value - 1, modulus.loc)   # slot = ring % 1
    report = check(state, **CLASSIC)
    assert report.kinds & {"deadlock", "wrong_phase", "overwrite"}, str(report)
    assert not report.outputs_match


@pytest.mark.parametrize("arrivals,kinds", [(3, {"arrival_count", "deadlock"}),
                                            (1, {"arrival_count", "overwrite"})])
def test_wrong_arrival_count(arrivals, kinds):
    state = gemm_state(**CLASSIC)
    state.ws.channels[0].arrivals = arrivals
    report = check(state, **CLASSIC)
    assert kinds <= report.kinds, str(report)
    counted = first(report, "arrival_count")
    assert counted.slot is not None and "empty barrier" in counted.message


def test_dropped_commit_and_wait():
    state = gemm_state(**CLASSIC)
    (_, _, commit), = calls(state, "ws_producer_commit", 0)
    remove(state, commit)
    report = check(state, **CLASSIC)
    assert {"deadlock", "arrival_count"} <= report.kinds   # tx landed, no arrival
    state = gemm_state(**CLASSIC)
    (_, _, wait), = calls(state, "ws_consumer_wait", 2)
    remove(state, wait)
    assert first(check(state, **CLASSIC), "read_not_full").task == 2


# -- the API --------------------------------------------------------------------------

def test_raise_on_finding_and_report_text():
    state = gemm_state(**CLASSIC)
    state.ws.channels[0].arrivals = 3
    with pytest.raises(WSScheduleError) as err:
        check_state(state, kernels.matmul, (2,), GEMM, {**GEMM_META, **CLASSIC},
                    seeds=1, raise_on_finding=True)
    text = str(err.value)
    for part in ("PROBLEMS", "shared memory:", "registers:", "[deadlock]", "channel 0"):
        assert part in text


def test_static_checks_propagate():
    a, b = GEMM[0], f16(RNG, 512, 512)
    c = np.zeros((128, 512), np.float16)
    with pytest.raises(WSResourceError, match="shared memory"):
        verify(kernels.matmul, (2,), a, b, c, BM=128, BN=256, BK=64, num_buffers_warp_spec=8)
    with pytest.raises(WSResourceError, match="register budget"):
        verify(kernels.matmul, (2,), *GEMM, **GEMM_META, reg_dec_producer=248)


def test_program_cap_grid_callable_and_tolerance_mode():
    a = GEMM[0]
    b, c = f16(RNG, 512, 512), np.zeros((128, 512), np.float16)
    report = verify(ws.jit(kernels.matmul), lambda m: (512 // m["BN"],), a, b, c,
                    max_programs=2, seeds=[5], exact=False, **GEMM_META)
    assert report.ok, str(report)
    assert report.programs == [(0,), (3,)] and report.seeds == (5,)
    assert "ulps" in report.comparison


# -- known partitioner bugs (minimal kernels) -----------------------------------------

def method_astype(a, out, BM: ws.constexpr, BK: ws.constexpr):
    acc = ws.zeros((BM, BK), ws.float32)
    for k in range(ws.cdiv(a.shape[1], BK)):
        x = ws.load(a, (0, k * BK), (BM, BK))
        acc = acc + x.astype(ws.float32)
    ws.store(out, (0, 0), acc.astype(ws.float16))


def dot_result_before_wait(a, b, c, out, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(a.shape[1], BK)):
        x = ws.load(a, (0, k * BK), (BM, BK))
        y = ws.load(b, (k * BK, 0), (BK, BN))
        y2 = ws.load(c, (k * BK, 0), (BK, BN))
        t = ws.dot(x, y)
        acc = acc + t * 0.5
        acc = ws.dot(x, y2, acc)
    ws.store(out, (0, 0), acc.astype(ws.float16))


def test_method_astype_on_a_loaded_tile():
    rng = np.random.default_rng(4)
    report = verify(method_astype, (1,), f16(rng, 64, 192), np.zeros((64, 64), np.float16),
                    BM=64, BK=64, num_consumer_groups=1, seeds=1)
    assert report.ok, str(report)


def test_dot_result_read_before_the_slot_release():
    rng = np.random.default_rng(5)
    report = verify(dot_result_before_wait, (1,), f16(rng, 64, 128), f16(rng, 128, 64),
                    f16(rng, 128, 64), np.zeros((64, 64), np.float16), BM=64, BN=64, BK=64,
                    num_consumer_groups=1, seeds=1)
    assert report.ok, str(report)


def offset_load_matmul(a, b, c, col, BM: ws.constexpr, BN: ws.constexpr,
                       BK: ws.constexpr):
    """a's columns from the runtime offset ``col``: only 1-element aligned statically."""
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(b.shape[0], BK)):
        acc = ws.dot(ws.load(a, (0, col + k * BK), (BM, BK)),
                     ws.load(b, (k * BK, 0), (BK, BN)), acc)
    ws.store(c, (0, 0), acc)


def _claim_aligned(monkeypatch, module):
    """Make ``module``'s static offset check claim every offset is 64-element aligned
    (a stand-in for a bug in passes/offset_align.py)."""
    monkeypatch.setattr(module, "offset_alignment", lambda *args: 64)


def test_tma_load_at_an_unaligned_column_is_found(monkeypatch):
    """TMA faults on an innermost coordinate that is not a multiple of 16 bytes; if the
    static check let such a load through, the simulator reports it with the values of
    the launch (col = 1: 2 bytes)."""
    from numba_ws.passes import lower_loads
    rng = np.random.default_rng(6)
    args = (f16(rng, 64, 200), f16(rng, 128, 64), np.zeros((64, 64), np.float16))
    meta = dict(BM=64, BN=64, BK=64, num_consumer_groups=1, seeds=1)
    assert verify(offset_load_matmul, (1,), *args, 8, **meta).ok
    _claim_aligned(monkeypatch, lower_loads)
    assert verify(offset_load_matmul, (1,), *args, 8, **meta).ok      # 16 bytes: fine
    found = first(verify(offset_load_matmul, (1,), *args, 1, **meta), "tma_coordinate")
    assert "TMA load of" in found.message and "(2 bytes" in found.message


def test_staged_store_at_an_unaligned_column_is_found(monkeypatch):
    """The same for a staged (TMA) store: kernels.shifted_matmul at column shift 1."""
    from numba_ws.passes import staged_stores
    rng = np.random.default_rng(7)
    a, b = f16(rng, 128, 64), f16(rng, 64, 256)
    c = np.zeros((128, 256 + 16), np.float16)[:, :257]
    meta = dict(BM=128, BN=256, BK=64, SHIFT=1, seeds=1)
    assert verify(kernels.shifted_matmul, (1, 1), a, b, c, **meta).ok     # stays direct
    _claim_aligned(monkeypatch, staged_stores)
    report = verify(kernels.shifted_matmul, (1, 1), a, b, c, **meta)
    found = [f for f in report.findings if f.kind == "tma_coordinate"]
    assert found and "staged (TMA) ws.store" in found[0].message, str(report)
