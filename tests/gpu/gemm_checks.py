"""Inputs and checks shared by the GPU GEMM tests: fresh random inputs, a NaN-poisoned
output, and ``max|c - ref| / max|ref| <= TOL`` against float64."""
import numpy as np

TOL = 1e-2


def gemm_inputs(M, N, K, dtype):
    """Fresh random a (M, K), b (K, N) of ``dtype`` on the GPU, a NaN-filled fp16 c, and
    the float64 reference of a @ b computed from the rounded inputs."""
    import cupy as cp
    rng = np.random.default_rng()
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    if dtype == "float16":
        da, db = cp.asarray(a, dtype=cp.float16), cp.asarray(b, dtype=cp.float16)
        ref = cp.asnumpy(da).astype(np.float64) @ cp.asnumpy(db).astype(np.float64)
    else:
        import torch
        da = torch.tensor(a, device="cuda", dtype=torch.bfloat16)
        db = torch.tensor(b, device="cuda", dtype=torch.bfloat16)
        ref = da.double().cpu().numpy() @ db.double().cpu().numpy()
    c = cp.full((M, N), cp.nan, dtype=cp.float16)
    return da, db, c, ref


def check_gemm(c, ref):
    """Every element written, relative error within TOL; returns the error."""
    import cupy as cp
    out = cp.asnumpy(c).astype(np.float64)
    assert not np.isnan(out).any(), f"{np.isnan(out).sum()} outputs never written"
    err = np.max(np.abs(out - ref)) / np.max(np.abs(ref))
    bad = np.argwhere(np.abs(out - ref) > TOL * np.max(np.abs(ref)))
    assert err <= TOL, f"relative error {err:.3e}; first bad (row, col): {bad[:5].tolist()}"
    return err


def column_major(b):
    """The same values as ``b`` (K, N) (CuPy or torch), stored column-major: strides
    (itemsize, K * itemsize) bytes."""
    import cupy as cp
    if isinstance(b, cp.ndarray):
        out = cp.asfortranarray(b)
        strides = out.strides
    else:
        out = b.t().contiguous().t()
        strides = tuple(out.element_size() * s for s in out.stride())
    item = strides[0]
    assert item in (2, 4) and strides == (item, item * b.shape[0]), strides
    return out
