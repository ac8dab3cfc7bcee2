"""The register-tile kernels of tests/kernels_tiles.py through the compiler, without a GPU.

- ``ws.verify``, every case, ``num_consumer_groups`` 1 and 2: the partitioned program (the
  IR the GPU gets) runs in the CPU schedule simulator; it must report no finding and
  outputs equal to the interpreter's (bit for bit, except where a column reduction may be
  split over consumer groups: within 4 ulps).
- ``kernel.inspect_ptx`` assembled by ptxas; the GEMM and attention kernels must not
  spill. Each kernel's first case runs the full matrix (sm_90a and sm_80, 1 and 2
  groups); its other cases (other dtypes, shapes, ``ACT`` values) run sm_90a with 1 group
  and sm_80 with 2, which keeps the file's compile time down. The per-pair
  ``copy_astype`` cases other than the first are left to verify: ``astype_fanout``
  compiles every pair in the full matrix.
"""
import numpy as np
import pytest

import numba_ws as ws

import kernels_tiles as kt
from ptx_tools import assemble, resources

TARGETS = {"sm_90a": (9, 0, "a"), "sm_80": (8, 0)}
ALL = list(kt.CASES.values())
FIRST = [c for i, c in enumerate(ALL) if all(d.kernel is not c.kernel for d in ALL[:i])]
OTHERS = [c for c in ALL if c not in FIRST and c.kernel is not kt.copy_astype]


def numpy_args(case):
    """The case's NumPy arguments (outputs poisoned) and grid, from a fixed seed."""
    args, grid = case.make(np.random.default_rng(14))
    launch, _ = kt.host_args(args)
    return launch, grid


def check_verify(case, groups):
    args, grid = numpy_args(case)
    report = ws.verify(case.kernel, grid, *args, seeds=2, max_programs=4, exact=case.exact,
                       num_consumer_groups=groups, **case.meta)
    assert report.ok, str(report)
    assert report.comparison.startswith("bitwise" if case.exact else "within")


def check_ptx(case, groups, target, tmp_path):
    args, _ = numpy_args(case)
    ptx = ws.jit(case.kernel).inspect_ptx(*args, cc=TARGETS[target],
                                          num_consumer_groups=groups, **case.meta)
    assert f".target {target}" in ptx
    log = assemble(ptx, tmp_path, target)
    if case.gemm:
        regs, spills, stack = resources(log)
        assert spills == [0, 0], f"{case.name}: {regs} registers, spills {spills}\n{log}"


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_verify_is_clean_and_equals_the_interpreter(case, groups):
    check_verify(case, groups)


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("case", FIRST, ids=[c.name for c in FIRST])
def test_ptx_assembles(case, groups, target, tmp_path):
    check_ptx(case, groups, target, tmp_path)


@pytest.mark.parametrize("groups,target", [(1, "sm_90a"), (2, "sm_80")])
@pytest.mark.parametrize("case", OTHERS, ids=[c.name for c in OTHERS])
def test_ptx_assembles_other_cases(case, groups, target, tmp_path):
    check_ptx(case, groups, target, tmp_path)


def test_every_kernel_and_case_is_compiled():
    compiled = {c.name for c in FIRST + OTHERS}
    assert {c.kernel for c in FIRST} == {c.kernel for c in ALL}
    assert all(c.kernel is kt.copy_astype for c in ALL if c.name not in compiled)


def test_bf16_store_does_not_call_the_missing_shim(tmp_path):
    """Issue 14: a bf16 store called numba-cuda's unlinked ``__nv_bfloat16(float)``
    constructor (``_ZN13__nv_bfloat16C1Ef_nbst``); the conversion must be PTX."""
    case = kt.CASES["gemm_out-bfloat16-bfloat16"]
    args, _ = numpy_args(case)
    ptx = ws.jit(case.kernel).inspect_ptx(*args, **case.meta)
    assert "_nbst" not in ptx and "cvt.rn.bf16" in ptx
    assemble(ptx, tmp_path, "sm_90a")


def test_plain_sm90_target_is_sm90a_or_a_clear_error(tmp_path):
    """Issue 14: cc=(9, 0) without "a" must not emit wgmma/setmaxnreg for plain sm_90."""
    case = kt.CASES["gemm_out-float16-float32"]
    args, _ = numpy_args(case)
    try:
        ptx = ws.jit(case.kernel).inspect_ptx(*args, cc=(9, 0), **case.meta)
    except ws.WSError as e:
        assert "sm_90a" in str(e)
        return
    target = "sm_90a" if ".target sm_90a" in ptx else "sm_90"
    assert target == "sm_90a" or ("wgmma" not in ptx and "setmaxnreg" not in ptx)
    assemble(ptx, tmp_path, target)


def test_one_d_slot_part_wider_than_a_box_is_one_row():
    """A 1-D part of 512 float32 is stored as one row in two 256-column boxes, so element
    c lies at byte 4 * c (it was typed as 512 rows: element 256 at 2**19, past the slot;
    the H200 faulted on fuzzer seed 15203086)."""
    from numba.cuda import types
    from numba_ws.codegen import tile_ops
    from numba_ws.codegen.swizzle import part_offset
    from numba_ws.language.types import DTypeType
    lit = types.literal
    sig, _ = tile_ops.gpu_view._defn(None, lit(0), lit(2048), types.int32,
                                     types.Tuple([lit(512)]), DTypeType("float32"),
                                     lit(512), lit(256), lit(0))
    rows, _, box_cols, xor = tile_ops.part_layout(sig.return_type)
    assert (rows, box_cols, xor) == (1, 256, False)
    assert [part_offset(0, c, rows, box_cols, 4, xor) for c in range(512)] == \
        [4 * c for c in range(512)]


def test_release_of_a_tma_slot_read_into_registers_fences_the_async_proxy():
    """A TMA slot read with ld.shared: every consumer thread runs
    ``fence.proxy.async.shared::cta`` before the slot's release (the next TMA write is in
    the async proxy); a GEMM, whose slots only wgmma reads, has none."""
    import re
    from numba_ws import examples
    n = 4096
    a, out = np.zeros(n, np.float16), np.zeros(n, np.float16)
    ptx = ws.jit(kt.vec_add).inspect_ptx(a, a, out, B=1024, cc=(9, 0, "a"))
    releases = re.findall(r"fence\.proxy\.async\.shared::cta;.*?mbarrier\.arrive\.shared",
                          ptx, re.S)
    assert releases, "no fence before the release"
    m = np.zeros((256, 256), np.float16)
    gemm = ws.jit(examples.matmul).inspect_ptx(m, m, m, BM=128, BN=128, BK=64, cc=(9, 0, "a"),
                                               tma_store=0)   # (edge tiles' TMA path fences)
    assert "fence.proxy.async" not in gemm
