"""The register-tile kernels of tests/kernels_tiles.py in the interpreter (NumPy arrays
through ``ws.jit``), against float64 NumPy references.

Every run draws fresh random inputs (the seed is in each failure message); outputs start
as NaN (int outputs as a sentinel) with poisoned guard rows after them, so an element the
kernel forgets to write, or a write past the last row, fails. Shapes are ragged (300 x 200
with 64 x 64 tiles; GEMMs 300 x 200 x 136 with 128 x 128 x 64) wherever the kernel's
docstring allows.
"""
import inspect

import numpy as np
import pytest

import numba_ws as ws

import kernels_tiles as kt


@pytest.fixture
def seed():
    return np.random.SeedSequence().entropy


def run_case(case, seed):
    """Run ``case`` in the interpreter on fresh inputs; check every output."""
    args, grid = case.make(np.random.default_rng(seed))
    launch, outs = kt.host_args(args)
    ws.jit(case.kernel)[grid](*launch, **case.meta)
    for i, (out, base) in enumerate(outs):
        out.check(base, f"{case.name} output {i} (seed {seed})")
    return outs


@pytest.mark.parametrize("case", list(kt.CASES.values()), ids=list(kt.CASES))
def test_kernel_matches_float64_reference(case, seed):
    run_case(case, seed)


def test_every_kernel_has_a_case():
    """Every tile program of kernels_tiles.py (a function with a constexpr parameter) is
    run by at least one case."""
    kernels = {f for f in vars(kt).values() if inspect.isfunction(f)
               and f.__module__ == kt.__name__
               and any(p.annotation is ws.constexpr
                       for p in inspect.signature(f).parameters.values())}
    covered = {c.kernel for c in kt.CASES.values()}
    assert len(kernels) >= 20 and kernels <= covered, sorted(
        k.__name__ for k in kernels - covered)


def test_astype_cases_cover_every_pair():
    pairs = {tuple(n.split("-")[1:]) for n in kt.CASES if n.startswith("copy_astype-")}
    assert pairs == {(s, d) for s in kt.DTYPES for d in kt.DTYPES if s != d}


def test_the_check_catches_an_unwritten_element_and_a_write_past_the_end():
    """The harness itself: a skipped element, a guard-row write and a wrong value fail."""
    case = kt.CASES["copy2d-float32"]
    args, grid = case.make(np.random.default_rng(0))
    out = args[1]
    for spoil, message in [(lambda b: b.__setitem__((5, 7), np.nan), "never written"),
                           (lambda b: b.__setitem__((out.shape[0], 0), 1.0), "past the"),
                           (lambda b: b.__setitem__((0, 0), b[0, 0] + 1), "differ")]:
        base, view = out.host()
        view[...] = args[0]
        out.check(base)
        spoil(base)
        with pytest.raises(AssertionError, match=message):
            out.check(base)


def test_int_outputs_use_the_sentinel():
    case = kt.CASES["copy_astype-float32-int32"]
    args, grid = case.make(np.random.default_rng(0))
    base, view = args[1].host()
    assert (base == kt.INT_POISON).all()
    with pytest.raises(AssertionError, match="never written"):
        args[1].check(base)


def test_gemm_act_branch_is_chosen_by_the_constexpr(seed):
    """leaky_relu keeps 1 % of the negatives, relu none, "none" all of them."""
    outs = {act: run_case(kt.CASES[f"gemm_act-{act}"], seed)[0][1]
            for act in ("leaky_relu", "relu", "none")}
    rows = kt.GEMM["M"]
    assert (outs["relu"][:rows] >= 0).all()
    assert (outs["none"][:rows] < 0).any()
    neg = outs["none"][:rows] < -0.5
    ratio = outs["leaky_relu"][:rows][neg].astype(np.float64) / outs["none"][:rows][neg]
    np.testing.assert_allclose(ratio, 0.01, rtol=2e-2)
