"""Option ``shared_consumer_body`` (code_partition item 6): with two or more cooperative
consumer groups one consumer clone serves every group, its slice taken from the warp-group
index at run time. Checked here without a GPU: the plan has one consumer clone, the
simulated schedule computes the interpreter's results on ragged shapes (so each group
stored its own rows and read its own part of the slot), the PTX is about half as long and
assembles, and the kernels that need one clone per group keep them.
tests/gpu run the same kernels on the H200 (every two-group GEMM and attention test
compiles with the default, 1).
"""
import numpy as np
import pytest

import numba_ws as ws
from numba_ws.language import stage_ops as so

import kernels
from ptx_tools import assemble, resources


def f16(rng, *shape):
    return rng.standard_normal(shape).astype(np.float16)


def _clones(state):
    """task -> entry label of its clone."""
    return dict(state.ws.branches)


def _calls(state, stub):
    fir, out = state.func_ir, []
    for block in fir.blocks.values():
        for stmt in block.body:
            v = getattr(stmt, "value", None)
            if getattr(v, "op", None) == "call" and \
                    getattr(fir.get_definition(v.func), "value", None) is stub:
                out.append(stmt)
    return out


@pytest.mark.parametrize("groups,bm,bn", [(2, 128, 256), (3, 192, 128), (2, 128, 128)])
def test_one_clone_serves_every_consumer_group(groups, bm, bn):
    rng = np.random.default_rng(groups)
    args = (f16(rng, 2 * bm, 128), f16(rng, 128, 2 * bn), f16(rng, 2 * bm, 2 * bn))
    meta = dict(BM=bm, BN=bn, BK=64, num_consumer_groups=groups,
                reg_inc_consumer=152 if groups == 3 else 232)
    shared = ws.jit(kernels.matmul).partition(*args, **meta)
    apart = ws.jit(kernels.matmul).partition(*args, shared_consumer_body=0, **meta)
    one = _clones(shared)
    assert sorted(one) == list(range(groups + 1))
    assert len({one[t] for t in range(1, groups + 1)}) == 1 and one[0] != one[1]
    assert len(set(_clones(apart).values())) == groups + 1
    # one setmaxnreg.inc for the shared clone, one per clone otherwise
    assert len(_calls(shared, so.ws_reg_alloc)) == 1
    assert len(_calls(apart, so.ws_reg_alloc)) == groups
    # the dispatch and the shared clone's $ws_group read the warp group
    assert len(_calls(shared, so.ws_warp_group)) == 2


@pytest.mark.parametrize("m,n,k", [(200, 300, 130), (256, 512, 192), (129, 257, 64)])
def test_shared_body_schedule_computes_every_groups_rows(m, n, k):
    """Ragged shapes: each group's rows come out right only if its store used its own
    row offset and its dot read its own part of the A slot."""
    rng = np.random.default_rng(m)
    a, b = f16(rng, m, k), f16(rng, k, n)
    c = np.full((m, n), np.nan, np.float16)
    grid = (-(-m // 128) * -(-n // 256),)
    report = ws.verify(kernels.matmul, grid, a, b, c, BM=128, BN=256, BK=64,
                       num_consumer_groups=2, num_buffers_warp_spec=2, seeds=1)
    assert report.ok, str(report)


def test_shared_body_attention_schedule_is_clean():
    rng = np.random.default_rng(7)
    S, D = 256, 64
    q, k, v = (f16(rng, 2 * S, D) for _ in range(3))
    o = np.full((2 * S, D), np.nan, np.float16)
    report = ws.verify(kernels.attention_fwd, (S // 128, 2), q, k, v, o, S, D ** -0.5,
                       BM=128, BN=128, D=D, num_consumer_groups=2, seeds=1,
                       max_programs=2, exact=False)
    assert report.ok, str(report)


def test_shared_body_halves_the_ptx_and_assembles(tmp_path):
    rng = np.random.default_rng(0)
    args = (f16(rng, 512, 256), f16(rng, 256, 512), f16(rng, 512, 512))
    kern = ws.jit(kernels.matmul)
    shared = kern.inspect_ptx(*args, BM=128, BN=256, BK=64)
    apart = kern.inspect_ptx(*args, BM=128, BN=256, BK=64, shared_consumer_body=0)
    assert shared.count("setmaxnreg.inc") == 1 and apart.count("setmaxnreg.inc") == 2
    assert shared.count("wgmma.mma_async") * 2 == apart.count("wgmma.mma_async")
    assert len(shared) < 0.7 * len(apart), (len(shared), len(apart))
    regs, spills, stack = resources(assemble(shared, tmp_path))
    assert spills == [0, 0] and stack == 0, (regs, spills, stack)


@pytest.mark.parametrize("option", [dict(dot_turns=1), dict(ping_pong=1)])
def test_turns_keep_one_clone_per_group(option):
    rng = np.random.default_rng(1)
    if "ping_pong" in option:
        args = (f16(rng, 512, 128), f16(rng, 128, 512), f16(rng, 512, 512))
        state = ws.jit(kernels.matmul_persistent).partition(
            *args, BM=128, BN=128, BK=64, GROUP_M=8, **option)
    else:
        S, D = 256, 64
        q, k, v = (f16(rng, 2 * S, D) for _ in range(3))
        state = ws.jit(kernels.attention_fwd).partition(
            q, k, v, np.zeros_like(q), S, 0.125, BM=128, BN=128, D=D, **option)
    assert len(set(_clones(state).values())) == 3


def test_option_is_validated():
    from numba_ws.errors import WSUsageError
    from numba_ws.runtime.options import Options
    with pytest.raises(WSUsageError, match="shared_consumer_body=2"):
        Options(shared_consumer_body=2)
