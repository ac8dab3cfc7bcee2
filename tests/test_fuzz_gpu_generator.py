"""The GPU differential fuzzer (numba_ws/fuzz, issue 19 item 1) on the CPU.

- The generator is deterministic per seed and covers its families, configurations,
  dtypes, views and ops.
- Generated programs run in the interpreter, their error bounds exist, and ws.verify
  (schedule simulator on the partitioned IR) is clean for their configuration; a few
  compile to PTX that ptxas accepts.
- The error bounds are wide enough for the GPU's legitimate deviations (the ``noisy``
  device plants them at the modelled size) and narrow enough to catch a wrong answer
  (``noisy-bug`` swaps two rows of every stored 2-D tile).
- The comparison flags unwritten elements and writes past an output's end.
- The minimizer shrinks a program under a planted failure predicate.
- The pool survives a worker that crashes, hangs or raises, and the command line writes
  its JSON.
"""
import json
import math
import pathlib
import warnings

import numpy as np
import pytest

import numba_ws as ws
from numba_ws.fuzz import bounds, check, devices, generator, minimize
from numba_ws.fuzz.program import GUARD, INT_POISON, Program

SEEDS = range(24)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz_gpu_kernels")


def test_generation_is_deterministic_per_seed():
    for seed in (0, 7, 123, 4567):
        a, b = generator.generate(seed), generator.generate(seed)
        assert a.to_dict() == b.to_dict()
    sources = {generator.generate(s).source for s in range(50)}
    assert len(sources) == 50


def test_generator_covers_families_configs_dtypes_and_ops():
    programs = [generator.generate(s) for s in range(300)]
    assert {p.family for p in programs} == set(generator.FAMILY_FUNCS)
    assert {p.options["num_consumer_groups"] for p in programs} == {1, 2}
    assert {p.options["num_buffers_warp_spec"] for p in programs} == {1, 2, 3, 4}
    assert {p.cc for p in programs} == {"9.0a", "8.0"}
    assert any(p.options.get("dot_in_flight") for p in programs)
    dtypes = {a.dtype for p in programs for a in p.arrays}
    assert dtypes >= {"float16", "bfloat16", "float32", "float64", "int32", "int64"}
    assert {a.view for p in programs for a in p.arrays} == {"contig", "pitch16", "pitch4", "T"}
    text = "\n".join(p.source for p in programs)
    for op in ("ws.dot(", "ws.trans(", "ws.exp(", "ws.exp2(", "ws.log(", "ws.maximum(",
               "ws.max(", "ws.sum(", "ws.astype(", ".astype(", "ws.full(", "ws.zeros(",
               " / ", "(-", "ws.num_programs(0)", "ws.program_id(1)", "-math.inf"):
        assert op in text, op
    assert any("register A" in n for p in programs for n in p.notes)
    assert any(len(a.shape) == 1 for p in programs for a in p.arrays)
    # ragged shapes: extents that are no multiple of the tile
    assert any(p.arrays[0].shape[0] % p.constexprs.get("BM", p.constexprs.get("B", 1))
               for p in programs)


@pytest.mark.parametrize("seed", SEEDS)
def test_program_runs_in_interpreter_and_verify_is_clean(seed, folder):
    program = generator.generate(seed)
    result = devices.run_program(program, devices.Interp(), folder)
    assert result["outcome"] == "match", (program.source, result)
    launch = check.prepare(program, seed, folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # one-group fallbacks are warnings
        report = ws.verify(launch.fn, program.grid, *launch.positional(launch.views()),
                           seeds=1, exact=False, **program.meta)
    assert report.ok, f"\n{program.source}\n{report}"


@pytest.mark.parametrize("seed", [11, 12])
@pytest.mark.parametrize("family", sorted(generator.FAMILY_FUNCS))
def test_programs_of_each_family_compile_and_assemble(family, seed, folder):
    if devices.Ptx().ptxas is None:
        pytest.fail("ptxas is not on PATH (CI has CUDA 13.0's)")
    program = generator.generate(seed, family=family)
    result = devices.run_program(program, devices.Ptx(), folder)
    assert result["outcome"] == "compiled", (program.source, result)


def test_bounds_are_tight_and_cover_the_noisy_device(folder):
    noisy, differing, exact = devices.Noisy(), 0, 0
    for seed in range(30):
        result = devices.run_program(generator.generate(seed), noisy, folder)
        assert result["outcome"] == "match", result
        for out in result["compare"]:
            differing += out["max_err"] > 0
            exact += out["exact"]
            assert out["max_err"] <= out["bound_rel"] * max(out["max_ref"], 1e-300) * 1.02
    assert differing >= 10 and exact >= 5


def test_noisy_bug_is_caught(folder):
    bug, flagged, total = devices.Noisy(bug=True), 0, 0
    for seed in range(30):
        program = generator.generate(seed)
        if program.family == "vec":
            continue                              # 1-D tiles: no rows to swap
        total += 1
        flagged += devices.run_program(program, bug, folder)["outcome"] == "mismatch"
    assert flagged >= 0.8 * total


def test_flash_recurrence_has_finite_bounds(folder):
    """exp(m_i - m_new) with m_i = -inf at first: exactly 0 on both sides, so the bounds
    of the normalised output stay finite (and small)."""
    program = next(p for p in (generator.generate(s, family="attn") for s in range(40))
                   if "m_i = m_new" in p.source and "(acc / l_i)" in p.source)
    result = devices.run_program(program, devices.Interp(), folder)
    out = result["compare"][0]
    assert out["unchecked"] == 0 and 0 < out["bound_rel"] < 0.05


def _program(source, arrays, grid=(1,), constexprs=None):
    return Program(seed=1, name="k", family="test", source=source, arrays=arrays,
                   scalars={}, constexprs=constexprs or {}, options={}, grid=grid)


def test_compare_flags_unwritten_elements_and_guard_writes(folder):
    src = ("import numba_ws as ws\n\n\ndef k(x, y, BM: ws.constexpr):\n"
           "    ws.store(y, (0, 0), ws.exp(ws.load(x, (0, 0), (BM, BM))))\n")
    program = _program(src, [{"name": "x", "shape": (8, 8), "dtype": "float32"},
                             {"name": "y", "shape": (8, 8), "dtype": "float32", "role": "out"}],
                       constexprs={"BM": 8})
    launch = check.prepare(program, 0, folder)
    ref, tol = check.reference(launch), check.error_bounds(launch)
    assert np.all(tol["y"] > 0) and np.all(np.isfinite(tol["y"]))
    assert check.compare(launch, ref, ref, tol)["ok"]
    missing = {"y": ref["y"].copy()}
    missing["y"][3, 4] = np.nan
    res = check.compare(launch, ref, missing, tol)
    assert not res["ok"] and res["outputs"][0]["worst"]["index"] == [3, 4]
    assert res["outputs"][0]["worst"]["why"] == "not written by the device"
    past = {"y": ref["y"].copy()}
    past["y"][8 + GUARD - 1, 0] = 1.0
    assert check.compare(launch, ref, past, tol)["outputs"][0]["guard_written"] == 1
    off = {"y": ref["y"].copy()}
    off["y"][0, 0] *= 1 + 1e-3                    # far beyond exp's few ulps
    off["y"][5, 6] *= 1 + 1e-2                    # the worst element
    res = check.compare(launch, ref, off, tol)
    assert not res["ok"] and res["outputs"][0]["bad"] == 2
    assert res["outputs"][0]["worst"]["index"] == [5, 6]
    assert "worst at [5, 6]" in check.describe_mismatch(res)[0]


def test_exact_ops_get_zero_bounds_and_ints_poison(folder):
    src = ("import numba_ws as ws\n\n\ndef k(x, y, z, BM: ws.constexpr):\n"
           "    t = ws.load(x, (0, 0), (BM, BM))\n"
           "    ws.store(y, (0, 0), ws.maximum(-t, t * 2.0).astype(ws.float16))\n"
           "    ws.store(z, (0, 0), ws.trans(t.astype(ws.int32) + 3))\n")
    program = _program(src, [{"name": "x", "shape": (8, 8), "dtype": "float32", "lo": -9,
                              "hi": 9},
                             {"name": "y", "shape": (8, 8), "dtype": "float16", "role": "out"},
                             {"name": "z", "shape": (4, 8), "dtype": "int32", "role": "out"}],
                       constexprs={"BM": 8})
    launch = check.prepare(program, 0, folder)
    assert launch.bases["z"].dtype == np.int32 and np.all(launch.bases["z"] == INT_POISON)
    tol = check.error_bounds(launch)
    assert np.all(tol["y"] == 0) and np.all(tol["z"] == 0)


def test_bounds_of_sums_dots_and_conversions():
    rng = np.random.default_rng(0)
    a = bounds.Val(rng.uniform(-1, 1, (64, 32)).astype(np.float16))
    b = bounds.Val(rng.uniform(-1, 1, (32, 16)).astype(np.float16))
    d = bounds.dot(a, b)
    assert d.dtype == "float32" and np.all(d.e > 0) and np.all(d.e < 1e-3)
    s = bounds.reduce_sum(a, 1, True)
    assert s.shape == (64, 1) and np.all(s.e > 0)
    assert bounds.reduce_sum(a, 1).shape == (64,)            # NumPy's default
    assert np.all(bounds.reduce_max(a, 0).e == 0)
    i = bounds.astype(bounds.mul(d, 1000.0), ws.int32)   # inexact float -> int: +-1
    assert np.all(i.e <= 1) and np.any(i.e == 1)
    inf = bounds.sub(bounds.full((64, 1), -math.inf, ws.float32), bounds.reduce_max(d, 1, True))
    assert np.all(inf.e == 0) and np.all(bounds.exp(inf).v == 0)


def test_a_product_with_a_python_float_is_exact_only_in_float32():
    """80 * 0.3 is 24.0 in float64, but 80 * float32(0.3) is not a float32: a contracted
    fma on the GPU keeps the product's low bits, so the bound must not be 0 (seed
    16450669 on the H200); a power of two stays exact."""
    x = bounds.Val(np.array([80.0, 8.0, 7.0], np.float32))
    e = bounds.mul(x, 0.3).e
    assert e[0] > 0 and e[2] > 0
    assert np.all(bounds.mul(x, 0.5).e == 0)


def test_minimizer_shrinks_under_a_planted_predicate(folder):
    program = generator.generate(2, family="ew_loop")
    interp = devices.Interp()

    def valid(p):
        return devices.run_program(p, interp, folder)["outcome"] == "match"

    def planted(programs):          # "fails" while there is an exp inside a loop
        return ["ws.exp(" in p.source and "for " in p.source for p in programs]
    assert planted([program]) == [True]
    small, stats = minimize.minimize(program, planted, valid=valid, max_tests=400)
    assert planted([small]) == [True] and valid(small)
    assert stats["accepted"] > 5
    assert stats["size_after"][0] < 0.6 * stats["size_before"][0]     # AST nodes
    assert stats["size_after"][1] < stats["size_before"][1] / 100     # array elements
    assert len(small.arrays) < len(program.arrays)                    # fewer loads
    assert small.options["num_buffers_warp_spec"] == 1


def test_drop_dead_removes_unread_loads_and_empty_loops():
    import ast
    src = ("def f(x, BM):\n    a = ws.load(x, (0,), (BM,))\n    for k in range(3):\n"
           "        acc = acc + a\n    b = ws.load(x, (1,), (BM,))\n"
           "    ws.store(x, (0,), b)\n")
    out = ast.unparse(minimize.drop_dead(ast.parse(src)))
    assert "a =" not in out and "for " not in out and "b = ws.load" in out


def test_pool_survives_crash_hang_and_error(tmp_path):
    from numba_ws.fuzz.cli import main
    out = tmp_path / "fuzz.json"
    code = main(["--device", "fault:crash=3;hang=5;error=7", "--budget", "60", "--timeout",
                 "6", "--jobs", "2", "--first-seed", "0", "--max-programs", "10", "--features",
                 "none", "--no-minimize", "--json", str(out), "--work-dir",
                 str(tmp_path / "work")])
    assert code == 1
    summary = json.loads(out.read_text())
    c = summary["counts"]
    assert (c["generated"], c["finished"], c["matched"]) == (10, 10, 7)
    assert (c["crashed"], c["timeouts"], c["compile_errors"]) == (2, 1, 1)
    kinds = {f["seed"]: f["outcome"] for f in summary["failures"]}
    assert kinds == {3: "crash", 5: "timeout", 7: "compile_error"}
    assert summary["worker_restarts"] >= 2


def test_command_line_runs_and_writes_json(tmp_path):
    from numba_ws.fuzz.cli import main
    out = tmp_path / "fuzz.json"
    code = main(["--device", "interp", "--budget", "30", "--jobs", "1", "--first-seed", "100",
                 "--max-programs", "6", "--features", "none", "--json", str(out)])
    assert code == 0
    summary = json.loads(out.read_text())
    assert summary["counts"]["matched"] == 6 and summary["seed"] == 100
    assert [p["seed"] for p in sorted(summary["programs"], key=lambda p: p["seed"])] == \
        list(range(100, 106))
    assert summary["by_feature"]["cfg:cc=9.0a"]["programs"] + \
        summary["by_feature"].get("cfg:cc=8.0", {"programs": 0})["programs"] == 6


def test_a_mismatch_prints_its_seed_program_and_worst_element(tmp_path, capsys):
    from numba_ws.fuzz.cli import main
    code = main(["--device", "noisy-bug", "--budget", "60", "--jobs", "1", "--first-seed",
                 "3", "--max-programs", "2", "--features", "none", "--no-minimize",
                 "--json", str(tmp_path / "f.json")])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL seed 3 " in out and "mismatch" in out and "def fuzz_3(" in out
    assert "worst at [" in out and "--seed 3 --device noisy-bug" in out
    rows = json.loads((tmp_path / "f.json").read_text())["by_feature"]
    assert sum(r["mismatch"] for t, r in rows.items() if t.startswith("family:")) == 2


def test_features_are_detected_from_the_checkout(tmp_path):
    from numba_ws.fuzz.runner import detect_features
    found = detect_features(tmp_path)
    assert set(found) <= set(generator.OPTIONAL)
    assert ("minimum" in found) <= hasattr(ws, "minimum")
    # programs generated with every detected feature still run in the interpreter
    for seed in range(5):
        p = generator.generate(seed, found)
        assert devices.run_program(p, devices.Interp(), pathlib.Path(tmp_path))["outcome"] \
            == "match"


ALL = generator.OPTIONAL


def test_reductions_keep_dims_in_the_spelling_the_language_takes(monkeypatch):
    """Gen.red: ``keepdims=True`` on every axis reduction where ws.max takes it (NumPy
    semantics), the older two-argument form where it does not."""
    import re
    from numba_ws.fuzz import exprs
    from numba_ws.language import core

    def sources():
        exprs._reductions_take_keepdims.cache_clear()
        return "\n".join(generator.generate(s, ALL).source for s in range(60))
    reductions = r"ws\.(sum|max|min|argmax|argmin)\("
    new = sources()
    assert len(re.findall(reductions, new)) == new.count("keepdims=True") > 50

    def old_max(x, axis):
        return core._dispatch("max", x, axis)
    monkeypatch.setattr(core, "max", old_max)
    old = sources()
    monkeypatch.undo()
    exprs._reductions_take_keepdims.cache_clear()
    assert len(re.findall(reductions, old)) > 50 and "keepdims" not in old


def test_programs_with_every_feature_run_in_the_interpreter(folder):
    """No generator crash, interpreter error or error-model gap over many seeds, and the
    optional ops (masks, where, min, argmax ...) all appear."""
    programs = [generator.generate(s, ALL) for s in range(1000, 1150)]
    outcomes = [devices.run_program(p, devices.Interp(), folder) for p in programs]
    bad = [(p.seed, r["outcome"], r.get("message")) for p, r in zip(programs, outcomes)
           if r["outcome"] != "match"]
    assert not bad
    text = "\n".join(p.source for p in programs)
    for op in ("mask=", "other=", "ws.arange(0, ", "[None, :]", "[:, None]",
               "ws.expand_dims(", "ws.broadcast_to(", "ws.where(", "ws.min(", "ws.argmax(",
               "ws.argmin(", "ws.sqrt(", "ws.fma(", " & ", " | "):
        assert op in text, op
    stores = [ln for ln in text.splitlines() if "ws.store(" in ln and "mask=" in ln]
    assert len(stores) >= 10


def test_tags_name_what_a_program_uses():
    from numba_ws.fuzz import tags
    src = ("import numba_ws as ws\n\n\ndef k(x, y, BM: ws.constexpr):\n"
           "    t = ws.load(x, (0, 0), (BM, BM), mask=ws.arange(0, BM)[None, :] < 3)\n"
           "    for i in range(ws.cdiv(x.shape[0], BM)):\n"
           "        ws.store(y, (0, 0), ws.dot(t, t), mask=ws.arange(0, BM)[:, None] < 5)\n")
    p = _program(src, [{"name": "x", "shape": (8, 8), "dtype": "float16"},
                       {"name": "y", "shape": (7, 8), "dtype": "float32", "role": "out"}],
                 constexprs={"BM": 8})
    t = tags.tags(p)
    for want in ("op:dot", "op:masked_load", "op:masked_store", "op:arange", "flow:loop",
                 "flow:load_outside_loop", "flow:store_in_loop", "cfg:ragged",
                 "dtype:float16", "cfg:groups=1"):
        assert want in t, want
    for unwanted in ("op:where", "flow:persistent", "op:load_other", "op:sum"):
        assert unwanted not in t, unwanted
    rows = tags.table([{"outcome": "mismatch", "tags": t}, {"outcome": "unsupported",
                                                           "tags": ["op:dot"]}])
    assert rows["op:dot"] == {"programs": 2, "compiled": 1, "ran": 1, "mismatch": 1,
                              "compile_error": 0, "unsupported": 1, "crash": 0}


def test_one_seed_reruns_its_program(capsys):
    from numba_ws.fuzz.cli import main
    assert main(["--seed", "1234", "--device", "interp", "--features", "none"]) == 0
    out = capsys.readouterr().out
    assert "def fuzz_1234(" in out and "seed 1234" in out and '"outcome": "match"' in out


def test_a_compile_in_a_broken_cuda_context_is_a_device_fault_not_a_compile_error():
    """After an illegal address the worker's context is gone and every later compile
    fails with the driver's error; the GPU device reports those as crashes (the smoke test
    of 2026-12-03 showed five 'compile errors' that were one crash)."""
    from numba_ws.fuzz import devices
    gone = devices._CONTEXT_GONE
    assert gone.search("CudaAPIError: [700] Call to cuCtxSynchronize results in "
                       "CUDA_ERROR_ILLEGAL_ADDRESS")
    assert gone.search("CUDARuntimeError: cudaErrorIllegalAddress: an illegal memory access")
    assert not gone.search("TypingError: No implementation of function ws_view")
