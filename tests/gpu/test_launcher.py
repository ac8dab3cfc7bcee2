"""CudaModule / CudaFunction / ParamPacker on a real GPU (skipped without one).

Kernels are compiled by numba.cuda.compile_ptx, loaded with our driver-API launcher and
run on CuPy arrays, torch tensors and Numba device arrays on non-default streams.
"""
import re
import shutil
import subprocess

import numpy as np
import pytest
from numba import cuda
from numba.cuda import types

from numba_ws.errors import WSResourceError
from numba_ws.runtime.interop import describe, resolve_stream
from numba_ws.runtime.launcher import CudaDriverError, CudaModule, ParamPacker

pytestmark = pytest.mark.skipif(not cuda.is_available(), reason="needs a CUDA GPU")

F32_1D = types.Array(types.float32, 1, "C")
F32_2D = types.Array(types.float32, 2, "A")


def axpy(out, x, a, n):
    i = cuda.grid(1)
    if i < n:
        out[i] = a * x[i] + out[i]


def scale2d(y, x, s):
    i, j = cuda.grid(2)
    if i < x.shape[0] and j < x.shape[1]:
        y[i, j] = x[i, j] * s


def smem_sum(out, x):
    buf = cuda.shared.array(0, dtype=np.float32)
    t = cuda.threadIdx.x
    buf[t] = x[t]
    cuda.syncthreads()
    if t == 0:
        acc = np.float32(0)
        for k in range(cuda.blockDim.x):
            acc += buf[k]
        out[0] = acc


def _compile(fn, sig):
    ptx, _ = cuda.compile_ptx(fn, sig, cc=(9, 0))
    entry = re.search(r"\.entry\s+([\w$]+)", ptx).group(1)
    return ptx, entry


@pytest.fixture(scope="module")
def axpy_kernel():
    sig = (F32_1D, F32_1D, types.float32, types.int32)
    ptx, entry = _compile(axpy, sig)
    mod = CudaModule(ptx, name="axpy")
    fn = mod.get_function(entry)
    return mod, fn, ParamPacker(sig, names=["out", "x", "a", "n"])


def test_attributes(axpy_kernel):
    _, fn, packer = axpy_kernel
    assert 0 < fn.num_regs <= 255 and fn.local_bytes == 0 and fn.static_smem == 0
    assert packer.nparams == 7 + 7 + 2


def test_cupy_on_nondefault_stream(axpy_kernel):
    cp = pytest.importorskip("cupy")
    _, fn, packer = axpy_kernel
    n = 1000
    x = cp.arange(n, dtype=cp.float32)
    out = cp.ones(n, dtype=cp.float32)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        args = [describe(out, "out"), describe(x, "x")]
        stream = resolve_stream(None, args)
        assert stream == s.ptr != 0
        fn.launch(((n + 127) // 128, 1, 1), (128, 1, 1), 0, stream,
                  packer.pack(args + [2.0, n]))
    s.synchronize()
    np.testing.assert_allclose(cp.asnumpy(out), 2 * np.arange(n) + 1)


def test_torch_on_nondefault_stream(axpy_kernel):
    torch = pytest.importorskip("torch")
    _, fn, packer = axpy_kernel
    n = 777
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    out = torch.zeros(n, dtype=torch.float32, device="cuda")
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        args = [describe(out, "out"), describe(x, "x")]
        stream = resolve_stream(None, [out, x])
        assert stream == s.cuda_stream != 0
        fn.launch((7, 1, 1), (128, 1, 1), 0, stream, packer.pack(args + [3.0, n]))
    s.synchronize()
    np.testing.assert_allclose(out.cpu().numpy(), 3 * np.arange(n))
    assert resolve_stream(s) == s.cuda_stream


def test_launch_from_a_fresh_thread(axpy_kernel):
    """A thread without a current context gets Numba's context on its first launch."""
    import threading
    cp = pytest.importorskip("cupy")
    _, fn, packer = axpy_kernel
    x, out = cp.ones(256, cp.float32), cp.zeros(256, cp.float32)
    errors = []

    def work():
        try:
            fn.launch((2, 1, 1), (128, 1, 1), 0, 0,
                      packer.pack([describe(out, "out"), describe(x, "x"), 5.0, 256]))
        except Exception as e:  # reported below
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    cp.cuda.runtime.deviceSynchronize()
    assert not errors and float(out.sum()) == 5.0 * 256


def test_numba_device_arrays_2d_strided():
    sig = (F32_2D, F32_2D, types.float32)
    ptx, entry = _compile(scale2d, sig)
    fn = CudaModule(ptx).get_function(entry)
    packer = ParamPacker(sig)
    host = np.arange(40 * 96, dtype=np.float32).reshape(40, 96)
    x = cuda.to_device(host)
    y = cuda.device_array((40, 48), np.float32)
    xs = x[:, ::2]                             # strided view through the CAI
    ns = cuda.stream()
    vals = [describe(y, "y"), describe(xs, "x"), 0.5]
    assert vals[1].layout == "A" and vals[1].strides == (384, 8)
    fn.launch((3, 5), (16, 16), 0, resolve_stream(ns), packer.pack(vals))
    ns.synchronize()
    np.testing.assert_allclose(y.copy_to_host(), host[:, ::2] * 0.5)


def test_cubin_and_dynamic_smem():
    cp = pytest.importorskip("cupy")
    sig = (F32_1D, F32_1D)
    ptx, entry = _compile(smem_sum, sig)
    image = ptx
    ptxas = shutil.which("ptxas")
    if ptxas:
        import os
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            src, dst = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
            open(src, "w").write(ptx)
            if subprocess.run([ptxas, "-arch=sm_90", src, "-o", dst]).returncode == 0:
                image = open(dst, "rb").read()
    fn = CudaModule(image, name="smem_sum").get_function(entry)
    packer = ParamPacker(sig)
    threads = 1024
    x = cp.ones(threads, dtype=cp.float32)
    out = cp.zeros(1, dtype=cp.float32)
    smem = 100 * 1024                           # > 48 KB: launch raises the limit itself
    fn.launch((1, 1, 1), (threads, 1, 1), smem, 0,
              packer.pack([describe(out, "out"), describe(x, "x")]))
    cp.cuda.runtime.deviceSynchronize()
    assert fn.max_dynamic_smem == smem and float(out[0]) == threads
    with pytest.raises(WSResourceError) as e:
        fn.set_max_dynamic_smem(400 * 1024)
    assert "smem_sum" in str(e.value) and str(400 * 1024) in str(e.value)
    print(f"\n{type(image).__name__} image; opt-in error: {e.value}")


def test_driver_errors_are_named(axpy_kernel):
    _, fn, packer = axpy_kernel
    cp = pytest.importorskip("cupy")
    a = describe(cp.zeros(4, cp.float32), "a")
    with pytest.raises(CudaDriverError, match="CUDA_ERROR_INVALID_VALUE"):
        fn.launch((1, 1, 1), (4096, 1, 1), 0, 0, packer.pack([a, a, 1.0, 4]))
    with pytest.raises(CudaDriverError, match=r"cuModuleLoadData.*CUDA_ERROR"):
        CudaModule(".version 9.0\n.target sm_90\n.address_size 64\nthis is not ptx\n")
    with pytest.raises(CudaDriverError, match="CUDA_ERROR_NOT_FOUND"):
        axpy_kernel[0].get_function("no_such_kernel")


def test_every_driver_entry_point_resolves():
    """runtime/cudriver.py's symbols all exist in this driver, and it names errors."""
    from numba_ws.runtime import cudriver
    for name in cudriver.PROTOTYPES:
        assert cudriver.address_of(name), name
    assert cudriver.error_name(2) == "CUDA_ERROR_OUT_OF_MEMORY"
    assert cudriver.cuDriverGetVersion()[1] >= 12000


@pytest.mark.parametrize("path", ["native", "ctypes"])
def test_the_raw_launch_runs_on_its_stream_and_returns_the_curesult(axpy_kernel, path):
    """The generated launcher's unchecked driver call (the native extension's, and
    ctypes' with no argument types): a non-default stream held behind a sleep (a launch
    on another stream would read x before it is written), random inputs, a NaN-poisoned
    output; then a bad block size comes back as CUDA_ERROR_INVALID_VALUE (1), launching
    nothing."""
    from numba_ws import knobs
    from numba_ws.runtime import native_launch
    cp = pytest.importorskip("cupy")
    _, fn, packer = axpy_kernel
    if path == "native":
        assert native_launch.module(wait=120) is not None, native_launch.build_error()
    fn._raw = None                   # choose the call again, under this path's knob
    with knobs.scope(NUMBA_WS_NATIVE_LAUNCH="0" if path == "ctypes" else None):
        call, handle, pointer = fn.raw_launch()
    fn._raw = None
    assert isinstance(handle, int) == (path == "native")
    rng = np.random.default_rng()
    n, a = 4099, float(rng.uniform(-2, 2))
    want_x = rng.standard_normal(n).astype(np.float32)
    base = rng.standard_normal(n).astype(np.float32)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        out, x = cp.full(n, cp.nan, cp.float32), cp.empty(n, cp.float32)
        cp.cuda.runtime.deviceSynchronize()
        s.launch_host_func(lambda _: __import__("time").sleep(0.2), None)
        x.set(want_x, stream=s)
        out.set(base, stream=s)
        params = packer.pack([describe(out, "out"), describe(x, "x"), a, n])
        err = call(handle, (n + 127) // 128, 1, 1, 128, 1, 1, 0, pointer(s.ptr),
                   pointer(params), None)
        assert err == 0
    s.synchronize()
    want = np.float32(a) * want_x.astype(np.float64) + base
    np.testing.assert_allclose(cp.asnumpy(out), want, rtol=1e-6, atol=1e-6)
    assert call(handle, 1, 1, 1, 4096, 1, 1, 0, pointer(s.ptr), pointer(params), None) == 1
