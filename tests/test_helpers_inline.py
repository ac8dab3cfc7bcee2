"""Helper functions inlined into kernels, ``ws.static_range`` unrolled, scalar loads
(issue 15 item 5): the interpreter against float64 NumPy, ``ws.verify`` (the compiled,
partitioned program simulated against the interpreter), PTX through ptxas for sm_90a and
sm_80, and the errors: inside helpers they name the helper's line and the call site."""
import inspect
import re
import traceback

import numpy as np
import pytest

import numba_ws as ws
from numba.cuda.core import ir
from numba_ws.errors import WSCompileError, WSUsageError
import helpers_inline_lib as hl
from ptx_tools import assemble

RNG = np.random.default_rng(15)


def _f16(*shape):
    return RNG.standard_normal(shape).astype(np.float16)


def _gemm_case():
    a, b = _f16(200, 128), _f16(128, 256)
    c = np.full((200, 256), np.nan, np.float16)
    return (a, b, c), dict(BM=128, BN=256, BK=64, ALPHA=0.1), (2, 1), \
        hl.gemm_helpers_ref(a, b, 0.1)


def _softmax_case(act="relu"):
    x, y = _f16(300, 64), _f16(300, 64)
    out = np.full((300, 64), np.nan, np.float32)
    return (x, y, out), dict(BM=128, BN=64, ACT=act), (3,), hl.two_softmaxes_ref(x, y, act)


def _unrolled_case():
    a = _f16(300, 256)
    c = np.full((300, 64), np.nan, np.float32)
    return (a, c), dict(BM=128, BN=64, NB=4), (3,), hl.unrolled_blocks_ref(a, 64, 4)


def _row_scale_case():
    a = _f16(300, 64)
    scale = RNG.standard_normal(3).astype(np.float32)
    bias = np.array([0.75], np.float32)
    c = np.full((300, 64), np.nan, np.float32)
    return (a, scale, bias, c), dict(BM=128, BN=64), (3,), \
        hl.row_scale_ref(a, scale, bias, 128)


CASES = {"gemm_helpers": (hl.gemm_helpers, _gemm_case),
         "two_softmaxes": (hl.two_softmaxes, _softmax_case),
         "unrolled_blocks": (hl.unrolled_blocks, _unrolled_case),
         "row_scale": (hl.row_scale, _row_scale_case)}


def _out(args):
    return args[-1]


@pytest.mark.parametrize("name", sorted(CASES))
def test_interpreter_matches_float64(name):
    fn, case = CASES[name]
    args, meta, grid, ref = case()
    ws.jit(fn)[grid](*args, **meta)
    out = _out(args).astype(np.float64)
    assert not np.isnan(out).any()
    tol = 2e-2 if _out(args).dtype == np.float16 else 1e-5
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * np.abs(ref).max())


@pytest.mark.parametrize("name,groups", [(n, 2) for n in sorted(CASES)]
                         + [("two_softmaxes", 1), ("gemm_helpers", 1)])
def test_verify_compiled_program_agrees_with_interpreter(name, groups):
    fn, case = CASES[name]
    args, meta, grid, _ = case()
    if name == "gemm_helpers" and groups == 1:
        meta, grid = dict(meta, BN=128), (2, 2)     # one group holds a 128x128 accumulator
    report = ws.verify(ws.jit(fn), grid, *args, num_consumer_groups=groups, **meta)
    assert report.ok, str(report)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_ptx_assembles(name, arch, tmp_path):
    fn, case = CASES[name]
    args, meta, _, _ = case()
    cc = (9, 0) if arch == "sm_90a" else (8, 0)
    ptx = ws.jit(fn).inspect_ptx(*args, cc=cc, **meta)
    log = assemble(ptx, tmp_path, arch)
    assert "0 bytes spill stores" in log
    if name == "gemm_helpers":
        assert ("wgmma.mma_async" in ptx) == (arch == "sm_90a")


def test_helper_called_twice_gets_its_own_variables():
    """Each call of softmax_rows is inlined with its own variables (numba's inliner names
    them <helper>_v<id>_<name>, one id per call site)."""
    (x, y, out), meta, _, _ = _softmax_case(act="none")
    state = ws.jit(hl.two_softmaxes).partition(x, y, out, **meta)
    names = {s.target.name for blk in state.func_ir.blocks.values() for s in blk.body
             if isinstance(s, ir.Assign)}
    copies = {m.group(1) for n in names for m in [re.search(r"softmax_rows_v(\d+)_", n)] if m}
    assert len(copies) == 2, sorted(n for n in names if "softmax_rows" in n)
    nested = {m.group(1) for n in names for m in [re.search(r"row_max_v(\d+)_", n)] if m}
    assert len(nested) == 2      # row_max, called by softmax_rows: once per copy


def test_constexpr_passed_to_a_helper_decides_its_branches(tmp_path):
    """activation(x, ACT) has an ill-typed branch; ACT reaches the helper as a copy of the
    kernel's constexpr, so the untaken branches are folded away inside the helper."""
    for act in ("relu", "none"):
        args, meta, _, _ = _softmax_case(act)
        assemble(ws.jit(hl.two_softmaxes).inspect_ptx(*args, **meta), tmp_path)


def test_cache_key_covers_the_helpers_sources(tmp_path):
    """Editing a helper (same kernel source) changes the on-disk cache key."""
    import importlib.util
    from numba_ws.runtime.sources import called_sources
    from numba_ws.runtime.binding import bind
    from numba_ws.runtime.specialize import cache_key
    assert {n.rsplit(".", 1)[1] for n, _ in called_sources(hl.gemm_helpers)} == {
        "leaky", "scale_shift", "leaky_affine", "doubled"}
    keys = []
    for factor in ("2.0", "3.0"):
        path = tmp_path / f"mod_{factor[0]}.py"
        path.write_text("import numba_ws as ws\n\n"
                        f"def helper(x):\n    return x * {factor}\n\n"
                        "def kernel(a, c, BM: ws.constexpr):\n"
                        "    ws.store(c, (0,), helper(ws.load(a, (0,), (BM,))))\n")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        key, on_disk = cache_key(mod.kernel, [], bind(mod.kernel, (None, None), {"BM": 64}),
                                 (9, 0), {})
        assert on_disk
        keys.append(key)
    assert keys[0] != keys[1]


def _with_defaults(x, s=2.0, t=0.0):
    return x * s + t


def _make_scaler(k):
    def scaled(x):
        return x * k                       # k: a closure cell (a FreeVar when inlined)
    return scaled


_triple = _make_scaler(3.0)


def _keywords_kernel(a, c, BM: ws.constexpr):
    x = ws.load(a, (0, 0), (BM, BM)).astype(ws.float32)
    y = _with_defaults(x, t=1.0) + hl.scale_shift(x, t=-1.0, s=3.0) + _triple(x)
    ws.store(c, (0, 0), y)


def test_keywords_defaults_and_closures(tmp_path):
    a = _f16(64, 64)
    c = np.full((64, 64), np.nan, np.float32)
    ws.jit(_keywords_kernel)[(1,)](a, c, BM=64)
    # (2x + 1) + (3x - 1) + 3x in float32: the +1 / -1 cancel, leaving roundings of
    # values near 1 (a few float32 ulps of 1, absolute) on small x
    np.testing.assert_allclose(c, 8.0 * a.astype(np.float64), rtol=1e-6, atol=1e-6)
    assert ws.verify(ws.jit(_keywords_kernel), (1,), a, c, BM=64).ok
    assemble(ws.jit(_keywords_kernel).inspect_ptx(a, c, BM=64), tmp_path)


# --- errors inside helpers -----------------------------------------------------------

def _line_of(fn, marker):
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, text in enumerate(lines) if marker in text]
    assert len(hits) == 1, (marker, hits)
    return hits[0]


def _lines_named(text):
    return [(path, int(line)) for path, line in re.findall(r'File "([^"]+)", line (\d+):', text)]


def test_typing_error_in_helper_names_helper_line_and_call_sites():
    """ACT="ill_typed": the error is at activation's ws.trans line, inlined at the
    kernel's call, and err.loc is the helper's line."""
    args, meta, _, _ = _softmax_case("ill_typed")
    with pytest.raises(WSCompileError) as info:
        ws.jit(hl.two_softmaxes).inspect_ptx(*args, **meta)
    text = str(info.value)
    assert text.startswith("[numba-cuda] ws.trans") or "trans(x) must be a 2-D tile" in text
    helper_line = _line_of(hl.activation, "# ill-typed")
    call_line = _line_of(hl.two_softmaxes, "activation(softmax_rows(v), ACT)")
    assert _lines_named(text) == [(hl.__file__, helper_line), (hl.__file__, call_line)]
    assert "(in helper activation(), called from)" in text
    assert info.value.loc.line == helper_line


def _inner_bad(x):
    return ws.exp(ws.program_id(0))      # inner error


def _outer_bad(x):
    return _inner_bad(x) + 1.0           # outer call


def _calls_nested_bad(a, c, BM: ws.constexpr):
    x = ws.load(a, (0, 0), (BM, BM)).astype(ws.float32)
    ws.store(c, (0, 0), _outer_bad(x))   # kernel call


def test_error_in_nested_helper_lists_every_call_site():
    a, c = np.zeros((64, 64), np.float16), np.zeros((64, 64), np.float32)
    with pytest.raises(WSCompileError) as info:
        ws.jit(_calls_nested_bad).inspect_ptx(a, c, BM=64)
    text = str(info.value)
    assert "ws.exp(x): x must be a tile" in text
    assert _lines_named(text) == [(__file__, _line_of(_inner_bad, "# inner error")),
                                  (__file__, _line_of(_outer_bad, "# outer call")),
                                  (__file__, _line_of(_calls_nested_bad, "# kernel call"))]
    assert text.index("in helper _inner_bad()") < text.index("in helper _outer_bad()")


def _wrong_arity(a, c, BM: ws.constexpr):
    x = ws.load(a, (0, 0), (BM, BM)).astype(ws.float32)
    ws.store(c, (0, 0), hl.leaky(x))    # ALPHA missing


def test_helper_called_with_wrong_arguments_is_an_error_at_the_call():
    a, c = np.zeros((64, 64), np.float16), np.zeros((64, 64), np.float32)
    with pytest.raises(WSCompileError, match=r"helper leaky\(x, ALPHA\): missing a required "
                       r"argument: 'ALPHA'") as info:
        ws.jit(_wrong_arity).inspect_ptx(a, c, BM=64)
    assert _lines_named(str(info.value)) == [(__file__, _line_of(_wrong_arity, "# ALPHA"))]
    with pytest.raises(TypeError, match="ALPHA"):      # the interpreter: Python's own
        ws.jit(_wrong_arity)[(1,)](a, c, BM=64)


def _recursive(x, n):
    return _recursive(x * 0.5, n)          # recursion


def _calls_recursive(a, c, BM: ws.constexpr):
    x = ws.load(a, (0, 0), (BM, BM)).astype(ws.float32)
    ws.store(c, (0, 0), _recursive(x, 3))


def test_recursive_helper_is_refused():
    a, c = np.zeros((64, 64), np.float16), np.zeros((64, 64), np.float32)
    with pytest.raises(WSCompileError, match=r"helper _recursive\(\) calls itself") as info:
        ws.jit(_calls_recursive).inspect_ptx(a, c, BM=64)
    assert _lines_named(str(info.value))[0] == (__file__, _line_of(_recursive, "# recursion"))


def _helper_raises(x):
    return x + ws.program_id(7)            # no grid axis 7


def _calls_raising_helper(a, c, BM: ws.constexpr):
    x = ws.load(a, (0, 0), (BM, BM))
    ws.store(c, (0, 0), _helper_raises(x))


def test_interpreter_runs_helpers_as_python_frames():
    """In the interpreter a helper is an ordinary call: its error's traceback has the
    helper's frame and line."""
    a, c = np.zeros((64, 64), np.float16), np.zeros((64, 64), np.float16)
    with pytest.raises(WSUsageError) as info:
        ws.jit(_calls_raising_helper)[(1,)](a, c, BM=64)
    frames = [(f.name, f.lineno) for f in traceback.extract_tb(info.value.__traceback__)]
    assert ("_helper_raises", _line_of(_helper_raises, "# no grid axis 7")) in frames


def test_jit_kernel_called_as_a_function_outside_a_kernel_needs_a_grid():
    with pytest.raises(WSUsageError, match=r"launch doubled with a grid"):
        hl.doubled(np.ones(3))


# --- ws.static_range -----------------------------------------------------------------

def _static_fold(a, c, BM: ws.constexpr, BN: ws.constexpr, NB: ws.constexpr):
    acc = ws.zeros((BM, BN), ws.float32)
    for j in ws.static_range(NB):
        if j == NB:
            acc = ws.trans(ws.program_id(0))   # ill-typed, never taken: folded per copy
        acc = acc + ws.load(a, (0, j * BN), (BM, BN)).astype(ws.float32) * (j + 1)
    ws.store(c, (0, 0), acc)


def _static_nested_break(a, c, BM: ws.constexpr, BN: ws.constexpr):
    acc = ws.zeros((BM, BN), ws.float32)
    for i in ws.static_range(1, 7, 3):           # 1, 4
        for j in ws.static_range(3, 0, -1):      # 3, 2, 1
            if j == 1 and i == 4:
                break
            if i == j:
                continue
            acc = acc + ws.load(a, (0, (i + j) * BN), (BM, BN)).astype(ws.float32) * i
    ws.store(c, (0, 0), acc)


def _nested_break_ref(a, bn):
    acc = np.zeros((a.shape[0], bn))
    for i in range(1, 7, 3):
        for j in range(3, 0, -1):
            if j == 1 and i == 4:
                break
            if i == j:
                continue
            acc += a[:, (i + j) * bn:(i + j + 1) * bn].astype(np.float64) * i
    return acc


@pytest.mark.parametrize("kernel", ["fold", "nested_break"])
def test_static_range_interpreter_verify_and_ptx(kernel, tmp_path):
    a = _f16(64, 8 * 32)
    c = np.full((64, 32), np.nan, np.float32)
    if kernel == "fold":
        fn, meta = _static_fold, dict(BM=64, BN=32, NB=4)
        ref = sum(a[:, j * 32:(j + 1) * 32].astype(np.float64) * (j + 1) for j in range(4))
    else:
        fn, meta = _static_nested_break, dict(BM=64, BN=32)
        ref = _nested_break_ref(a, 32)
    ws.jit(fn)[(1,)](a, c, **meta)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)
    assert ws.verify(ws.jit(fn), (1,), a, c, **meta).ok
    for cc, arch in (((9, 0), "sm_90a"), ((8, 0), "sm_80")):
        assemble(ws.jit(fn).inspect_ptx(a, c, cc=cc, **meta), tmp_path, arch)


def test_static_range_is_unrolled_before_typing():
    """After the front end no loop is left: the partitioned IR of _static_fold has no
    back edge, and each copy's load reads its own constant column offset."""
    a, c = _f16(64, 8 * 32), np.zeros((64, 32), np.float32)
    state = ws.jit(_static_fold).partition(a, c, BM=64, BN=32, NB=4)
    from numba.cuda.core.analysis import compute_cfg_from_blocks
    assert not compute_cfg_from_blocks(state.func_ir.blocks).loops()


def _static_runtime_bound(a, c, BM: ws.constexpr):
    acc = ws.zeros((BM, BM), ws.float32)
    for j in ws.static_range(a.shape[1] // BM):    # runtime bound
        acc = acc + ws.load(a, (0, j * BM), (BM, BM)).astype(ws.float32)
    ws.store(c, (0, 0), acc)


def _static_not_in_loop(a, c, BM: ws.constexpr):
    r = ws.static_range(BM)                         # not a loop
    ws.store(c, (0, 0), ws.zeros((BM, BM), ws.float32))


def test_static_range_errors_name_the_line():
    a, c = np.zeros((64, 128), np.float16), np.zeros((64, 64), np.float32)
    with pytest.raises(WSCompileError, match=r"ws.static_range: bound 0 is not a "
                       r"compile-time int \(got a runtime value\)") as info:
        ws.jit(_static_runtime_bound).inspect_ptx(a, c, BM=64)
    assert _lines_named(str(info.value)) == [
        (__file__, _line_of(_static_runtime_bound, "# runtime bound"))]
    with pytest.raises(WSCompileError, match=r"only allowed as the iterable of a for "
                       r"loop") as info:
        ws.jit(_static_not_in_loop).inspect_ptx(a, c, BM=64)
    assert _lines_named(str(info.value)) == [
        (__file__, _line_of(_static_not_in_loop, "# not a loop"))]


def test_static_range_in_the_interpreter_is_range():
    assert list(ws.static_range(2, 9, 3)) == [2, 5, 8]
    with pytest.raises(WSUsageError, match=r"1 to 3 int bounds, got \(2.0,\)"):
        ws.static_range(2.0)


# --- scalar loads --------------------------------------------------------------------

def test_scalar_loads_are_numba_indexing_on_the_gpu_path():
    """scale[pid] / bias[0] in row_scale: plain ld.global of f32 in the PTX."""
    args, meta, _, _ = _row_scale_case()
    ptx = ws.jit(hl.row_scale).inspect_ptx(*args, **meta)
    assert re.search(r"ld\.global(\.nc)?\.f32", ptx)


def test_loads_in_a_helper_name_the_kernel_parameter():
    """The helper's argument is a copy of the kernel's ``a``: the channel member (tensor
    maps, array_info) must say ``a``, not the copy's name (the H200 failed the launch
    with "'blocks_sum_v18_a' is not in list", 2026-12-03)."""
    a, c = np.zeros((300, 256), np.float16), np.zeros((300, 64), np.float32)
    plan = ws.jit(hl.unrolled_blocks).partition(a, c, BM=128, BN=64, NB=4).ws
    members = [m for ch in plan.channels for m in ch.members]
    assert len(members) == 8 and {m["array"] for m in members} == {"a"}
    assert all(m["why"] == "TMA: contiguous, aligned" for m in members)
