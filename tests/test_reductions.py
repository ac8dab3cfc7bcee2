"""Issue 15 item 4: NumPy / Triton reduction semantics (the reduced axis dropped unless
``keepdims=True``; ``axis=None`` reduces every element; ``ws.squeeze``).

- the op itself in the interpreter: shapes, scalars, dtypes, errors, and the compiler's
  typing errors (a numba_ws error naming the argument);
- the kernels of tests/kernels_reduce.py: interpreter against float64 on fresh inputs,
  ``ws.verify`` (the partitioned program in the schedule simulator) with 1 and 2 consumer
  groups, and PTX assembled by ptxas for sm_90a and sm_80;
- the rewrite the anchors pass makes (later passes see only keepdims reductions along one
  int axis, then ``ws.squeeze``).
"""
import warnings

import numpy as np
import pytest

import numba_ws as ws
from numba_ws.errors import WSError, WSUsageError

from numba_ws.interpreter.ops import INTERPRET
from numba_ws.passes.data_partition import PartitionFallbackWarning

import kernels_reduce as kr
from ptx_tools import assemble

ALL = list(kr.CASES.values())
TARGETS = {"sm_90a": (9, 0, "a"), "sm_80": (8, 0)}


# -- the ops ---------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["max", "sum", "min"])
def test_shapes_follow_numpy(op):
    x = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    fn, ref = INTERPRET[op], getattr(np, op)
    for axis in (0, 1):
        for keep in (False, True):
            got = fn(x, axis, keepdims=keep)
            want = ref(x, axis=axis, keepdims=keep)
            assert got.shape == want.shape and np.array_equal(got, want)
    assert fn(x, keepdims=True).shape == (1, 1)
    total = fn(x)
    assert np.isscalar(total) and total == pytest.approx(float(ref(x)), rel=1e-6)
    assert np.isscalar(fn(x[0], 0)) and fn(x[0], 0, keepdims=True).shape == (1,)


def test_arg_reductions_drop_the_axis_and_need_one():
    x = np.array([[1.0, 5.0, 5.0], [7.0, 0.0, 7.0]], np.float32)
    argmax, argmin = INTERPRET["argmax"], INTERPRET["argmin"]
    assert argmax(x, 1).tolist() == [1, 0] and argmax(x, 1).dtype == np.int32
    assert argmin(x, 0, keepdims=True).tolist() == [[0, 1, 0]]
    with pytest.raises(WSUsageError, match="give an axis"):
        argmax(x, None)


def test_squeeze():
    squeeze = INTERPRET["squeeze"]
    x = np.arange(4, dtype=np.float32).reshape(4, 1)
    assert squeeze(x, 1).shape == (4,)
    assert squeeze(x[:1, :1].reshape(1), 0) == 0.0
    with pytest.raises(WSUsageError, match="not of size 1"):
        squeeze(x, 0)


def test_bad_keepdims_and_axis_are_usage_errors():
    x = np.ones((4, 4), np.float32)
    with pytest.raises(WSUsageError, match="keepdims must be True or False"):
        INTERPRET["sum"](x, 1, keepdims="yes")
    with pytest.raises(WSUsageError, match="axis must be None or an int"):
        INTERPRET["max"](x, 2)


def _runtime_keepdims(x, y, flag, BM: ws.constexpr, BN: ws.constexpr):
    t = ws.load(x, (0, 0), (BM, BN))
    ws.store(y, (0,), ws.sum(t, 1, keepdims=flag > 0))


def _argmax_no_axis(x, y, BM: ws.constexpr, BN: ws.constexpr):
    ws.store(y, (0,), ws.argmax(ws.load(x, (0, 0), (BM, BN)), None))


def _squeeze_wrong_axis(x, y, BM: ws.constexpr, BN: ws.constexpr):
    ws.store(y, (0,), ws.squeeze(ws.sum(ws.load(x, (0, 0), (BM, BN)), 1, keepdims=True), 0))


@pytest.mark.parametrize("kernel,extra,match", [
    (_runtime_keepdims, (1,), "keepdims"),
    (_argmax_no_axis, (), "give an axis"),
    (_squeeze_wrong_axis, (), "not of size 1"),
])
def test_compiler_errors_name_the_argument(kernel, extra, match):
    x, y = np.ones((64, 64), np.float16), np.zeros((64,), np.float32)
    with pytest.raises(WSError, match=match):
        ws.jit(kernel).inspect_ptx(x, y, *extra, BM=64, BN=64)


# -- the rewrite -----------------------------------------------------------------------

def test_later_passes_see_keepdims_reductions_and_squeezes():
    from numba_ws.passes.ir_tools import tile_op
    x, y = np.ones((300, 100), np.float16), np.zeros((300, 100), np.float16)
    state = ws.jit(kr.softmax_np).partition(x, y, BM=64, BN=128)
    ops = []
    for block in state.ws.original_ir.blocks.values():
        for stmt in block.body:
            op = tile_op(stmt, state.ws.original_typemap)
            if op in ("max", "sum", "squeeze"):
                ops.append((op, len(stmt.value.args), stmt.value.kws))
    assert ops == [("max", 3, ()), ("squeeze", 2, ()), ("sum", 3, ()), ("squeeze", 2, ())]


# -- kernels ---------------------------------------------------------------------------

@pytest.fixture
def seed():
    return np.random.SeedSequence().entropy


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_interpreter_matches_float64(case, seed):
    args, grid = case.make(np.random.default_rng(seed))
    launch, outs = kr.host_args(args)
    ws.jit(case.kernel)[grid](*launch, **case.meta)
    for i, (out, base) in enumerate(outs):
        out.check(base, f"{case.name} output {i} (seed {seed})")


def _numpy_args(case):
    args, grid = case.make(np.random.default_rng(15))
    return kr.host_args(args)[0], grid


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_verify_is_clean(case, groups):
    args, grid = _numpy_args(case)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PartitionFallbackWarning)
        report = ws.verify(case.kernel, grid, *args, seeds=1, max_programs=3,
                           exact=case.exact, num_consumer_groups=groups, **case.meta)
    assert report.ok, str(report)


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_ptx_assembles(case, target, tmp_path):
    args, _ = _numpy_args(case)
    groups = 2 if target == "sm_80" else 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PartitionFallbackWarning)
        ptx = ws.jit(case.kernel).inspect_ptx(*args, cc=TARGETS[target],
                                              num_consumer_groups=groups, **case.meta)
    assemble(ptx, tmp_path, target)
