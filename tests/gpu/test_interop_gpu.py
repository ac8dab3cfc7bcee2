"""numba_ws kernels on CuPy, torch and Numba device arrays, on non-default streams."""
import numpy as np
import pytest

import numba_ws as ws
from kernels import matmul

cp = pytest.importorskip("cupy")
gemm = ws.jit(matmul)
META = dict(BM=128, BN=256, BK=64)
M = N = K = 512


def _host_inputs():
    rng = np.random.default_rng()
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def _err(out, ref):
    out = np.asarray(out, np.float64)
    assert not np.isnan(out).any()
    return np.max(np.abs(out - ref)) / np.max(np.abs(ref))


GRID = ((M // 128) * (N // 256),)


def test_numba_device_arrays():
    from numba import cuda
    a, b, ref = _host_inputs()
    c = cuda.to_device(np.full((M, N), np.nan, np.float16))
    gemm[GRID](cuda.to_device(a), cuda.to_device(b), c, **META)
    cuda.synchronize()
    assert _err(c.copy_to_host(), ref) <= 1e-2


def test_torch_tensors_on_the_current_torch_stream():
    torch = pytest.importorskip("torch")
    a, b, ref = _host_inputs()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        tc = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
        gemm[GRID](ta, tb, tc, **META)            # runs on s, ordered after the copies
        out = tc.cpu().numpy()                    # ordered after the kernel on s
    assert _err(out, ref) <= 1e-2


def test_cupy_arrays_with_an_explicit_stream():
    a, b, ref = _host_inputs()
    s = cp.cuda.Stream(non_blocking=True)
    da, db = cp.asarray(a), cp.asarray(b)
    dc = cp.full((M, N), cp.nan, dtype=cp.float16)
    cp.cuda.runtime.deviceSynchronize()
    gemm[GRID](da, db, dc, stream=s, **META)
    s.synchronize()
    assert _err(cp.asnumpy(dc), ref) <= 1e-2


def test_mixed_host_and_device_arrays_are_refused():
    a, b, _ = _host_inputs()
    with pytest.raises(ws.WSUsageError, match="host"):
        gemm[GRID](a, cp.asarray(b), cp.zeros((M, N), cp.float16), **META)


def test_float64_dot_is_a_compile_error():
    x = cp.zeros((M, K), cp.float64)
    with pytest.raises(ws.WSCompileError, match="dot"):
        gemm[GRID](x, x, cp.zeros((M, N), cp.float16), **META)


class _DLPackOnly:
    """A device array known only through the DLPack protocol (no CAI, no library type)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, stream=None, **kwargs):
        return self._array.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_dlpack_only_objects_and_a_raw_stream_handle():
    """Zero copies: the kernel writes through the DLPack view into CuPy's memory."""
    a, b, ref = _host_inputs()
    s = cp.cuda.Stream(non_blocking=True)
    dc = cp.full((M, N), cp.nan, dtype=cp.float16)
    cp.cuda.runtime.deviceSynchronize()
    gemm[GRID](_DLPackOnly(cp.asarray(a)), _DLPackOnly(cp.asarray(b)), _DLPackOnly(dc),
               stream=s.ptr, **META)
    s.synchronize()
    assert _err(cp.asnumpy(dc), ref) <= 1e-2


def test_in_the_same_module_as_a_cuda_jit_kernel():
    """An ordinary @cuda.jit kernel and a numba_ws kernel share arrays and a module."""
    from numba import cuda

    @cuda.jit
    def copy(src, dst):
        i, j = cuda.grid(2)
        if i < src.shape[0] and j < src.shape[1]:
            dst[i, j] = src[i, j]

    a, b, ref = _host_inputs()
    da, db = cuda.to_device(a), cuda.to_device(b)
    a2 = cuda.device_array_like(da)
    copy[(M // 16, K // 16), (16, 16)](da, a2)
    c = cuda.to_device(np.full((M, N), np.nan, np.float16))
    gemm[GRID](a2, db, c, **META)
    cuda.synchronize()
    assert _err(c.copy_to_host(), ref) <= 1e-2
