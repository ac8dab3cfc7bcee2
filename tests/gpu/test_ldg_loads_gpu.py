"""Any shape and stride on the GPU (issue 15, item 6): the ld.global path, on the H200.

Two parts:
- the copy itself: a 128-thread @cuda.jit kernel runs ``gpu_ldg_copy`` + ``gpu_ldg_commit``
  (the mbarrier protocol of ``channel_ops``) on one tile part of an array and writes
  every element (r, c) of the part back from ``part_offset(r, c, ...)``; it must equal
  the NumPy window bit for bit, zeros outside the array (ragged ends, negative offsets).
  Arrays: odd fp16 pitch (2-byte pieces), int8 (1..16-byte pieces, pieces partly past
  the edge, unaligned column offsets), views without a contiguous dimension (the
  run-time strides), column-major views, 1-D arrays; layouts: the 128 / 64 / 32-byte
  swizzles of dot operands, swizzled and plain element-wise rows. Output bytes start as
  0xFF (NaN for the float types).
- whole kernels through ``ws.jit``: GEMMs with K = 7, 129, 4001 (fp16 and bf16), on
  column-major and negative-stride views, ``matmul_nt`` with odd K; copies (fp16 odd
  pitch, int8, reversed views) and softmax on an odd pitch; ``num_consumer_groups`` 1
  and 2, a few compiled for sm_80 (``NUMBA_WS_CC=8.0``). Each test names the path every
  load must take (the plan's ``member["path"]``) and checks the launched PTX has the
  ld.global copy where the plan says so. Float64 references, NaN-poisoned outputs
  (GEMMs: ``max|c - ref| / max|ref| <= 1e-2``; softmax 1e-2 relative; copies exact).

Every test builds its own ``ws.jit`` kernel: one kernel object launched with ``a`` and
then with ``a[::-1]`` would reuse ``a``'s specialization, because the launch cache key
(``runtime/fastpath.array_layout``) does not see the sign of strides yet;
:func:`test_reversed_view_after_its_array_on_one_kernel` shows it.

Run: python -m pytest tests/gpu/test_ldg_loads_gpu.py -q (about 60 compiles).
"""
import os
import sys
from dataclasses import dataclass

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

cp = pytest.importorskip("cupy")
from numba import cuda  # noqa: E402
from numba.cuda import types  # noqa: E402
from numba.cuda.extending import register_jitable  # noqa: E402

import numba_ws as ws  # noqa: E402
from numba_ws import knobs  # noqa: E402
from numba_ws.codegen.channel_ops import (  # noqa: E402
    gpu_barriers_ready, gpu_consumer_wait, gpu_init_channel)
from numba_ws.codegen.cp_async_ops import PRODUCER_THREADS  # noqa: E402
from numba_ws.codegen.ldg_ops import gpu_ldg_commit, gpu_ldg_copy  # noqa: E402
from numba_ws.codegen.swizzle import part_offset  # noqa: E402
from numba_ws.passes.lower_loads import element_layout, layout_part  # noqa: E402
from numba_ws.runtime import interop  # noqa: E402
from numba_ws.runtime.specialize import array_info  # noqa: E402

import kernels  # noqa: E402
import kernels_tiles as kt  # noqa: E402
from gemm_checks import check_gemm  # noqa: E402

_part_offset = register_jitable(part_offset)
_NUMBA_TYPES = {"float16": types.float16, "float32": types.float32,
                "float64": types.float64, "int32": types.int32, "int8": types.int8,
                "int16": types.int16}


# -- the copy ----------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    dtype: str
    array: tuple          # shape of the allocation
    view: object          # the array's view that is copied (a function of the allocation)
    tile: tuple           # the part as stored (rows, cols)
    at: tuple             # (r0, c0) in the (transposed, for column-major) view
    vec: int              # the piece alignment array_info must report
    operand: bool = False   # a dot operand: the tensor cores' swizzled layout
    transposed: bool = False


def _same(x):
    return x


CASES = [
    Case("f16_odd_pitch", "float16", (100, 71), _same, (64, 64), (40, 3), 2),
    Case("f16_odd_pitch_ragged", "float16", (100, 71), _same, (64, 64), (64, 60), 2),
    Case("f16_odd_pitch_negative_offsets", "float16", (100, 71), _same, (16, 16),
         (-5, -7), 2),
    Case("f16_operand_swz128", "float16", (300, 129), _same, (128, 64), (256, 128), 2,
         operand=True),
    Case("f16_operand_swz64", "float16", (300, 129), _same, (64, 32), (0, 112), 2,
         operand=True),
    Case("f16_operand_swz32", "float16", (300, 7), _same, (64, 16), (250, 0), 2,
         operand=True),
    Case("f16_column_major_odd", "float16", (129, 100), cp.asfortranarray, (16, 64),
         (90, 100), 2, transposed=True),   # columns 258 bytes apart; view (100, 129)
    Case("f16_1d_offset", "float16", (1001,), lambda x: x[1:], (1, 256), (0, 900), 2),
    Case("i16_odd_pitch", "int16", (60, 33), _same, (16, 48), (50, 0), 2),
    Case("i8_odd_pitch", "int8", (100, 71), _same, (32, 64), (80, 10), 1),
    Case("i8_16_byte_pieces", "int8", (100, 128), _same, (32, 64), (80, 64), 16),
    Case("i8_16_byte_pieces_ragged", "int8", (100, 128), lambda x: x[:, :121], (32, 64),
         (80, 64), 16),    # the piece of columns 112-127 is partly past the edge (121)
    Case("i8_unaligned_column_offset", "int8", (100, 128), _same, (32, 64), (10, 3), 16),
    Case("i8_negative_aligned_offset", "int8", (100, 128), _same, (32, 64), (-8, -16), 16),
    Case("i8_8_byte_pieces", "int8", (100, 120), _same, (32, 64), (50, 96), 8),
    Case("i8_2_byte_pieces", "int8", (100, 66), _same, (16, 64), (90, 40), 2),
    Case("i8_1d", "int8", (1000,), _same, (1, 300), (0, 800), 16),
    Case("f32_every_other_column", "float32", (50, 72), lambda x: x[:, ::2], (16, 16),
         (40, 30), 0),
    Case("f32_narrow_every_third_column", "float32", (200, 30), lambda x: x[:, ::3],
         (128, 1), (100, 9), 0),
    Case("f64_8_byte_pieces", "float64", (30, 21), _same, (8, 16), (24, 8), 8),
    Case("i32_every_other_row", "int32", (64, 40), lambda x: x[::2], (16, 8), (24, 36),
         16),
]


def _layout(case, itemsize):
    """(phys_cols, box_cols, xor, bytes) as lower_loads lays the part out."""
    if case.operand:
        nbytes, boxes, box_cols, swizzle = layout_part(case.tile, itemsize)
        return case.tile[1], box_cols, True, nbytes
    lay = element_layout(case.tile, itemsize)
    return lay["phys_cols"], lay["box_cols"], lay["xor"], lay["bytes"]


def _copy_kernel(case, itemsize, vec):
    rows, cols = case.tile
    phys_cols, box_cols, xor, nbytes = _layout(case, itemsize)
    slot = -(-nbytes // 1024) * 1024
    full, empty = slot, slot + 8
    tr, xor_i = int(case.transposed), int(xor)
    total = rows * cols
    ntype = _NUMBA_TYPES[case.dtype]

    def k(x, out, r0, c0):
        gpu_init_channel(full, empty, 1, PRODUCER_THREADS, 1)
        gpu_barriers_ready(90)
        gpu_ldg_copy(0, slot, 0, x, r0, c0, (rows, cols), vec, tr, phys_cols, box_cols,
                     xor_i)
        gpu_ldg_commit(full, 0, 90)
        gpu_consumer_wait(full, 0, 0, 90)
        dyn = cuda.shared.array(0, dtype=ntype)
        for i in range(cuda.threadIdx.x, total, PRODUCER_THREADS):
            r = i // cols
            c = i % cols
            out[r, c] = dyn[_part_offset(r, c, rows, box_cols, itemsize, xor) // itemsize]
    return cuda.jit(k), slot + 16


def _values(rng, shape, dtype):
    dt = np.dtype(dtype)
    if dt.kind == "i":
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -2 ** 30), min(info.max, 2 ** 30), shape).astype(dt)
    return rng.uniform(-8, 8, shape).astype(dt)


def _window(view2d, tile, at):
    rows, cols = tile
    out = np.zeros(tile, view2d.dtype)
    for r in range(rows):
        for c in range(cols):
            gr, gc = at[0] + r, at[1] + c
            if 0 <= gr < view2d.shape[0] and 0 <= gc < view2d.shape[1]:
                out[r, c] = view2d[gr, gc]
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_ldg_copy_lands_where_part_offset_says(case):
    if cuda.get_current_device().compute_capability < (9, 0):
        pytest.skip("the kernel arrives with fence.proxy.async / try_wait (sm_90)")
    rng = np.random.default_rng(len(case.name))
    dev = case.view(cp.asarray(_values(rng, case.array, case.dtype)))
    itemsize = dev.dtype.itemsize
    info = array_info(None, {"x": interop.describe(dev, "x")})["x"]
    assert (info["vec"], info["transposed"]) == (case.vec, case.transposed), info
    kern, smem = _copy_kernel(case, itemsize, info["vec"])
    host = cp.asnumpy(dev)
    view = host.T if case.transposed else host
    view2d = view.reshape(1, -1) if view.ndim == 1 else view
    out = cp.asarray(np.full(case.tile, -1, f"i{itemsize}").view(host.dtype))
    kern[1, PRODUCER_THREADS, 0, smem](dev, out, case.at[0], case.at[1])
    cuda.synchronize()
    got = cp.asnumpy(out)
    want = _window(view2d, case.tile, case.at)
    bad = got.view(f"u{itemsize}") != want.view(f"u{itemsize}")
    assert not bad.any(), (f"{int(bad.sum())} of {bad.size} elements wrong, first at "
                           f"{np.argwhere(bad)[0].tolist()}: got {got[bad][:8]}, "
                           f"want {want[bad][:8]}")


# -- whole kernels -----------------------------------------------------------------------

GEMM = dict(BM=128, BN=128, BK=64)


def _host64(x):
    if isinstance(x, cp.ndarray):
        return cp.asnumpy(x).astype(np.float64)
    return x.double().cpu().numpy()


def _random(shape, dtype, rng):
    """A CuPy array (fp16) or a torch tensor (bf16) of standard-normal values."""
    a = rng.standard_normal(shape, dtype=np.float32)
    if dtype == "bfloat16":
        torch = pytest.importorskip("torch")
        return torch.tensor(a, device="cuda", dtype=torch.bfloat16)
    return cp.asarray(a, dtype=cp.float16)


def _paths(kern, args, meta):
    state = kern.partition(*args, **meta)
    return {m["array"]: m["path"] for ch in state.ws.channels for m in ch.members}


def _launched_ptx(kern):
    return [loaded.art.ptx for loaded in kern._loaded.values()]


def _run(fn, args, grid, want, cc=(9, 0, "a"), **meta):
    """A fresh kernel: the plan (for ``cc``) must take the paths ``want``; launch it once
    (for the GPU's compute capability, or ``NUMBA_WS_CC``)."""
    kern = ws.jit(fn)
    assert _paths(kern, args, dict(meta, cc=cc)) == want
    kern[grid](*args, **meta)
    cp.cuda.runtime.deviceSynchronize()
    ptx = _launched_ptx(kern)
    assert len(ptx) == 1
    if "ld.global" in want.values():
        assert "@p ld.global." in ptx[0]
    return ptx[0]


def _gemm(fn, a, b, c, want, groups, cc=(9, 0, "a")):
    M, N = c.shape
    grid = (ws.cdiv(M, GEMM["BM"]) * ws.cdiv(N, GEMM["BN"]),)
    return _run(fn, (a, b, c), grid, want, cc=cc, num_consumer_groups=groups, **GEMM)


def _nan_c(M, N):
    return cp.full((M, N), cp.nan, dtype=cp.float16)


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("K", [7, 129, 4001])
def test_gemm_odd_k(K, dtype, groups):
    """a (M, K): 2K-byte rows, ld.global; b shares a's channel: cp.async."""
    rng = np.random.default_rng(K)
    M, N = 300, 200
    a, b, c = _random((M, K), dtype, rng), _random((K, N), dtype, rng), _nan_c(M, N)
    _gemm(kernels.matmul, a, b, c, {"a": "ld.global", "b": "cp.async"}, groups)
    check_gemm(c, _host64(a) @ _host64(b))


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("K", [7, 129])
def test_gemm_column_major_b_odd_k(K, dtype, groups):
    """b = bt.T of a row-major (N, K): column-major with 2K-byte columns, read through
    its transposed view by ld.global (K-major in shared memory)."""
    rng = np.random.default_rng(K + 1)
    M, N = 300, 200
    a, bt, c = _random((M, K), dtype, rng), _random((N, K), dtype, rng), _nan_c(M, N)
    b = bt.T if isinstance(bt, cp.ndarray) else bt.t()
    _gemm(kernels.matmul, a, b, c, {"a": "ld.global", "b": "ld.global"}, groups)
    check_gemm(c, _host64(a) @ _host64(b))


@pytest.mark.parametrize("groups", [1, 2])
def test_gemm_nt_odd_k(groups):
    rng = np.random.default_rng(5)
    a, bt, c = _random((300, 129), "float16", rng), _random((200, 129), "float16", rng), \
        _nan_c(300, 200)
    _gemm(kernels.matmul_nt, a, bt, c, {"a": "ld.global", "bt": "ld.global"}, groups)
    check_gemm(c, _host64(a) @ _host64(bt).T)


NEGATIVE = {
    "a_rows": (lambda a, b: (a[::-1], b), {"a": "cp.async", "b": "cp.async"}),
    "b_rows": (lambda a, b: (a, b[::-1]), {"a": "cp.async", "b": "cp.async"}),
    "a_cols": (lambda a, b: (a[:, ::-1], b), {"a": "ld.global", "b": "cp.async"}),
    "b_cols": (lambda a, b: (a, b[:, ::-1]), {"a": "cp.async", "b": "ld.global"}),
    "both_every_other": (lambda a, b: (a[::-1, ::-2], b[::-2]),
                         {"a": "ld.global", "b": "cp.async"}),
}


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("name", list(NEGATIVE))
def test_gemm_negative_stride_views(name, groups):
    """Never TMA: cp.async where the rows stay contiguous (pieces along them), ld.global
    where they do not; the reference is computed from the same views."""
    view, want = NEGATIVE[name]
    rng = np.random.default_rng(len(name))
    a, b = view(_random((300, 272), "float16", rng), _random((272, 400), "float16", rng))
    c = _nan_c(a.shape[0], b.shape[1])
    _gemm(kernels.matmul, a, b, c, want, groups)
    check_gemm(c, _host64(a) @ _host64(b))


def test_gemm_odd_k_on_a_reversed_array():
    """K = 129 and a[::-1]: rows 258 bytes apart, going down: ld.global, negative pitch."""
    rng = np.random.default_rng(9)
    a = _random((300, 129), "float16", rng)[::-1]
    b, c = _random((129, 200), "float16", rng), _nan_c(300, 200)
    _gemm(kernels.matmul, a, b, c, {"a": "ld.global", "b": "cp.async"}, 2)
    check_gemm(c, _host64(a) @ _host64(b))


@pytest.mark.parametrize("case", ["K129", "K7_column_major_b", "K4001_negative"])
def test_gemm_odd_k_compiled_for_sm80(case):
    rng = np.random.default_rng(11)
    with knobs.scope(NUMBA_WS_CC="8.0"):
        if case == "K129":
            a, b = _random((300, 129), "float16", rng), _random((129, 200), "float16", rng)
            want = {"a": "ld.global", "b": "cp.async"}
        elif case == "K7_column_major_b":
            a, b = _random((300, 7), "float16", rng), _random((200, 7), "float16", rng).T
            want = {"a": "ld.global", "b": "ld.global"}
        else:
            a = _random((256, 4001), "float16", rng)[::-1]
            b = _random((4001, 256), "float16", rng)
            want = {"a": "ld.global", "b": "cp.async"}
        c = _nan_c(a.shape[0], b.shape[1])
        ptx = _gemm(kernels.matmul, a, b, c, want, 2, cc=(8, 0))
    assert ".target sm_80" in ptx and "fence.proxy.async" not in ptx
    check_gemm(c, _host64(a) @ _host64(b))


def _poisoned(shape, dtype):
    """A NaN-filled output (int: every byte 0x7F) with two guard rows after it; the view
    is the first ``shape[0]`` rows."""
    dt = np.dtype(dtype)
    fill = np.nan if dt.kind == "f" else np.iinfo(dt).max
    base = cp.full((shape[0] + 2,) + tuple(shape[1:]), fill, dtype=dt)
    return base, base[:shape[0]]


def _check_guard(base, rows):
    guard = cp.asnumpy(base[rows:])
    dt = guard.dtype
    assert (np.isnan(guard).all() if dt.kind == "f" else (guard == np.iinfo(dt).max).all()), \
        "a store past the last row"


COPIES = {
    "f16_odd_pitch": (lambda r: cp.asarray(r.uniform(-1000, 1000, (300, 71)), cp.float16),
                      "ld.global"),
    "f16_reversed_every_other": (lambda r: cp.asarray(r.uniform(-9, 9, (300, 142)),
                                                      cp.float16)[::-1, ::-2], "ld.global"),
    "f32_reversed_rows": (lambda r: cp.asarray(r.uniform(-9, 9, (300, 72)),
                                               cp.float32)[::-1], "cp.async"),
    "i8_odd_pitch": (lambda r: cp.asarray(r.integers(-128, 128, (300, 71)), cp.int8),
                     "ld.global"),
    "i8_reversed_columns": (lambda r: cp.asarray(r.integers(-128, 128, (300, 128)),
                                                 cp.int8)[:, ::-1], "ld.global"),
}


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("name", list(COPIES))
def test_copy(name, groups):
    """y = x exactly, x through ld.global (or cp.async: reversed rows stay contiguous)."""
    make, path = COPIES[name]
    x = make(np.random.default_rng(len(name)))
    base, y = _poisoned(x.shape, x.dtype)
    M, N = x.shape
    _run(kt.copy2d, (x, y), (ws.cdiv(M, 64), ws.cdiv(N, 64)), {"x": path},
         num_consumer_groups=groups, BM=64, BN=64)
    got, want = cp.asnumpy(y), cp.asnumpy(x)
    assert (got.view(f"u{got.itemsize}") == want.view(f"u{want.itemsize}")).all()
    _check_guard(base, M)


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_softmax_odd_pitch(dtype, groups):
    """x = the first 64 columns of a (300, 71) array: rows 71 elements apart."""
    rng = np.random.default_rng(3)
    big = cp.asarray(rng.uniform(-8, 8, (300, 71)), dtype)
    x = big[:, :64]
    base, y = _poisoned((300, 64), dtype)
    want = {"x": "ld.global" if dtype == "float16" else "cp.async"}
    _run(kt.softmax, (x, y), (ws.cdiv(300, 64),), want, num_consumer_groups=groups,
         BM=64, BN=64)
    ref = cp.asnumpy(x).astype(np.float64)
    e = np.exp(ref - ref.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    got = cp.asnumpy(y).astype(np.float64)
    assert not np.isnan(got).any()
    assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) <= 1e-2
    _check_guard(base, 300)


def test_softmax_odd_pitch_compiled_for_sm80():
    rng = np.random.default_rng(4)
    x = cp.asarray(rng.uniform(-8, 8, (300, 71)), cp.float16)[:, :64]
    base, y = _poisoned((300, 64), "float16")
    with knobs.scope(NUMBA_WS_CC="8.0"):
        ptx = _run(kt.softmax, (x, y), (ws.cdiv(300, 64),), {"x": "ld.global"}, cc=(8, 0),
                   num_consumer_groups=2, BM=64, BN=64)
    assert ".target sm_80" in ptx
    ref = cp.asnumpy(x).astype(np.float64)
    e = np.exp(ref - ref.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    assert np.max(np.abs(cp.asnumpy(y).astype(np.float64) - ref)) <= 1e-2 * np.max(ref)
    _check_guard(base, 300)


def test_reversed_view_after_its_array_on_one_kernel():
    """One kernel launched with a (TMA) and then a[::-1] (must not be TMA)."""
    rng = np.random.default_rng(13)
    kern = ws.jit(kernels.matmul)
    a, b = _random((256, 256), "float16", rng), _random((256, 256), "float16", rng)
    grid = (ws.cdiv(256, 128) * ws.cdiv(256, 128),)
    for x in (a, a[::-1]):
        c = _nan_c(256, 256)
        kern[grid](x, b, c, **GEMM)
        cp.cuda.runtime.deviceSynchronize()
        check_gemm(c, _host64(x) @ _host64(b))
