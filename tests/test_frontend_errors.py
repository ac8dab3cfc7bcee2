"""Front-end errors name the real cause and the kernel line that has it, on the GPU
compile path (``inspect_ptx`` with NumPy stand-ins) and, where the interpreter checks the
same thing, in the interpreter; ``cc=(9, 0)`` compiles for sm_90a."""
import inspect
import re

import numpy as np
import pytest

import numba_ws as ws
from numba_ws import knobs
from numba_ws.errors import WSCompileError, WSUsageError
from numba_ws.runtime.specialize import target_cc
import kernels
from ptx_tools import assemble

f16 = lambda *s: np.zeros(s, np.float16)   # noqa: E731
f32 = lambda *s: np.zeros(s, np.float32)   # noqa: E731
GEMM = (f16(256, 256), f16(256, 256), f16(256, 256))
GEMM_META = dict(BM=128, BN=128, BK=64)


def _line_of(fn, marker):
    """File line number of the line of ``fn``'s source containing ``marker``."""
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, text in enumerate(lines) if marker in text]
    assert len(hits) == 1, (marker, hits)
    return hits[0]


def _compile_error(fn, args, meta, cls=WSCompileError):
    with pytest.raises(cls) as info:
        ws.jit(fn).inspect_ptx(*args, **meta)
    return info.value


def _assert_points_at(err, fn, marker):
    """The message's location (and ``err.loc``) is the line of ``fn`` with ``marker``,
    and names no other line."""
    line = _line_of(fn, marker)
    text = str(err)
    assert re.findall(r'line (\d+):', text) == [str(line)], text
    assert f'{inspect.getsourcefile(fn)}", line {line}:' in text, text
    assert err.loc is not None and err.loc.line == line


# --- cc (9, 0) is sm_90a -------------------------------------------------------------

def test_cc_90_compiles_sm_90a_ptx_that_ptxas_accepts(tmp_path):
    ptx = ws.jit(kernels.matmul).inspect_ptx(*GEMM, cc=(9, 0), **GEMM_META)
    assert re.search(r"^\.target sm_90a\b", ptx, re.M)
    assert "wgmma.mma_async" in ptx and "setmaxnreg" in ptx
    assemble(ptx, tmp_path, arch="sm_90a")
    same = ws.jit(kernels.matmul).inspect_ptx(*GEMM, cc=(9, 0, "a"), **GEMM_META)
    unversioned = lambda text: re.sub(r"B\d+v\d+B", "", text)   # noqa: E731 (mangling)
    assert unversioned(ptx) == unversioned(same)


def test_partition_and_explain_with_cc_90_plan_for_sm_90a():
    k = ws.jit(kernels.matmul)
    assert k.partition(*GEMM, cc=(9, 0), **GEMM_META).ws.cc == (9, 0, "a")
    assert "async_task" in k.explain(*GEMM, cc=(9, 0), **GEMM_META)


def test_cc_knob_90_means_sm_90a():
    with knobs.scope(NUMBA_WS_CC="9.0"):
        assert target_cc(knobs.target_cc()) == (9, 0, "a")
    with knobs.scope(NUMBA_WS_CC="8.0"):
        assert target_cc(knobs.target_cc()) == (8, 0)


@pytest.mark.parametrize("cc,match", [((10, 0), r"sm_100 has no sm_90a instructions"),
                                      ((8, 0, "a"), r"only sm_90 has the 'a' target"),
                                      ((9,), r"expected \(major, minor\)"),
                                      ("9.0", r"expected \(major, minor\)")])
def test_unsupported_cc_is_a_usage_error(cc, match):
    with pytest.raises(WSUsageError, match=match):
        ws.jit(kernels.matmul).inspect_ptx(*GEMM, cc=cc, **GEMM_META)


# --- tile shapes ---------------------------------------------------------------------

def _runtime_shape(x, y, n, BN: ws.constexpr):
    pid = ws.program_id(0)
    t = ws.zeros((n, BN), ws.float32)            # runtime shape
    ws.store(y, (pid, 0), t)


def test_runtime_tile_shape_names_the_shape_and_dimension():
    err = _compile_error(_runtime_shape, (f32(64, 64), f32(64, 64), 64), dict(BN=64))
    head = str(err).splitlines()[0]
    assert "zeros(shape) must be a tuple of 1 or 2 positive compile-time constants" in head
    assert "dimension 0 is a runtime int64" in head and "dtype" not in head
    _assert_points_at(err, _runtime_shape, "# runtime shape")


def _block(x, y, BM: ws.constexpr, BN: ws.constexpr):
    pid = ws.program_id(0)
    t = ws.load(x, (pid * BM, 0), (BM, BN))      # the block
    ws.store(y, (pid * BM, 0), t)


@pytest.mark.parametrize("bm,bn,dim,value", [(0, 64, 0, 0), (-64, 64, 0, -64),
                                             (64, 0, 1, 0)])
def test_non_positive_block_size_names_the_dimension(bm, bn, dim, value):
    x, y = f32(256, 64), f32(256, 64)
    err = _compile_error(_block, (x, y), dict(BM=bm, BN=bn))
    head = str(err).splitlines()[0]
    assert f"load(shape) must be a tuple of 1 or 2 positive" in head
    assert f"dimension {dim} is {value}; a block size must be at least 1" in head
    assert "dtype" not in head
    _assert_points_at(err, _block, "# the block")
    with pytest.raises(WSUsageError, match=r"shape must be .*positive"):
        ws.jit(_block)[(1,)](x, y, BM=bm, BN=bn)


# --- offsets -------------------------------------------------------------------------

def _short_offsets(a, c, BM: ws.constexpr, BK: ws.constexpr):
    i = ws.program_id(0)
    t = ws.load(a, (i,), (BM, BK))               # short offsets
    ws.store(c, (0, 0), t)


def test_wrong_length_offsets_blame_the_offsets():
    args = (f32(256, 64), f32(256, 64))
    err = _compile_error(_short_offsets, args, dict(BM=64, BK=64))
    head = str(err).splitlines()[0]
    assert "load(offsets) has 1 entry but the array is 2-D: expected a tuple of 2 ints" in head
    assert "shape" not in head
    _assert_points_at(err, _short_offsets, "# short offsets")
    with pytest.raises(WSUsageError, match="offsets has 1 entr.* the array is 2-D"):
        ws.jit(_short_offsets)[(1,)](*args, BM=64, BK=64)


def _scalar_offsets(a, c, BM: ws.constexpr):
    t = ws.zeros((BM,), ws.float32)
    ws.store(c, 0, t)                            # scalar offsets


def test_offsets_that_are_no_tuple_say_how_to_write_them():
    err = _compile_error(_scalar_offsets, (f32(256), f32(256)), dict(BM=64))
    assert "store(offsets) must be a tuple of 1 ints" in str(err) and "write (o,)" in str(err)
    _assert_points_at(err, _scalar_offsets, "# scalar offsets")


# --- grid axes -----------------------------------------------------------------------

def _axis3(a, c, BM: ws.constexpr, BK: ws.constexpr):
    i = ws.program_id(3)                         # axis 3
    ws.store(c, (i, 0), ws.load(a, (i, 0), (BM, BK)))


def test_program_id_axis_out_of_range():
    args = (f32(256, 64), f32(256, 64))
    err = _compile_error(_axis3, args, dict(BM=64, BK=64))
    head = str(err).splitlines()[0]
    assert "program_id(axis): axis must be 0, 1 or 2" in head and "got 3" in head
    assert "compile-time constant" not in head
    _assert_points_at(err, _axis3, "# axis 3")
    with pytest.raises(WSUsageError, match="axis must be 0, 1 or 2, got 3"):
        ws.jit(_axis3)[(1,)](*args, BM=64, BK=64)


def _num_programs_runtime(a, c, n, BM: ws.constexpr):
    g = ws.num_programs(n)                       # runtime axis
    ws.store(c, (g * BM,), ws.zeros((BM,), ws.float32))


def test_grid_axis_must_be_a_literal():
    err = _compile_error(_num_programs_runtime, (f32(256), f32(256), 0), dict(BM=64))
    assert "num_programs(axis) must be a compile-time constant int" in str(err)
    _assert_points_at(err, _num_programs_runtime, "# runtime axis")


# --- the line an error points at -----------------------------------------------------

def _second_load_bad(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    x = ws.load(a, (0, 0), (BM, BK))
    y = ws.load(b, (0, 0), (BK, BN, 4))          # bad second load
    ws.store(c, (0, 0), ws.dot(x, y).astype(ws.float16))


def test_error_points_at_the_bad_call_not_the_first_call_of_that_op():
    """Before: the location was the first line calling ``ws.load`` (the valid line
    above), because numba's report carried no location for a rejected ws op."""
    err = _compile_error(_second_load_bad, GEMM, GEMM_META)
    assert "load(shape) must be a tuple" in str(err) and "got 3 dimensions" in str(err)
    _assert_points_at(err, _second_load_bad, "# bad second load")


def _last_line_bad(a, c, BM: ws.constexpr, BK: ws.constexpr):
    i = ws.program_id(0)
    t = ws.load(a, (i * BM, 0), (BM, BK))
    ws.store(c, (i * BM, 0), t)
    ws.store(c, (0, 0),
             ws.trans(i))                        # bad last line


def test_error_on_the_last_line_of_a_multi_line_statement():
    err = _compile_error(_last_line_bad, (f32(256, 64), f32(256, 64)), dict(BM=64, BK=64))
    assert str(err).startswith("[numba-cuda] trans(x) must be a 2-D tile, got int64")
    _assert_points_at(err, _last_line_bad, "# bad last line")


def _loop_body_bad(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    acc = ws.zeros((BM, BN), ws.float32)
    s = ws.zeros((BM, 1), ws.float32)
    for k in range(ws.cdiv(a.shape[1], BK)):
        x = ws.load(a, (0, k * BK), (BM, BK))
        acc = ws.dot(x, ws.load(b, (k * BK, 0), (BK, BN)), acc)
        s = ws.sum(acc, 1, keepdims=True)
        s = ws.sum(x, 2, keepdims=True)                         # bad axis in the loop
    ws.store(c, (0, 0), acc.astype(ws.float16))


def test_error_in_a_loop_body():
    err = _compile_error(_loop_body_bad, GEMM, GEMM_META)
    assert "sum(axis) must be 0 or 1 (x is 2-D), got 2" in str(err).splitlines()[0]
    _assert_points_at(err, _loop_body_bad, "# bad axis in the loop")


def _bad_keyword(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(a.shape[1], BK)):
        x = ws.load(a, (0, k * BK), (BM, BK))
        y = ws.load(b, (k * BK, 0), (BK, BN))
        acc = ws.dot(x, y, accumulator=acc)      # bad keyword
    ws.store(c, (0, 0), acc.astype(ws.float16))


def test_unknown_keyword_argument_is_an_error_on_its_line():
    """Before: the keyword was silently dropped and the kernel compiled without it."""
    err = _compile_error(_bad_keyword, GEMM, GEMM_META)
    assert ("ws.dot(a, b, acc=None) got an unexpected keyword argument 'accumulator'"
            in str(err))
    _assert_points_at(err, _bad_keyword, "# bad keyword")


def _extra_argument(a, c, BM: ws.constexpr):
    i = ws.program_id(0, 1)                      # two axes
    ws.store(c, (i * BM,), ws.zeros((BM,), ws.float32))


def _twice(a, c, BM: ws.constexpr):
    t = ws.zeros((BM,), ws.float32, shape=(BM,))  # shape twice
    ws.store(c, (0,), t)


@pytest.mark.parametrize("fn,marker,match", [
    (_extra_argument, "# two axes", r"ws\.program_id\(axis\) takes 1 argument, got 2"),
    (_twice, "# shape twice", r"ws\.zeros\(shape, dtype\) got multiple values for "
                              r"argument 'shape'")])
def test_wrong_argument_count(fn, marker, match):
    err = _compile_error(fn, (f32(256), f32(256)), dict(BM=64))
    assert re.search(match, str(err)), str(err)
    _assert_points_at(err, fn, marker)
