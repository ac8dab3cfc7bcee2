"""The warp-specialization stage on the CPU: tasks, data partition, channels, branches.

The seed's GEMM (tests/kernels.py ``matmul``, written in numba_ws's API) must get the
seed's task annotation line for line, before and after data partitioning.
"""
import inspect
import operator

import numpy as np
import pytest

import numba_ws as ws
from numba_ws import knobs
from numba_ws.errors import WSCompileError, WSResourceError
from numba_ws.language import stage_ops as so
from numba_ws.passes.explain import listing
from numba_ws.passes.pipeline import ANALYSIS_END, PIPELINE, pass_names
import kernels


def f16(*shape):
    return np.random.default_rng(0).random(shape).astype(np.float16)


GEMM_ARGS = (f16(256, 128), f16(128, 512), f16(256, 512))
SEED_BEFORE = """\
    M, K = a.shape # async_task 0, 1
    N = b.shape[1] # async_task 0, 1
    pid = ws.program_id(0) # async_task 0, 1
    num_pid_n = ws.cdiv(N, BN) # async_task 0, 1
    pid_m = pid // num_pid_n # async_task 0, 1
    pid_n = pid % num_pid_n # async_task 0, 1
    acc = ws.zeros((BM, BN), ws.float32) # async_task 1
    for k in range(ws.cdiv(K, BK)): # async_task 0, 1
        x = ws.load(a, (pid_m * BM, k * BK), (BM, BK)) # async_task 0
        y = ws.load(b, (k * BK, pid_n * BN), (BK, BN)) # async_task 0
        acc = ws.dot(x, y, acc) # async_task 1
    ws.store(c, (pid_m * BM, pid_n * BN), acc) # async_task 1"""
SEED_AFTER = """\
    M, K = a.shape # async_task 0, 1, 2
    N = b.shape[1] # async_task 0, 1, 2
    pid = ws.program_id(0) # async_task 0, 1, 2
    num_pid_n = ws.cdiv(N, BN) # async_task 0, 1, 2
    pid_m = pid // num_pid_n # async_task 0, 1, 2
    pid_n = pid % num_pid_n # async_task 0, 1, 2
    acc_1 = ws.zeros((BM // 2, BN), ws.float32) # async_task 1
    acc_2 = ws.zeros((BM // 2, BN), ws.float32) # async_task 2
    for k in range(ws.cdiv(K, BK)): # async_task 0, 1, 2
        x_1 = ws.load(a, (pid_m * BM, k * BK), (BM // 2, BK)) # async_task 0
        x_2 = ws.load(a, (pid_m * BM + BM // 2, k * BK), (BM // 2, BK)) # async_task 0
        y = ws.load(b, (k * BK, pid_n * BN), (BK, BN)) # async_task 0
        acc_1 = ws.dot(x_1, y, acc_1) # async_task 1
        acc_2 = ws.dot(x_2, y, acc_2) # async_task 2
    ws.store(c, (pid_m * BM, pid_n * BN), acc_1) # async_task 1
    ws.store(c, (pid_m * BM + BM // 2, pid_n * BN), acc_2) # async_task 2"""


def _annotated_body(text):
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if "M, K = a.shape" in l)
    return "\n".join(lines[start:start + 20]).split("\n\n")[0].rstrip()


def _partition(fn, *args, **meta):
    return ws.jit(fn).partition(*args, **meta)


def _calls(state, stub):
    """(block label, stmt) of every call of ``stub`` in the partitioned IR."""
    out = []
    fir = state.func_ir
    for label, block in fir.blocks.items():
        for stmt in block.body:
            v = getattr(stmt, "value", None)
            if getattr(v, "op", None) == "call":
                d = fir.get_definition(v.func)
                if getattr(d, "value", None) is stub:
                    out.append((label, stmt))
    return out


def test_pipeline_order_is_one_list():
    names = pass_names()
    assert names[:4] == ["ws_anchors", "ws_tasks", "ws_data_partition", "ws_code_partition"]
    assert ANALYSIS_END in names and len(names) == len(PIPELINE)


def test_seed_gemm_annotation_matches_seed():
    text = ws.jit(kernels.matmul).explain(*GEMM_ARGS, BM=128, BN=256, BK=64)
    before, after = text.split("# after data partitioning")
    assert _annotated_body(before) == SEED_BEFORE
    assert _annotated_body(after) == SEED_AFTER


def test_single_consumer_keeps_task_1():
    state = _partition(kernels.matmul, *GEMM_ARGS, BM=128, BN=128, BK=64,
                       num_consumer_groups=1)
    src, first = inspect.getsourcelines(kernels.matmul)
    after = listing(state.ws, src, first, after_partition=True)
    assert "acc = ws.dot(x, y, acc) # async_task 1" in after
    assert "_1" not in after.split("acc = ws.zeros")[1].split("\n")[0]
    assert state.ws.partition_dim is None


@pytest.mark.parametrize("buffers", [2, 3, 4])
def test_ring_slot_and_phase_ops(buffers):
    """Power-of-two slot counts get ``ring & (n - 1)`` / ``(ring >> log2 n) & 1`` (no
    signed 64-bit division on the consumer's critical path); others ``%`` and ``//``."""
    state = _partition(kernels.matmul, *GEMM_ARGS, BM=128, BN=256, BK=64,
                       num_buffers_warp_spec=buffers)
    fir = state.func_ir
    waits = _calls(state, so.ws_consumer_wait)
    assert waits
    for _, stmt in waits:
        slot = fir.get_definition(stmt.value.args[1])
        phase = fir.get_definition(stmt.value.args[2])
        quotient = fir.get_definition(phase.lhs)
        n = fir.get_definition(slot.rhs).value
        if buffers & (buffers - 1) == 0:
            assert (slot.fn, phase.fn, quotient.fn) == (operator.and_, operator.and_,
                                                        operator.rshift)
            assert n == buffers - 1 and fir.get_definition(quotient.rhs).value == \
                buffers.bit_length() - 1
        else:
            assert (slot.fn, phase.fn, quotient.fn) == (operator.mod, operator.mod,
                                                        operator.floordiv)
            assert n == buffers


@pytest.mark.parametrize("in_flight", [0, 1])
@pytest.mark.parametrize("groups,bm", [(1, 128), (2, 128), (3, 192)])
@pytest.mark.parametrize("buffers", [1, 2, 3, 4])
def test_gemm_channels_slots_branches(groups, bm, buffers, in_flight):
    bn = 256 if groups == 2 else 128
    # one clone per group here (the shared consumer body: test_shared_consumer_body.py);
    # the simulated run below is of the default, shared body
    state = _partition(kernels.matmul, f16(bm * 2, 128), f16(128, 512), f16(bm * 2, 512),
                       BM=bm, BN=bn, BK=64, num_consumer_groups=groups,
                       num_buffers_warp_spec=buffers, dot_in_flight=in_flight,
                       reg_inc_consumer=152 if groups == 3 else 232, shared_consumer_body=0)
    plan = state.ws
    assert len(plan.channels) == 1
    ch = plan.channels[0]
    assert [m["var"] for m in ch.members] == ["x", "y"]
    assert ch.num_slots == buffers and ch.in_loop
    assert ch.consumers == tuple(range(1, groups + 1)) and ch.arrivals == groups
    assert ch.lowering == "tma"
    a_parts = ch.members[0]["parts"]
    assert len(a_parts) == groups and all(p["shape"] == (bm // groups, 64) for p in a_parts)
    assert ch.slot_bytes == bm * 64 * 2 + 64 * bn * 2
    assert plan.smem_bytes >= buffers * ch.slot_bytes + 16 * buffers
    # one branch per warp group; each consumer waits and releases, the producer acquires
    assert sorted(plan.branches) == list(range(groups + 1))
    owner = lambda label: max(t for t, e in plan.branches.items() if label >= e)  # noqa: E731
    assert {owner(l) for l, _ in _calls(state, so.ws_producer_acquire)} == {0}
    assert {owner(l) for l, _ in _calls(state, so.ws_tma_copy)} == {0}
    assert {owner(l) for l, _ in _calls(state, so.ws_consumer_wait)} == set(range(1, groups + 1))
    releases = _calls(state, so.ws_consumer_release) + _calls(state, so.ws_consumer_release_prev)
    assert {owner(l) for l, _ in releases} == set(range(1, groups + 1))
    # with dot_in_flight and 2+ slots the main-loop dot stays in flight and the previous
    # slot is released
    deferred = bool(_calls(state, so.ws_consumer_release_prev))
    assert deferred == (buffers >= 2 and in_flight == 1)
    # and the schedule of this very configuration runs clean in the simulator, with the
    # interpreter's results (K = 192: three k-steps, so every ring wraps)
    rng = np.random.default_rng(buffers)
    a, b = (rng.standard_normal(s).astype(np.float16) for s in ((bm, 192), (192, bn)))
    report = ws.verify(kernels.matmul, (1,), a, b, np.full((bm, bn), np.nan, np.float16),
                       BM=bm, BN=bn, BK=64, num_consumer_groups=groups,
                       num_buffers_warp_spec=buffers, dot_in_flight=in_flight,
                       reg_inc_consumer=152 if groups == 3 else 232, seeds=1)
    assert report.ok, str(report)
    assert len(_calls(state, so.ws_reg_dealloc)) == 1
    # with one consumer every thread already starts with 248 registers: no inc needed
    assert len(_calls(state, so.ws_reg_alloc)) == (groups if groups > 1 else 0)
    if groups == 1:
        assert any("setmaxnreg left out" in n for n in plan.notes)
    assert len(_calls(state, so.ws_warp_group)) == 1


def _waits_before_releases(state):
    """[(dot_wait depth, release op)] for each release in the partitioned IR."""
    out = []
    for block in state.func_ir.blocks.values():
        last_wait = None
        for s in block.body:
            v = getattr(s, "value", None)
            if getattr(v, "op", None) != "call":
                continue
            fn = getattr(state.func_ir.get_definition(v.func), "value", None)
            if fn is so.ws_dot_wait:
                last_wait = state.func_ir.get_definition(v.args[0]).value
            elif fn in (so.ws_consumer_release, so.ws_consumer_release_prev):
                out.append((last_wait, fn.__name__))
    return out


@pytest.mark.parametrize("buffers,in_flight", [(1, 1), (3, 0), (3, 1)])
def test_release_follows_dot_wait(buffers, in_flight):
    state = _partition(kernels.matmul, *GEMM_ARGS, BM=128, BN=256, BK=64,
                       num_buffers_warp_spec=buffers, dot_in_flight=in_flight)
    pairs = _waits_before_releases(state)
    assert pairs and all(w is not None for w, _ in pairs)
    if buffers == 1 or not in_flight:   # wait for the dot, then release its slot
        assert set(pairs) == {(0, "ws_consumer_release")}
    else:              # in the loop: one dot in flight, the previous slot released;
        # at the loop exit every dot completes before the last release
        assert set(pairs) == {(1, "ws_consumer_release_prev"), (0, "ws_consumer_release_prev")}


def test_attention_pv_dot_stays_in_flight():
    """dot_in_flight=1: the loop's last dot (p @ v) stays in flight past its release point
    (``wait 1``, the previous slot released), although its result is read by element-wise
    code (``acc * alpha``) in the next iteration; without the option every release waits
    for every dot. The loop's exit waits for all of them."""
    q = f16(1024, 64)
    args = (q, q, q, q, 512, 0.125)
    meta = dict(BM=128, BN=64, D=64, num_buffers_warp_spec=3)
    plain = _waits_before_releases(_partition(kernels.attention_fwd, *args, **meta))
    assert {w for w, _ in plain} == {0}
    deferred = _waits_before_releases(_partition(kernels.attention_fwd, *args,
                                                 dot_in_flight=1, **meta))
    assert (1, "ws_consumer_release_prev") in deferred
    assert (0, "ws_consumer_release_prev") in deferred


def test_bias_outside_loop_gets_one_slot():
    state = _partition(kernels.matmul_bias_relu, f16(256, 128), f16(128, 512), f16(512),
                       f16(256, 512), BM=128, BN=256, BK=64, num_buffers_warp_spec=4)
    chans = {tuple(m["var"] for m in c.members): c for c in state.ws.channels}
    assert chans[("bias_tile",)].num_slots == 1 and not chans[("bias_tile",)].in_loop
    assert chans[("x", "y")].num_slots == 4
    assert state.ws.split["bias_tile"] is None            # shared by both consumers
    assert state.ws.split["acc"] == 0


def test_attention_two_dots():
    q = f16(1024, 64)
    state = _partition(kernels.attention_fwd, q, q, q, q, 512, 0.125, BM=128, BN=64, D=64)
    plan = state.ws
    chans = {tuple(m["var"] for m in c.members): c for c in plan.channels}
    assert set(chans) == {("q_tile",), ("k_tile", "v_tile")}
    assert chans[("q_tile",)].num_slots == 1
    assert chans[("k_tile", "v_tile")].num_slots == 3
    assert plan.split["q_tile"] == 0 and plan.split["k_tile"] is None
    assert plan.split["s"] == 0 and plan.partition_dim == "M"


def test_n_split_when_m_too_small():
    state = _partition(kernels.matmul, *GEMM_ARGS, BM=64, BN=256, BK=64)
    assert state.ws.partition_dim == "N" and state.ws.slice_size == 128
    assert state.ws.split["y"] == 1 and state.ws.split["x"] is None


def test_no_split_possible_falls_back_to_one_group():
    from numba_ws.passes.data_partition import PartitionFallbackWarning
    with pytest.warns(PartitionFallbackWarning, match="cannot split its work.*M: .*N: "):
        state = _partition(kernels.matmul, *GEMM_ARGS, BM=64, BN=64, BK=64)
    assert state.ws.num_consumers == 1 and state.ws.split == {}


def test_register_budget_error():
    with pytest.raises(WSResourceError, match="register budget"):
        _partition(kernels.matmul, *GEMM_ARGS, BM=128, BN=256, BK=64, reg_inc_consumer=256)


def test_shared_memory_over_limit():
    with pytest.raises(WSResourceError, match="shared memory"):
        _partition(kernels.matmul, *GEMM_ARGS, BM=128, BN=256, BK=64, num_buffers_warp_spec=5)


def _dead_load(a, b, c, BM: ws.constexpr, BN: ws.constexpr):
    ws.load(a, (0, 0), (BM, BN))
    ws.store(c, (0, 0), ws.zeros((BM, BN), ws.float16))


def test_load_feeding_nothing_is_an_error():
    with pytest.raises(WSCompileError, match=r"feeds nothing[\s\S]*test_passes.py"):
        _partition(_dead_load, *GEMM_ARGS, BM=64, BN=64, num_consumer_groups=1)


def _runtime_block(a, b, c, n):
    ws.store(c, (0, 0), ws.load(a, (0, 0), (n, n)))


def test_non_constexpr_block_size_is_an_error():
    """The sentence comes first (not buried in numba's per-signature report), then the
    user's file, line and source."""
    with pytest.raises(WSCompileError) as info:
        _partition(_runtime_block, *GEMM_ARGS, 64, num_consumer_groups=1)
    text = str(info.value)
    assert text.startswith("[numba-cuda] load(shape) must be a tuple of 1 or 2 positive "
                           "compile-time constants"), text[:300]
    assert "make the block size a ws.constexpr parameter" in text.splitlines()[0]
    assert "test_passes.py" in text and "ws.load(a, (0, 0), (n, n))" in text
    assert "No implementation of function" in info.value.details


def test_dump_and_timing_knobs(capsys):
    with knobs.scope(NUMBA_WS_DUMP="matmul", NUMBA_WS_TIMING=True):
        _partition(kernels.matmul, *GEMM_ARGS, BM=128, BN=256, BK=64)
    out = capsys.readouterr().out
    for name in pass_names():
        if name != "ws_lower_tiles":
            assert f"IR Dump Before {name} (matmul)" in out
            assert f"numba_ws: pass {name}" in out
    assert "# tasks [0, 1]" in out
    with knobs.scope(NUMBA_WS_DUMP="other_kernel"):
        _partition(kernels.matmul, *GEMM_ARGS, BM=128, BN=256, BK=64)
    assert "IR Dump" not in capsys.readouterr().out


def _tf32_dot(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(a.shape[1], BK)):
        x = ws.load(a, (0, k * BK), (BM, BK))
        acc = ws.dot(x, ws.load(b, (k * BK, 0), (BK, BN)), acc)
    ws.store(c, (0, 0), acc)


def test_numba_typing_errors_become_compile_errors_with_the_line():
    """A float32 (tf32) dot has no tensor-core form on sm_80 yet (sm_90a and the
    interpreter run it): the error from the intrinsic's typing is a WSCompileError with
    our sentence and the user's file and line, not a bare numba exception."""
    f32 = np.zeros((256, 256), np.float32)
    with pytest.raises(WSCompileError, match=r"(?s)sm_80: float32 \(tf32\) operands.*"
                                             r"test_passes.py.*acc = ws.dot"):
        ws.jit(_tf32_dot).inspect_ptx(f32, f32, f32, BM=128, BN=128, BK=32, cc=(8, 0))


def _adds_loaded_tile(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(a.shape[1], BK)):
        acc = ws.dot(ws.load(a, (0, k * BK), (BM, BK)), ws.load(b, (k * BK, 0), (BK, BN)), acc)
    acc = acc + ws.load(c, (0, 0), (BM, BN))
    ws.store(c, (0, 0), acc.astype(ws.float16))


def test_a_loaded_tile_added_to_an_accumulator_is_read_in_its_layout():
    """The residual tile is read from its slot with ld.shared straight into the
    accumulator layout (no conversion, no scratch)."""
    state = ws.jit(_adds_loaded_tile).partition(*GEMM_ARGS, BM=128, BN=256, BK=64,
                                                stop_after="ws_layouts")
    from numba_ws.codegen import layouts
    reads = [n for n in state.ws.layouts if n.startswith("$ws_call.layout")]
    assert reads and all(state.ws.layouts[n] == layouts.acc(64, 256) for n in reads)
    assert state.ws.scratch_bytes == 0
    ptx = ws.jit(_adds_loaded_tile).inspect_ptx(*GEMM_ARGS, BM=128, BN=256, BK=64)
    assert "ld.shared.b32" in ptx


def test_bad_tile_shape_type_error_names_the_argument():
    def k(a, c, BM: ws.constexpr):
        ws.store(c, (0, 0), ws.load(a, (0, 0), (BM, "x")))
    with pytest.raises(WSCompileError, match="load\\(shape\\) must be a tuple"):
        ws.jit(k).partition(*GEMM_ARGS[:1], GEMM_ARGS[2], BM=64, num_consumer_groups=1)


def _commented(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    acc = ws.zeros((BM, BN), ws.float32)  # the accumulator
    for k in range(ws.cdiv(a.shape[1], BK)):
        x = ws.load(a, (0, k * BK), (BM, BK))  # producer (TMA)
        acc = ws.dot(x, ws.load(b, (k * BK, 0), (BK, BN)), acc)
    ws.store(c, (0, 0), acc.astype(ws.float16))


def test_explain_replaces_user_comments_with_the_annotation():
    text = ws.jit(_commented).explain(*GEMM_ARGS, BM=128, BN=256, BK=64)
    assert "        x = ws.load(a, (0, k * BK), (BM, BK)) # async_task 0\n" in text
    assert "producer (TMA)" not in text and "# the accumulator" not in text


def test_device_function_epilogue_is_split_with_the_accumulator():
    """gelu(acc) (a ws.map) follows acc's split, so each consumer group stores its own rows.
    Before the fix both groups stored rows [0, 64) of every tile (found on the H200); the
    simulated partitioned kernel must now match the interpreter on every output."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 128)).astype(np.float16)
    b = rng.standard_normal((128, 256)).astype(np.float16)
    c = np.full((256, 256), np.nan, np.float16)
    meta = dict(BM=128, BN=256, BK=64, num_consumer_groups=2)
    state = _partition(kernels.matmul_gelu, a, b, c, **meta)
    assert state.ws.split["acc"] == 0
    mapped = [n for n, s in state.ws.split.items() if n.startswith("$") and s == 0]
    assert mapped, "the ws.map result of acc was not split"
    report = ws.verify(kernels.matmul_gelu, (2,), a, b, c, seeds=1, exact=False, **meta)
    assert report.ok, str(report)



def test_passes_that_add_few_statements_type_them_as_a_full_retype_would():
    """lower_loads and registers type their new statements in place (ir_build
    .type_statements) instead of re-running type inference: same typemap, calltypes and
    definitions as a full retype."""
    from numba_ws.passes.ir_build import retype
    z = lambda *s: np.zeros(s, np.float16)   # noqa: E731
    state = ws.jit(kernels.matmul).partition(z(512, 256), z(256, 512), z(512, 512),
                                              BM=128, BN=256, BK=64, stop_after="ws_registers")
    assert any("reg_alloc" in str(st) for b in state.func_ir.blocks.values() for st in b.body)
    typemap = {n: str(t) for n, t in state.typemap.items()}
    calls = {str(e): str(s) for e, s in state.calltypes.items()}
    defs = {n: [str(d) for d in v] for n, v in state.func_ir._definitions.items() if v}
    retype(state, state.func_ir)
    assert typemap == {n: str(t) for n, t in state.typemap.items()}
    assert calls == {str(e): str(s) for e, s in state.calltypes.items()}
    assert defs == {n: [str(d) for d in v] for n, v in state.func_ir._definitions.items() if v}
