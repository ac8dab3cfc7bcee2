"""Compile-time measures that must not change what is generated: the per-compile table of
call typings (compiler._call_types_memoized) and option ``nvvm_opt``. Without a GPU: the
PTX is compared with and without the table, and the nvvm_opt=1 PTX assembles without a
stack frame. tests/gpu/test_gemm.py runs an nvvm_opt=1 GEMM on the GPU."""
import contextlib
import re

import numpy as np
import pytest

import numba_ws as ws
from numba_ws import compiler
from numba.cuda import types
from numba.cuda.descriptor import cuda_target

import kernels
from ptx_tools import assemble, resources


def _args(seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype(np.float16)
                 for s in ((256, 192), (192, 512), (256, 512)))


@pytest.mark.parametrize("kernel,meta", [
    (kernels.matmul, dict(BM=128, BN=256, BK=64)),
    (kernels.matmul_bias_relu, dict(BM=128, BN=128, BK=64)),
])
def test_typing_table_changes_nothing(monkeypatch, kernel, meta):
    args = _args()
    if kernel is kernels.matmul_bias_relu:
        args = (args[0], args[1], np.ones(512, np.float16), args[2])
    with ws.knobs.scope(NUMBA_WS_ALWAYS_COMPILE="1"):
        tabled = ws.jit(kernel).inspect_ptx(*args, **meta)
        assert "resolve_function_type" not in vars(cuda_target.typing_context)
        monkeypatch.setattr(compiler, "_call_types_memoized",
                            lambda ctx: contextlib.nullcontext())
        plain = ws.jit(kernel).inspect_ptx(*args, **meta)

    def unversioned(ptx):                 # numba numbers each compiled function: B2v<n>
        return re.sub(r"B\d+v\d+B", "BvB", ptx)
    # different version numbers: the second PTX is a second compile, not a cached one
    assert tabled != plain and unversioned(tabled) == unversioned(plain)


def test_typing_table_answers_repeats_and_is_dropped_after_the_compile(monkeypatch):
    ctx = cuda_target.typing_context
    seen = []
    real = type(ctx).resolve_function_type

    def counting(self, func, args, kws):
        seen.append(func)
        return real(self, func, args, kws)
    monkeypatch.setattr(type(ctx), "resolve_function_type", counting)
    with compiler._call_types_memoized(ctx):
        sig = [ctx.resolve_function_type(abs, (types.int32,), {}) for _ in range(3)]
        with compiler._call_types_memoized(ctx):       # nested: the outer table
            sig.append(ctx.resolve_function_type(abs, (types.int32,), {}))
    assert len(seen) == 1 and len(set(map(str, sig))) == 1
    assert "resolve_function_type" not in vars(ctx)
    ctx.resolve_function_type(abs, (types.int32,), {})
    assert len(seen) == 2


def test_nvvm_opt_1_keeps_the_producer_loop_rolled(tmp_path):
    args = _args(1)
    kern = ws.jit(kernels.matmul)
    rolled = kern.inspect_ptx(*args, BM=128, BN=256, BK=64, nvvm_opt=1)
    unrolled = kern.inspect_ptx(*args, BM=128, BN=256, BK=64)
    tma = "cp.async.bulk.tensor.2d.shared::cluster.global"
    assert rolled.count(tma) < unrolled.count(tma), (rolled.count(tma), unrolled.count(tma))
    assert rolled.count("wgmma.mma_async") == unrolled.count("wgmma.mma_async")
    regs, spills, stack = resources(assemble(rolled, tmp_path))
    assert spills == [0, 0] and stack == 0, (regs, spills, stack)


@pytest.mark.parametrize("bad", [0, 4, True])
def test_nvvm_opt_is_validated(bad):
    from numba_ws.runtime.options import Options
    with pytest.raises(ws.WSUsageError, match="nvvm_opt"):
        Options(nvvm_opt=bad)
