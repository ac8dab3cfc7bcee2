"""Branches on constexprs are decided before typing (passes/constexpr_branches.py): the
untaken side is never typed or lowered, for string, bool and int constexprs; string and
float constexprs are constants in the code, not kernel parameters."""
import re

import numpy as np
import pytest

import numba_ws as ws
from numba.cuda import types
from numba.cuda.compiler import run_frontend
from numba.cuda.core import ir
from numba.cuda.core.analysis import compute_cfg_from_blocks
from numba_ws.passes.constexpr_branches import fold_constexpr_tests
from numba_ws.runtime.launcher import ParamPacker
from numba_ws.runtime.specialize import launch_argtypes, omitted_positions
from ptx_tools import assemble


def matmul_act(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr,
               ACT: ws.constexpr):
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(a.shape[1], BK)):
        acc = ws.dot(ws.load(a, (0, k * BK), (BM, BK)), ws.load(b, (k * BK, 0), (BK, BN)),
                     acc)
    if ACT == "leaky_relu":
        acc = ws.maximum(acc, acc * 0.01)
    elif ACT == "typing_error":
        acc = ws.trans(ws.program_id(0))          # ill-typed: trans of an int
    else:
        acc = acc * 2.0
    ws.store(c, (0, 0), acc.astype(ws.float16))


def matmul_flags(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr,
                 RELU: ws.constexpr, SCALE: ws.constexpr):
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(a.shape[1], BK)):
        acc = ws.dot(ws.load(a, (0, k * BK), (BM, BK)), ws.load(b, (k * BK, 0), (BK, BN)),
                     acc)
    if RELU:
        acc = ws.maximum(acc, 0.0)
    else:
        acc = acc * SCALE
    if not RELU:
        acc = acc + 0.25
    if BK == 64 and BM > 64:
        acc = acc + 1.0
    elif BK in (8, 16):
        acc = ws.exp(BK)                          # ill-typed: exp of an int
    if RELU and BK == 128:
        acc = acc + ws.program_id(5)              # ill-typed: no grid axis 5
    ws.store(c, (0, 0), acc.astype(ws.float16))


def _gemm(seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((128, 128)).astype(np.float16)
    b = rng.standard_normal((128, 128)).astype(np.float16)
    return a, b, a.astype(np.float32) @ b.astype(np.float32)


def _interpret(kernel, a, b, **meta):
    c = np.full((a.shape[0], b.shape[1]), np.nan, np.float16)
    ws.jit(kernel)[(1,)](a, b, c, **meta)
    return c.astype(np.float32)


GEMM_META = dict(BM=128, BN=128, BK=64)


@pytest.mark.parametrize("act", ["leaky_relu", "none"])
def test_untaken_string_branch_is_not_typed(act, tmp_path):
    """Both values compile to PTX ptxas accepts although the third branch is ill-typed;
    only the taken branch is in the code (0.01 is its constant); the interpreter agrees."""
    a, b, ref = _gemm()
    c = np.zeros((128, 128), np.float16)
    ptx = ws.jit(matmul_act).inspect_ptx(a, b, c, ACT=act, **GEMM_META)
    assemble(ptx, tmp_path)
    assert ("0f3C23D70A" in ptx) == (act == "leaky_relu")        # 0.01f
    want = np.maximum(ref, ref * 0.01) if act == "leaky_relu" else 2 * ref
    np.testing.assert_allclose(_interpret(matmul_act, a, b, ACT=act, **GEMM_META), want,
                               rtol=1e-2, atol=5e-2)
    # the partitioned program (pruned before partitioning) agrees with the interpreter
    report = ws.verify(matmul_act, (1,), a, b, c, seeds=1, exact=False, ACT=act, **GEMM_META)
    assert report.ok, str(report)


def test_taken_ill_typed_branch_is_still_an_error_on_its_line():
    a, b, _ = _gemm()
    c = np.zeros((128, 128), np.float16)
    with pytest.raises(ws.WSCompileError,
                       match=r"(?s)trans\(x\) must be a 2-D tile.*test_constexpr_branches"
                             r"\.py.*acc = ws\.trans\(ws\.program_id\(0\)\)"):
        ws.jit(matmul_act).inspect_ptx(a, b, c, ACT="typing_error", **GEMM_META)


def test_string_constexpr_needs_no_driver(monkeypatch):
    """Typing ``ACT == "..."`` made numba-cuda compile a string-equality device function
    for the current device (CudaSupportError on a machine without a GPU): the test is
    folded before typing, so nothing asks for a device."""
    import numba.cuda.dispatcher as dispatcher

    def no_device():
        raise AssertionError("the compile asked for the current CUDA device")
    monkeypatch.setattr(dispatcher, "get_current_device", no_device)
    a, b, _ = _gemm()
    c = np.zeros((128, 128), np.float16)
    for act in ("leaky_relu", "none"):
        assert ".entry" in ws.jit(matmul_act).inspect_ptx(a, b, c, ACT=act, **GEMM_META)


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("bk", [64, 32])
def test_bool_and_int_constexpr_branches(relu, bk, tmp_path):
    """``if RELU:`` / ``if not RELU:`` / ``if BK == 64 and BM > 64:`` / ``elif BK in
    (...)``: the two ill-typed branches are never taken, so every combination compiles;
    the interpreter's result follows the taken branches."""
    a, b, ref = _gemm(1)
    meta = dict(BM=128, BN=128, BK=bk, RELU=relu, SCALE=0.5)
    c = np.zeros((128, 128), np.float16)
    assemble(ws.jit(matmul_flags).inspect_ptx(a, b, c, **meta), tmp_path)
    want = np.maximum(ref, 0.0) if relu else 0.5 * ref + 0.25
    if bk == 64:
        want = want + 1.0
    np.testing.assert_allclose(_interpret(matmul_flags, a, b, **meta), want,
                               rtol=1e-2, atol=5e-2)


def test_taken_ill_typed_bool_branch_is_an_error():
    a, b, _ = _gemm()
    c = np.zeros((128, 128), np.float16)
    with pytest.raises(ws.WSCompileError, match=r"(?s)axis must be 0, 1 or 2.*got 5.*"
                                                r"acc = acc \+ ws\.program_id\(5\)"):
        ws.jit(matmul_flags).inspect_ptx(a, b, c, BM=128, BN=128, BK=128, RELU=True,
                                         SCALE=1.0)


def _fold(fn, argtypes):
    fir = run_frontend(fn)
    return fir, fold_constexpr_tests(fir, tuple(argtypes))


def _calls(fir):
    """Names of the globals called anywhere in ``fir``."""
    names = set()
    for block in fir.blocks.values():
        for stmt in block.body:
            v = getattr(stmt, "value", None)
            if isinstance(v, ir.Expr) and v.op == "call":
                d = fir.get_definition(v.func)
                names.add(getattr(d, "name", None) or getattr(d, "attr", None))
    return names


def _chain(x, ACT, N):
    if ACT == "a":
        y = first(x)         # noqa: F821 (never run: the IR is only folded)
    elif ACT in ("b", "c"):
        y = second(x)        # noqa: F821
    else:
        y = third(x)         # noqa: F821
    z = N * 2
    if z == 8:               # known: z is computed from a constexpr only
        y = fourth(y)        # noqa: F821
    if x == 8:               # x is a runtime value: the branch stays
        y = fifth(y)         # noqa: F821
    return y


@pytest.mark.parametrize("act,live", [("a", "first"), ("b", "second"), ("c", "second"),
                                      ("d", "third")])
def test_fold_keeps_only_the_taken_side(act, live):
    fir, (folded, resolved) = _fold(_chain, [types.float64, types.Omitted(act),
                                             types.IntegerLiteral(4)])
    calls = _calls(fir)
    assert {live, "fourth", "fifth"} <= calls
    assert not ({"first", "second", "third"} - {live}) & calls
    assert resolved == 3 and folded >= resolved
    branches = [b.terminator for b in fir.blocks.values() if isinstance(b.terminator, ir.Branch)]
    assert len(branches) == 1
    # arithmetic on a constexpr is left for typing (its type is unchanged)
    assert any(isinstance(s, ir.Assign) and isinstance(s.value, ir.Expr)
               and s.value.op == "binop" and s.value.fn.__name__ == "mul"
               for blk in fir.blocks.values() for s in blk.body)


def _unknown(x, n, FLAG):
    if n == 3:
        x = x + 1
    if FLAG:
        x = x + 2
    return x


def test_runtime_tests_are_left_alone():
    fir, (_, resolved) = _fold(_unknown, [types.int64, types.int64, types.BooleanLiteral(True)])
    assert resolved == 1
    branches = [b.terminator for b in fir.blocks.values()
                if isinstance(b.terminator, ir.Branch)]
    assert len(branches) == 1   # the test on n (a runtime int) is still a branch


def test_string_and_float_constexprs_are_no_kernel_parameters():
    """ACT (a string) and SCALE (a float) are constants in the code: the PTX entry has
    the parameters of the arrays and int constexprs only, as the launch packer packs."""
    from numba_ws.runtime.specialize import argument_types, compile_kernel, make_plan
    a, b, _ = _gemm()
    c = np.zeros((128, 128), np.float16)
    k = ws.jit(matmul_flags)
    bound, described = k._static_bound((a, b, c), dict(GEMM_META, RELU=False, SCALE=0.5))
    argtypes = argument_types(k.fn, bound, lambda v, n: described[n])
    assert isinstance(argtypes[-1], types.Omitted) and argtypes[-1].value == 0.5
    art = compile_kernel(k.fn, argtypes, make_plan(k.fn, bound, (9, 0, "a")))
    entry = re.search(r"\.entry\s+\S+\s*\((.*?)\)", art.ptx, re.S).group(1)
    sizes = [int(w) // 8 for w in re.findall(r"\.param\s+\.[a-z](\d+)", entry)]
    assert ParamPacker(launch_argtypes(art.argtypes)).sizes == sizes
    assert "0f3F000000" in art.ptx                                     # 0.5f, inlined


def test_launch_drops_omitted_constexpr_values():
    """_Loaded.launch packs one value per kernel parameter: the omitted constexprs'
    positions are dropped, the tensor-map pointer appended (no GPU: a recording
    function stands in for the CUDA one)."""
    from numba_ws.runtime.jit import _Loaded
    from numba_ws.runtime.specialize import Artifact
    argtypes = [types.int64, types.Omitted("relu"), types.IntegerLiteral(64),
                types.Omitted(0.5), types.BooleanLiteral(True)]
    art = Artifact(ptx="", entry="k", argtypes=argtypes, num_threads=128, smem_bytes=0,
                   tmaps=[])
    loaded = _Loaded.__new__(_Loaded)
    loaded.art, loaded.tmap_slots, loaded.tmap_buffers = art, [], {}
    loaded.packer = ParamPacker(launch_argtypes(argtypes))
    loaded.omitted = omitted_positions(argtypes)
    assert loaded.omitted == {1, 3}
    launched = []

    class Function:
        def launch(self, dims, block, smem, stream, params):
            launched.append(params)
    loaded.function = Function()
    loaded.launch((1, 1, 1), 0, [7, 0, 64, 0, True])
    assert launched and loaded.packer.read_back() == [
        (7).to_bytes(8, "little"), (64).to_bytes(8, "little"), b"\x01", bytes(8)]


def _by_dtype(x, DT):
    if DT == ws.bfloat16:
        x = bf16_path(x)     # noqa: F821
    else:
        x = other_path(x)    # noqa: F821
    return x


@pytest.mark.parametrize("name,live", [("bfloat16", "bf16_path"), ("float16", "other_path")])
def test_dtype_constexpr_comparison(name, live):
    from numba_ws.language.types import DTypeType
    fir, (_, resolved) = _fold(_by_dtype, [types.float64, DTypeType(name)])
    assert resolved == 1 and _calls(fir) & {"bf16_path", "other_path"} == {live}


def _loop_with_flag(x, n, FLAG):
    for j in range(n):
        if FLAG:
            x = x + j
        else:
            x = x - j
        x = x * 2
    return x


@pytest.mark.parametrize("flag", [True, False])
def test_a_resolved_branch_in_a_loop_body_leaves_one_body_block(flag):
    """The taken side is merged with what comes before and after it: the loop body is one
    block again (the partitioner waits for every dot at a block with several
    predecessors, so a pruned ``if`` must not leave a join behind)."""
    fir, (_, resolved) = _fold(_loop_with_flag, [types.int64, types.int64,
                                                 types.BooleanLiteral(flag)])
    assert resolved == 1
    cfg = compute_cfg_from_blocks(fir.blocks)
    (loop,) = cfg.loops().values()
    body = set(loop.body) - {loop.header}
    assert len(body) == 1, sorted(body)
    (block,) = (fir.blocks[label] for label in body)
    ops = [s.value.fn.__name__ for s in block.body if isinstance(s, ir.Assign)
           and isinstance(s.value, ir.Expr) and s.value.op in ("binop", "inplace_binop")]
    assert ops == ["add" if flag else "sub", "mul"]


def _literal_flag(x, n):
    flag = False           # a helper's parameter after inlining is such a copy
    for j in range(n):
        if flag:
            x = x + j
        x = x * 2
    return x


def test_a_branch_on_a_literal_flag_is_decided_too():
    fir, (_, resolved) = _fold(_literal_flag, [types.int64, types.int64])
    assert resolved == 1
    cfg = compute_cfg_from_blocks(fir.blocks)
    (loop,) = cfg.loops().values()
    assert len(set(loop.body) - {loop.header}) == 1
    assert "add" not in [s.value.fn.__name__ for b in fir.blocks.values() for s in b.body
                         if isinstance(s, ir.Assign) and isinstance(s.value, ir.Expr)
                         and s.value.op == "binop"]
