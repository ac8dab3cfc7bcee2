"""Running a :class:`kernels_tiles.Case` on the GPU, shared by the tests/gpu files of the
register-tile, mask, math and reduction kernels.

Arrays are CuPy arrays, or torch tensors for bf16 (CuPy has no bfloat16). Outputs are
the cases' poisoned :class:`kernels_tiles.Out` arrays (guard rows included), checked
after the launch against their float64 references.
"""
import numpy as np
import pytest

import numba_ws as ws

import kernels_tiles as kt

cp = pytest.importorskip("cupy")


def to_device(a):
    """A NumPy array on the GPU: CuPy, or a torch tensor for bfloat16."""
    if a.dtype == kt.np_dtype("bfloat16"):
        torch = pytest.importorskip("torch")
        return torch.from_numpy(a.astype(np.float32)).to("cuda").to(torch.bfloat16)
    return cp.asarray(a)


def to_host(d):
    if isinstance(d, cp.ndarray):
        return cp.asnumpy(d)
    return d.float().cpu().numpy().astype(kt.np_dtype("bfloat16"))   # exact: bf16 in f32


def device_args(args):
    """(launch arguments, [(Out, its poisoned device array with guard rows)]) of a case's
    host arguments."""
    launch, outs = [], []
    for a in args:
        if isinstance(a, kt.Out):
            base = to_device(a.host()[0])
            outs.append((a, base))
            a = base[:a.shape[0]]
        elif isinstance(a, np.ndarray):
            a = to_device(a)
        launch.append(a)
    return launch, outs


def check_outputs(outs, what):
    cp.cuda.runtime.deviceSynchronize()
    for i, (out, base) in enumerate(outs):
        out.check(to_host(base), f"{what} output {i}")


def run_on_gpu(case, groups, seed, kernels):
    """Launch ``case`` on fresh inputs (``seed``) with ``groups`` consumer groups; check
    every output. ``kernels``: a dict caching one ``ws.jit`` per kernel function."""
    args, grid = case.make(np.random.default_rng(seed))
    launch, outs = device_args(args)
    kernel = kernels.setdefault(case.kernel, ws.jit(case.kernel))
    kernel[grid](*launch, num_consumer_groups=groups, **case.meta)
    check_outputs(outs, f"{case.name}, {groups} group(s) (seed {seed})")
