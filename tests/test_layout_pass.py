"""The layouts pass on kernels that need its harder cases (tests/kernels_layouts.py):
what it decides (plan.layouts, conversions, scratch), ws.verify, and ptxas."""
import numpy as np
import pytest

import numba_ws as ws
import kernels_layouts as kl
from numba_ws.codegen import layouts
from ptx_tools import assemble, resources

F16, F32 = np.float16, np.float32


def _args_div(M=200, N=136, K=72):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((M, K)).astype(F16), rng.standard_normal((K, N)).astype(F16),
            rng.random((M, N)).astype(F32), np.full((M, N), np.nan, F32))


def _args_trans(N=200, D=64, BM=64):
    rng = np.random.default_rng(1)
    return (rng.standard_normal((BM, D)).astype(F16), rng.standard_normal((D, N)).astype(F16),
            rng.standard_normal((BM, D)).astype(F16), np.full((N, D), np.nan, F32))


def _converts(state):
    """The ws_tile_convert targets of the partitioned IR and their layouts."""
    from numba_ws.language import stage_ops as so
    from numba_ws.passes.ir_tools import callee_object
    out = []
    for block in state.func_ir.blocks.values():
        for stmt in block.body:
            v = getattr(stmt, "value", None)
            if getattr(v, "op", None) == "call" and callee_object(v, state.typemap) is \
                    so.ws_tile_convert:
                out.append(state.ws.layouts[stmt.target.name])
    return out


def test_a_reduced_tile_is_read_in_the_layout_its_result_broadcasts_onto():
    state = ws.jit(kl.gemm_div_rowsum).partition(*_args_div(), BM=128, BN=128, BK=64,
                                                 num_consumer_groups=2)
    assert _converts(state) == [] and state.ws.scratch_bytes == 0
    reads = [n for n in state.ws.layouts if n.startswith("$ws_call.layout")]
    assert reads and all(state.ws.layouts[n] == layouts.acc(64, 128) for n in reads)


def test_the_numpy_form_of_a_row_reduction_is_read_in_the_accumulator_layout_too():
    """Issue 15 item 4: ``ws.sum(t, axis=1)`` (squeezed) + 1.0, then ``[:, None]``."""
    state = ws.jit(kl.gemm_div_rowsum_np).partition(*_args_div(), BM=128, BN=128, BK=64,
                                                    num_consumer_groups=2)
    assert _converts(state) == [] and state.ws.scratch_bytes == 0
    reads = [n for n in state.ws.layouts if n.startswith("$ws_call.layout")]
    assert reads and all(state.ws.layouts[n] == layouts.acc(64, 128) for n in reads)


def test_transposed_accumulator_as_register_a_is_converted_through_scratch():
    state = ws.jit(kl.transposed_scores_dot).partition(*_args_trans(), BM=64, BN=64, D=64,
                                                       num_consumer_groups=1)
    conv = _converts(state)
    assert conv == [layouts.acc(64, 64)]
    assert state.ws.scratch_bytes == 64 * 64 * 4      # the fp32 (64, 64) tile, once


def test_a_vector_from_another_layout_is_converted_to_the_accumulator_slice():
    state = ws.jit(kl.blocked_stats_on_acc).partition(*_args_div(), BM=128, BN=128, BK=64,
                                                      num_consumer_groups=2)
    conv = _converts(state)          # one, in the shared consumer body
    assert len(conv) == 1 and conv[0].shape == (128, 1)
    assert 0 < state.ws.scratch_bytes <= 128 * 4 * 4


CASES = [   # (kernel, inputs, meta, grid, consumer groups)
    (kl.gemm_div_rowsum, _args_div, dict(BM=128, BN=128, BK=64), (2 * 2,), 1),
    (kl.gemm_div_rowsum, _args_div, dict(BM=128, BN=128, BK=64), (2 * 2,), 2),
    (kl.gemm_div_rowsum_np, _args_div, dict(BM=128, BN=128, BK=64), (2 * 2,), 2),
    # one 64-row block of scores: a single consumer group
    (kl.transposed_scores_dot, _args_trans, dict(BM=64, BN=64, D=64), (4,), 1),
    (kl.blocked_stats_on_acc, _args_div, dict(BM=128, BN=128, BK=64, num_buffers_warp_spec=2),
     (2 * 2,), 1),
    (kl.blocked_stats_on_acc, _args_div, dict(BM=128, BN=128, BK=64, num_buffers_warp_spec=2),
     (2 * 2,), 2),
]


@pytest.mark.parametrize("kernel,args,meta,grid,groups", CASES,
                         ids=[f"{c[0].__name__}-G{c[4]}" for c in CASES])
def test_verify_and_ptxas(kernel, args, meta, grid, groups, tmp_path):
    report = ws.verify(kernel, grid, *args(), seeds=1, max_programs=2,
                       num_consumer_groups=groups, **meta)
    assert report.ok, str(report)
    for cc, target in (((9, 0, "a"), "sm_90a"), ((8, 0), "sm_80")):
        ptx = ws.jit(kernel).inspect_ptx(*args(), cc=cc, num_consumer_groups=groups, **meta)
        regs, spills, stack = resources(assemble(ptx, tmp_path, target))
        assert spills == [0] * len(spills), (target, regs, spills)
