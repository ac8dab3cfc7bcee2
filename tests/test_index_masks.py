"""Issue 15 items 1-2 without a GPU: index tiles (``ws.arange``), views (``x[:, None]``,
``ws.expand_dims``, ``ws.broadcast_to``), comparisons, boolean tiles, ``ws.where`` and
masked loads / stores.

- Interpreter semantics of every new op against NumPy, with NaN, ±inf, empty windows,
  empty arrays and all-false masks; every kernel of tests/kernels_masks.py against its
  float64 reference (NaN-poisoned outputs with guard rows).
- Typing errors: a clear numba_ws error with the kernel line.
- ``ws.verify`` of every case with ``num_consumer_groups`` 1 and 2 (the partitioned
  program in the CPU schedule simulator: no finding, outputs equal to the interpreter's),
  and the row / M splits really made (no fallback to one group).
- PTX through ptxas for sm_90a and sm_80 (each kernel's first case with 1 and 2 groups on
  both; other cases sm_90a / 1 group and sm_80 / 2 groups); GEMM and attention must not
  spill. Unmasked loads compile exactly as before (``mask=None, other=0`` gives the same
  PTX as no keywords).
"""
import inspect
import re
import warnings

import numpy as np
import pytest

import numba_ws as ws
from numba_ws.errors import WSCompileError, WSUsageError
from numba_ws.interpreter.ops import INTERPRET, to_bfloat16

import kernels_masks as km
import kernels_tiles as kt
from ptx_tools import assemble, resources

TARGETS = {"sm_90a": (9, 0, "a"), "sm_80": (8, 0)}
ALL = list(km.CASES.values())
FIRST = [c for i, c in enumerate(ALL) if all(d.kernel is not c.kernel for d in ALL[:i])]
OTHERS = [c for c in ALL if c not in FIRST]


@pytest.fixture
def seed():
    return np.random.SeedSequence().entropy


def run(kernel, grid, *args, **meta):
    """Run ``kernel`` in the interpreter (NumPy arguments)."""
    ws.jit(kernel)[grid](*args, **meta)


# == interpreter semantics ===================================================================

def test_arange_is_int32_and_checks_its_bounds():
    got = INTERPRET["arange"](3, 11)
    assert got.dtype == np.int32 and got.tolist() == list(range(3, 11))
    assert INTERPRET["arange"](-4, -1).tolist() == [-4, -3, -2]
    for bad in ((5, 5), (6, 2)):
        with pytest.raises(WSUsageError, match="end > start"):
            INTERPRET["arange"](*bad)
    with pytest.raises(WSUsageError, match="must be ints"):
        INTERPRET["arange"](0, 4.0)


def views(x, y, z, B: ws.constexpr):
    t = ws.load(x, (0,), (B,))
    ws.store(y, (0, 0), t[:, None] * 10 + t[None, :])
    ws.store(z, (0, 0), ws.expand_dims(t, -1) - ws.broadcast_to(ws.expand_dims(t, 0), (B, B)))


def test_views_and_broadcasts_match_numpy():
    x = np.arange(8, dtype=np.float32) - 3
    y, z = np.full((8, 8), np.nan, np.float32), np.full((8, 8), np.nan, np.float32)
    run(views, (1,), x, y, z, B=8)
    assert np.array_equal(y, x[:, None] * 10 + x[None, :])
    assert np.array_equal(z, x[:, None] - x[None, :])
    assert INTERPRET["expand_dims"](x, 0).shape == (1, 8)
    assert INTERPRET["broadcast_to"](x[None, :], (3, 8)).shape == (3, 8)
    with pytest.raises(WSUsageError, match="does not broadcast"):
        INTERPRET["broadcast_to"](x, (8, 3))
    with pytest.raises(WSUsageError, match="1-D tile"):
        INTERPRET["expand_dims"](np.zeros((2, 2)), 0)


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.5, 3.0], np.float32)


@pytest.mark.parametrize("op,fn", [("lt", np.less), ("le", np.less_equal),
                                   ("eq", np.equal), ("ne", np.not_equal),
                                   ("gt", np.greater), ("ge", np.greater_equal)])
def test_comparisons_follow_numpy_with_nan_and_inf(op, fn):
    a, b = np.meshgrid(SPECIAL, SPECIAL)
    got = INTERPRET[op](a, b)
    assert got.dtype == np.bool_ and np.array_equal(got, fn(a, b))
    assert np.array_equal(INTERPRET[op](a, 1.0), fn(a, 1.0))       # tile with a scalar
    assert not INTERPRET[op](np.float32([np.nan]), np.nan)[0] or op == "ne"


def test_boolean_and_integer_operators():
    p = np.array([True, True, False, False])
    q = np.array([True, False, True, False])
    assert INTERPRET["and_"](p, q).tolist() == [True, False, False, False]
    assert INTERPRET["or_"](p, q).tolist() == [True, True, True, False]
    assert INTERPRET["xor"](p, q).tolist() == [False, True, True, False]
    assert INTERPRET["invert"](p).tolist() == [False, False, True, True]
    i = np.array([6, 5, -1], np.int32)
    assert INTERPRET["and_"](i, 3).tolist() == [2, 1, 3]
    assert INTERPRET["invert"](i).tolist() == [-7, -6, 0]
    with pytest.raises(WSUsageError, match="boolean or integer"):
        INTERPRET["and_"](np.float32([1.0]), p[:1])


def test_where_broadcasts_and_keeps_nan_and_inf():
    cond = np.array([[True, False, True]])
    x = np.array([[np.nan, 1.0, -np.inf], [2.0, np.inf, -0.0]], np.float32)
    got = INTERPRET["where"](cond, x, -np.inf)
    assert got.dtype == np.float32 and got.shape == (2, 3)
    want = np.where(cond, x, np.float32(-np.inf))
    assert np.array_equal(got, want, equal_nan=True)
    assert np.signbit(INTERPRET["where"](np.array([True]), np.float32([-0.0]), 1.0))[0]
    # the language's promotion (as typing and the GPU): an int tile with a float scalar
    got = INTERPRET["where"](np.array([True, False]), np.int32([3, 4]), 0.5)
    assert got.dtype == np.float32 and got.tolist() == [3.0, 0.5]
    # a bf16 scalar rounds once
    bf = to_bfloat16(np.float32([1.0, 2.0]))
    got = INTERPRET["where"](np.array([False, True]), bf, 1.00390625)
    assert got.dtype == bf.dtype and got[0] == to_bfloat16(1.00390625)
    with pytest.raises(WSUsageError, match="boolean tile"):
        INTERPRET["where"](np.float32([1.0]), x, 0.0)


def _load(x, offsets, shape, mask=None, other=0):
    return INTERPRET["load"](x, offsets, shape, mask, other)


def test_masked_load_reads_other_outside_and_where_masked():
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    mask = np.array([[True, False, True, False, True, False]])
    for other in (-np.inf, np.inf, np.nan, 2.5, 0):
        got = _load(x, (2, 1), (3, 6), mask, other)
        want = np.full((3, 6), other, np.float32)
        want[:2, :4] = x[2:, 1:]
        want = np.where(mask, want, np.float32(other))
        assert np.array_equal(got, want, equal_nan=True), other
    # without a mask: ``other`` past the edges only; the default is today's 0
    assert np.array_equal(_load(x, (3, 3), (2, 3), None, -1),
                          [[18, 19, -1], [-1, -1, -1]])
    assert np.array_equal(_load(x, (3, 3), (2, 3)), [[18, 19, 0], [0, 0, 0]])
    # negative offsets, a window wholly outside, an all-false mask, an empty array
    assert np.array_equal(_load(x, (-1, 0), (2, 2), None, 7), [[7, 7], [0, 1]])
    assert np.isnan(_load(x, (10, 10), (2, 2), None, np.nan)).all()
    assert (_load(x, (0, 0), (4, 5), np.zeros((4, 5), bool), -3) == -3).all()
    assert (_load(np.zeros((0, 5), np.float32), (0, 0), (2, 5), None, -np.inf)
            == -np.inf).all()
    # other in the array's dtype: an int array, a bf16 array (one rounding)
    assert _load(np.int32([1, 2]), (0,), (4,), None, -7).tolist() == [1, 2, -7, -7]
    bf = to_bfloat16(np.float32([1.0]))
    assert _load(bf, (0,), (2,), None, 1.00390625)[1] == to_bfloat16(1.00390625)


def test_masked_load_rejects_bad_masks():
    x = np.zeros((4, 4), np.float32)
    with pytest.raises(WSUsageError, match="boolean tile"):
        _load(x, (0, 0), (4, 4), np.ones((4, 4), np.float32))
    with pytest.raises(WSUsageError, match="does not broadcast"):
        _load(x, (0, 0), (4, 4), np.ones((4, 3), bool))
    with pytest.raises(WSUsageError, match="other must be a scalar"):
        _load(x, (0, 0), (4, 4), None, np.zeros(4))


def test_masked_store_writes_only_inside_and_where_true():
    y = np.full((3, 4), np.nan, np.float32)
    tile = np.arange(8, dtype=np.float32).reshape(2, 4) + 1
    INTERPRET["store"](y, (2, 1), tile, np.array([[True, False, True, True]]))
    assert np.isnan(y[:2]).all() and np.isnan(y[2, [0, 2]]).all()
    assert y[2, 1] == 1 and y[2, 3] == 3
    before = y.copy()
    INTERPRET["store"](y, (0, 0), tile, np.zeros((2, 4), bool))      # all false
    INTERPRET["store"](y, (5, 0), tile, np.ones((2, 1), bool))       # wholly outside
    assert np.array_equal(y, before, equal_nan=True)
    with pytest.raises(WSUsageError, match="does not broadcast"):
        INTERPRET["store"](y, (0, 0), tile, np.ones((3, 4), bool))


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_kernel_matches_float64_reference(case, seed):
    args, grid = case.make(np.random.default_rng(seed))
    launch, outs = km.host_args(args)
    ws.jit(case.kernel)[grid](*launch, **case.meta)
    for i, (out, base) in enumerate(outs):
        out.check(base, f"{case.name} output {i} (seed {seed})")


def test_partial_output_check_can_fail():
    """The masked-store reference check fails on a write where the mask is False."""
    out = km.Partial((2, 2), "float32", np.array([[1.0, np.nan], [2.0, 3.0]]), how="exact")
    base, view = out.host()
    view[:] = [[1.0, 5.0], [2.0, 3.0]]
    with pytest.raises(AssertionError, match="written where they should not"):
        out.check(base)
    view[0, 1] = np.nan
    out.check(base)


# == typing errors ========================================================================

def _line_of(fn, marker):
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, text in enumerate(lines) if marker in text]
    assert len(hits) == 1, (marker, hits)
    return hits[0]


def bad_arange_runtime(x, y, n, B: ws.constexpr):
    ws.store(y, (0,), ws.load(x, (0,), (B,)) * ws.arange(0, n))  # MARK


def bad_arange_empty(x, y, B: ws.constexpr):
    ws.store(y, (0,), ws.load(x, (0,), (B,)) * ws.arange(B, 0))  # MARK


def bad_index(x, y, B: ws.constexpr):
    t = ws.load(x, (0,), (B,))
    ws.store(y, (0,), t[0] + t)  # MARK


def bad_view_2d(x, y, B: ws.constexpr):
    t = ws.load(x, (0, 0), (B, B))
    ws.store(y, (0, 0), t[:, None])  # MARK


def bad_and_float(x, y, B: ws.constexpr):
    t = ws.load(x, (0, 0), (B, B))
    ws.store(y, (0, 0), t & (t > 0))  # MARK


def bad_where_cond(x, y, B: ws.constexpr):
    t = ws.load(x, (0, 0), (B, B))
    ws.store(y, (0, 0), ws.where(t, t, 0.0))  # MARK


def bad_load_mask_dtype(x, y, B: ws.constexpr):
    t = ws.load(x, (0, 0), (B, B), mask=ws.arange(0, B))  # MARK
    ws.store(y, (0, 0), t)


def bad_load_mask_shape(x, y, B: ws.constexpr):
    t = ws.load(x, (0, 0), (B, B), mask=ws.arange(0, 32) < 3)  # MARK
    ws.store(y, (0, 0), t)


def bad_load_other(x, y, B: ws.constexpr):
    t = ws.load(x, (0, 0), (B, B))
    ws.store(y, (0, 0), ws.load(x, (0, 0), (B, B), other=t))  # MARK


def bad_store_mask(x, y, B: ws.constexpr):
    t = ws.load(x, (0, 0), (B, B))
    ws.store(y, (0, 0), t, mask=ws.arange(0, B)[:, None] < ws.arange(0, 32)[None, :])  # MARK


def bad_expand_axis(x, y, B: ws.constexpr):
    t = ws.load(x, (0,), (B,))
    ws.store(y, (0, 0), ws.expand_dims(t, 2))  # MARK


def bad_broadcast_to(x, y, B: ws.constexpr):
    t = ws.load(x, (0,), (B,))
    ws.store(y, (0, 0), ws.broadcast_to(t, (B, 3)))  # MARK


def bad_compare(x, y, B: ws.constexpr):
    t = ws.load(x, (0, 0), (B, B))
    ws.store(y, (0, 0), ws.where(t < (1, 2), t, 0.0))  # MARK


ERRORS = [
    (bad_arange_runtime, r"arange\(end\) must be a compile-time constant int"),
    (bad_arange_empty, r"arange\(start, end\) needs end > start.*arange\(64, 0\)"),
    (bad_index, r"a tile can only be indexed as x\[:, None\] or x\[None, :\]"),
    (bad_view_2d, r"a tile can only be indexed as x\[:, None\].*64x64"),
    (bad_and_float, r"& needs integer \(or bool\) operands|& needs boolean or integer"),
    (bad_where_cond, r"cond must be a boolean tile"),
    (bad_load_mask_dtype, r"load\(mask\) must be a boolean tile"),
    (bad_load_mask_shape, r"load\(mask\).*broadcast"),
    (bad_load_other, r"load\(other\) must be a scalar"),
    (bad_store_mask, r"store\(mask\)|cannot broadcast"),
    (bad_expand_axis, r"expand_dims\(axis\) must be 0, 1 or -1"),
    (bad_broadcast_to, r"broadcast_to: a \(64,\) tile does not broadcast to \(64, 3\)"),
    (bad_compare, r"cannot compare a tile with"),
]


def _error_args(fn):
    params = list(inspect.signature(fn).parameters)
    one_d = fn in (bad_arange_runtime, bad_arange_empty, bad_index)
    x = np.zeros(64 if one_d or fn in (bad_expand_axis, bad_broadcast_to) else (64, 64),
                 np.float32)
    y = np.zeros(64 if one_d else (64, 64), np.float32)
    return (x, y, 5) if "n" in params else (x, y)


@pytest.mark.parametrize("fn,pattern", ERRORS, ids=[f.__name__ for f, _ in ERRORS])
def test_typing_errors_name_the_kernel_line(fn, pattern):
    with pytest.raises(WSCompileError) as info:
        ws.jit(fn).inspect_ptx(*_error_args(fn), B=64)
    text = str(info.value)
    assert re.search(pattern, text, re.S), text
    line = _line_of(fn, "# MARK")
    assert f"line {line}:" in text, text
    assert info.value.loc is not None and info.value.loc.line == line


def arange_not_pow2(x, y, B: ws.constexpr):
    ws.store(y, (0,), ws.load(x, (0,), (B,)) * ws.arange(0, B))  # MARK


def test_non_power_of_two_arange_is_a_clear_gpu_error():
    x = np.zeros(100, np.float32)
    with pytest.raises(WSCompileError, match="power-of-two") as info:
        ws.jit(arange_not_pow2).inspect_ptx(x, x, B=100, num_consumer_groups=1)
    assert info.value.loc.line == _line_of(arange_not_pow2, "# MARK")
    assert "tile of line" in str(info.value)
    y = np.zeros(100, np.float32)                   # the interpreter takes any length
    ws.jit(arange_not_pow2)[(1,)](np.ones(100, np.float32), y, B=100)
    assert np.array_equal(y, np.arange(100))


# == the compiled program: simulator, splits, PTX =========================================

def numpy_args(case):
    args, grid = case.make(np.random.default_rng(15))
    launch, _ = km.host_args(args)
    return launch, grid


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_verify_is_clean_and_equals_the_interpreter(case, groups):
    args, grid = numpy_args(case)
    report = ws.verify(case.kernel, grid, *args, seeds=2, max_programs=4, exact=case.exact,
                       num_consumer_groups=groups, **case.meta)
    assert report.ok, str(report)
    assert report.comparison.startswith("bitwise" if case.exact else "within")


#: cases whose work two consumer groups split (rows, or M of the dots): index tiles and
#: masks in the split class get each group's slice (data_partition.split_index_sources)
SPLIT = {"linear_index-s5": "rows", "masked_store_rows-5": "rows", "broadcast_sum": "rows",
         "softmax_masked-float32-N100": "rows", "masked_copy-float32-nan": "rows",
         "gemm_tril": "M", "gemm_store_mask-250": "M",
         "causal_attention-h2-s256-d64-128x64": "M"}


@pytest.mark.parametrize("name", list(SPLIT))
def test_two_groups_split_the_masked_work(name):
    case = km.CASES[name]
    args, _ = numpy_args(case)
    with warnings.catch_warnings():
        warnings.simplefilter("error")         # no PartitionFallbackWarning
        text = str(ws.jit(case.kernel).explain(*args, num_consumer_groups=2, **case.meta))
    want = "split along M" if SPLIT[name] == "M" else "split along the rows"
    assert want in text, text


def check_ptx(case, groups, target, tmp_path):
    args, _ = numpy_args(case)
    ptx = ws.jit(case.kernel).inspect_ptx(*args, cc=TARGETS[target],
                                          num_consumer_groups=groups, **case.meta)
    assert f".target {target}" in ptx
    assert ".local" not in ptx, "a register tile went to local memory"
    log = assemble(ptx, tmp_path, target)
    if case.gemm:
        regs, spills, _ = resources(log)
        assert spills == [0, 0], f"{case.name}: {regs} registers, spills {spills}\n{log}"
    return ptx


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("case", FIRST, ids=[c.name for c in FIRST])
def test_ptx_assembles(case, groups, target, tmp_path):
    check_ptx(case, groups, target, tmp_path)


@pytest.mark.parametrize("groups,target", [(1, "sm_90a"), (2, "sm_80")])
@pytest.mark.parametrize("case", OTHERS, ids=[c.name for c in OTHERS])
def test_ptx_assembles_other_cases(case, groups, target, tmp_path):
    check_ptx(case, groups, target, tmp_path)


def plain_copy(x, y, BM: ws.constexpr, BN: ws.constexpr):
    row = ws.program_id(0) * BM
    ws.store(y, (row, 0), ws.load(x, (row, 0), (BM, BN)))


def copy_default_keywords(x, y, BM: ws.constexpr, BN: ws.constexpr):
    row = ws.program_id(0) * BM
    ws.store(y, (row, 0), ws.load(x, (row, 0), (BM, BN), mask=None, other=0), mask=None)


def copy_other(x, y, BM: ws.constexpr, BN: ws.constexpr):
    row = ws.program_id(0) * BM
    ws.store(y, (row, 0), ws.load(x, (row, 0), (BM, BN), other=-1.0))


def _mangling_free(ptx):
    return re.sub(r"\b\w*(plain_copy|copy_default_keywords)\w*", "K", ptx)


def test_unmasked_loads_compile_as_before():
    """``mask=None, other=0`` is today's load: the same PTX as no keywords (no bounds,
    no select); a nonzero ``other`` adds the consumer's compares and selects."""
    x = np.zeros((256, 64), np.float32)
    plain = ws.jit(plain_copy).inspect_ptx(x, x, BM=64, BN=64)
    same = ws.jit(copy_default_keywords).inspect_ptx(x, x, BM=64, BN=64)
    assert _mangling_free(plain) == _mangling_free(same)
    other = ws.jit(copy_other).inspect_ptx(x, x, BM=64, BN=64)
    assert other.count("selp.") > plain.count("selp.")


def test_gemm_store_mask_predicates_each_store(tmp_path):
    """A masked accumulator store: a warp whose mask holds everywhere (one
    ``vote.sync.all`` in the shared consumer body) takes the 16-byte epilogue, the others the
    bounds-checked path with the mask in each predicate; the unmasked one is the tuned
    epilogue alone."""
    masked = km.CASES["gemm_store_mask-250"]
    ptx = check_ptx(masked, 2, "sm_90a", tmp_path)
    assert len(re.findall(r"\bvote\.sync\.all\.pred\b", ptx)) == 1    # the shared body
    stores = re.findall(r"\bst(?:\.global)?\.[\w.]+", ptx)
    assert sorted(set(stores)) == ["st.global.v4.u32", "st.u16"], sorted(set(stores))
    assert stores.count("st.u16") == 64            # 64 elements a thread, one body
    plain = kt.CASES["gemm_bias_relu"]      # fp16 out, unmasked: the 16-byte epilogue
    args, _ = plain.make(np.random.default_rng(0))
    launch, _ = kt.host_args(args)
    # the unmasked kernel's direct epilogue (tma_store=3 would stage its store)
    assert "st.global.v4" in ws.jit(plain.kernel).inspect_ptx(*launch, **plain.meta,
                                                              tma_store=0)


def test_boolean_tile_converted_through_scratch(tmp_path):
    """``ws.trans`` of a boolean register tile must change layout: its i1 registers go
    through the scratch region as 16-bit words (issue 15)."""
    ptx = check_ptx(km.CASES["where_transposed"], 1, "sm_90a", tmp_path)
    assert re.search(r"st\.shared(\.v\d)?\.b16", ptx)
    assert re.search(r"bar\.sync\s+%r\d+, 128", ptx)
