"""The autotuner's GPU path on the CPU (a fake driver stands in for the GPU): each config
that fits is compiled once, before the first is timed, and ptxas assembles it in the
background (Kernel.compile_ahead, ptxas.start); the timed launch loads that cubin."""
import threading

import pytest

import kernels
import numba_ws as ws
from numba_ws import knobs
from numba_ws.runtime import autotune, jit as jit_mod, launcher, ptxas, specialize
from ptx_tools import PTXAS
from test_interop import CAI

FIT_A = ws.Config({"BM": 128, "BN": 128, "BK": 64})
FIT_B = ws.Config({"BM": 128, "BN": 64, "BK": 64}, num_buffers_warp_spec=2)
TOO_BIG = ws.Config({"BM": 128, "BN": 256, "BK": 64}, num_buffers_warp_spec=6)
M = N = K = 256


class FakeGPU:
    """Modules and functions that record what they were given; nothing runs."""

    def __init__(self):
        self.loaded, self.launches, self.compiles, self.assembled = [], [], 0, []

    def install(self, monkeypatch):
        gpu = self

        class Function:
            def set_max_dynamic_smem(self, n):
                pass

            def raw_launch(self):
                return None

            def launch(self, grid, block, smem, stream, params):
                gpu.launches.append(tuple(grid))

        class Module:
            def __init__(self, image, name):
                gpu.loaded.append(image)

            def get_function(self, entry):
                return Function()

        real_compile, real_assemble = specialize.compile_kernel, ptxas._assemble

        def compile_kernel(*args):
            art = real_compile(*args)
            gpu.compiles += 1                   # compiles that succeeded
            return art

        def assemble(ptx):
            gpu.assembled.append(threading.current_thread().name)
            return real_assemble(ptx)

        monkeypatch.setattr(launcher, "CudaModule", Module)
        monkeypatch.setattr(launcher, "driver_version", lambda: 12080)
        monkeypatch.setattr(jit_mod, "_device_cc", lambda: (9, 0, "a"))
        monkeypatch.setattr(autotune, "_device_cc", lambda: (9, 0, "a"))
        monkeypatch.setattr(jit_mod._Loaded, "tmap_pointer", lambda self, values: 0x1000)
        monkeypatch.setattr(specialize, "compile_kernel", compile_kernel)
        monkeypatch.setattr(ptxas, "_assemble", assemble)


@pytest.fixture
def gpu(monkeypatch, tmp_path):
    if PTXAS is None:
        pytest.fail("ptxas is not on PATH (CI has CUDA 13.0's)")
    fake = FakeGPU()
    fake.install(monkeypatch)
    with knobs.scope(NUMBA_WS_HOME=str(tmp_path), NUMBA_WS_ALWAYS_COMPILE=None,
                     NUMBA_WS_INTERPRET=None, NUMBA_WS_PTXAS=None):
        yield fake


def device_arrays():
    a = CAI((M, K), "<f2", ptr=0x7F0000100000)
    b = CAI((K, N), "<f2", ptr=0x7F0000200000)
    c = CAI((M, N), "<f2", ptr=0x7F0000300000)
    return a, b, c


def grid(meta):
    return (ws.cdiv(M, meta["BM"]) * ws.cdiv(N, meta["BN"]),)


def test_each_config_is_compiled_once_and_assembled_before_timing(gpu):
    seen_at_first_timing = []

    def bench(fn):
        if not seen_at_first_timing:
            seen_at_first_timing.append((gpu.compiles, len(gpu.assembled)))
        fn()
        return 1.0 if len(gpu.launches) == 1 else 2.0

    tuner = ws.autotune([FIT_A, TOO_BIG, FIT_B], key=["a", "b"], do_bench=bench)(
        kernels.matmul)
    tuner[grid](*device_arrays())
    assert TOO_BIG in tuner.pruned and "shared memory" in tuner.pruned[TOO_BIG]
    assert tuner.best_config == FIT_A
    # both fitting configs compiled before the first timing, none after
    assert seen_at_first_timing[0][0] == 2 and gpu.compiles == 2
    assert len(gpu.assembled) == 2
    assert all(name.startswith("numba_ws_ptxas") for name in gpu.assembled)
    assert len(gpu.loaded) == 2 and len(gpu.launches) == 3   # the winner's module reused
    assert all(image[:4] == b"\x7fELF" for image in gpu.loaded)
    assert not ptxas._STARTED


def test_compile_ahead_then_launch_compiles_once_even_when_always_compiling(gpu):
    kernel = ws.jit(kernels.matmul)
    meta = dict(BM=128, BN=128, BK=64)
    with knobs.scope(NUMBA_WS_ALWAYS_COMPILE="1"):
        kernel.compile_ahead(device_arrays(), meta)
        assert gpu.compiles == 1 and len(ptxas._STARTED) == 1
        kernel[grid](*device_arrays(), **meta)
    assert gpu.compiles == 1 and gpu.launches == [(4, 1, 1)]
    assert gpu.loaded[0][:4] == b"\x7fELF" and not ptxas._STARTED
    kernel.compile_ahead(device_arrays(), meta)          # launched before: nothing to do
    assert gpu.compiles == 1 and not ptxas._STARTED


def test_compile_ahead_raises_what_the_compile_raises(gpu):
    kernel = ws.jit(kernels.matmul)
    with pytest.raises(ws.errors.WSCompileError, match="shared memory"):
        kernel.compile_ahead(device_arrays(), dict(BM=128, BN=256, BK=64,
                                                   num_buffers_warp_spec=6))
    assert not kernel._ahead and not ptxas._STARTED


def test_compile_ahead_of_host_arrays_is_a_no_op(gpu):
    import numpy as np
    kernel = ws.jit(kernels.matmul)
    a = np.zeros((M, K), np.float16)
    kernel.compile_ahead((a, a, a.copy()), dict(BM=128, BN=128, BK=64))
    assert gpu.compiles == 0 and not kernel._ahead


def test_a_started_run_is_waited_for_not_repeated(gpu, monkeypatch):
    calls = []
    monkeypatch.setattr(ptxas, "_assemble", lambda ptx: calls.append(ptx) or b"image")
    ptxas.start(".target sm_90a\n")
    assert ptxas.cubin(".target sm_90a\n") == b"image" and calls == [".target sm_90a\n"]
    assert ptxas.cubin(".target sm_90a\n") == b"image" and len(calls) == 2   # not started
    with knobs.scope(NUMBA_WS_PTXAS="0"):
        ptxas.start(".target sm_90a\n")                # no ptxas: nothing started
    assert not ptxas._STARTED
