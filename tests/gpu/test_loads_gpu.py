"""Loads into shared memory in every layout lower_loads picks, on the GPU, read back with
``codegen.swizzle.part_offset`` (issue 14, item 2: the producer side of loads that feed
element-wise code).

Each case is one tile part: its layout comes from ``passes.lower_loads`` (``element_layout``
for tiles only element-wise code reads, ``layout_part`` for a dot operand) and its copy
from the intrinsics the compiler emits (``gpu_tma_copy`` / ``gpu_cp_async_copy``, with
the mbarrier protocol of ``channel_ops``). A 128-thread @cuda.jit kernel copies the part
at (r0, c0) of an array, waits on the full barrier, and writes every element (r, c) of
the part back from ``part_offset(r, c, rows, box_cols, itemsize, xor)``; the result must
equal the NumPy window bit for bit, zeros past the array's edges (ragged ends, negative
offsets). Layouts: 128 / 64 / 32-byte swizzles, plain rows, narrow tiles (16-byte rows),
1-D arrays as (1, N), a column-major array's transposed view; TMA and cp.async (16 / 8 /
4-byte pieces and the element-by-element path for unaligned column offsets).

Run: python -m pytest tests/gpu/test_loads_gpu.py -q (about 20 s of Numba compiles).
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

from numba_ws.codegen.channel_ops import (  # noqa: E402
    gpu_barriers_ready, gpu_consumer_wait, gpu_init_channel, gpu_producer_acquire,
    gpu_tma_copy)
from numba_ws.codegen.cp_async_ops import (  # noqa: E402
    PRODUCER_THREADS, gpu_cp_async_commit, gpu_cp_async_copy)
from numba_ws.codegen.swizzle import part_offset  # noqa: E402
from numba_ws.passes.lower_loads import element_layout, layout_part  # noqa: E402
from numba_ws.runtime import interop  # noqa: E402
from numba_ws.runtime.specialize import array_info  # noqa: E402
from numba_ws.runtime.tensormap import encode_tiled_2d, tiled_2d_view  # noqa: E402

_part_offset = register_jitable(part_offset)   # inlined into the kernels
_NUMBA_TYPES = {"float16": types.float16, "float32": types.float32,
                "float64": types.float64, "int32": types.int32, "int64": types.int64}


@dataclass
class Case:
    name: str
    dtype: str
    array: tuple          # host array shape; 'F' order when transposed
    tile: tuple           # the part as stored (rows, cols)
    at: tuple             # (r0, c0) in the (view of the) array
    path: str             # "tma" or "cp.async"
    operand: bool = False   # a dot operand: the tensor cores' layout, unrolled cp.async
    transposed: bool = False
    skip: int = 0         # drop this many leading elements (a misaligned base)


CASES = [
    # TMA: 16-byte aligned bases, 16-byte multiple row strides. Unswizzled boxes with rows
    # under 128 bytes ((128, 4) / (64, 4) fp32, (4, 16) fp16, (1, 8) fp16) stopped with an
    # illegal instruction on the H200 (2026-12-03 08:48): lower_loads sends such parts to
    # cp.async (MIN_PLAIN_TMA_BOX_BYTES; tests/test_lower_loads_layouts.py), the cp_ cases
    # below load them.
    Case("tma_swz128_f16", "float16", (100, 200), (64, 64), (64, 160), "tma"),
    Case("tma_swz64_f32", "float32", (50, 36), (16, 16), (40, 24), "tma"),
    Case("tma_swz32_f32", "float32", (50, 36), (8, 8), (48, 32), "tma"),
    Case("tma_swz32_i32", "int32", (64, 64), (16, 8), (56, 60), "tma"),
    Case("tma_swz128_f64", "float64", (30, 20), (8, 16), (24, 8), "tma"),
    Case("tma_1d_1024_f32", "float32", (1000,), (1, 1024), (0, 100), "tma"),
    Case("tma_1d_negative_f32", "float32", (1000,), (1, 64), (0, -20), "tma"),
    Case("tma_transposed_f16", "float16", (200, 100), (16, 64), (90, 160), "tma",
         transposed=True),
    # cp.async: every layout, ragged and negative offsets, unaligned column offsets
    Case("cp_swz128_f16", "float16", (100, 200), (64, 64), (64, 160), "cp.async"),
    Case("cp_swz128_f16_odd_col", "float16", (100, 200), (64, 64), (40, 3), "cp.async"),
    Case("cp_swz64_f32", "float32", (50, 36), (16, 16), (40, 24), "cp.async"),
    Case("cp_swz32_f32_negative", "float32", (50, 36), (8, 8), (-3, -4), "cp.async"),
    Case("cp_swz64_f32_negative_odd", "float32", (50, 36), (16, 16), (-3, -6), "cp.async"),
    Case("cp_narrow_128x1_f32", "float32", (50, 36), (128, 1), (-5, 35), "cp.async"),
    Case("cp_narrow_64x2_f32_odd_col", "float32", (50, 36), (64, 2), (0, 33), "cp.async"),
    Case("cp_plain_4x16_f16", "float16", (100, 200), (4, 16), (98, 190), "cp.async"),
    Case("cp_i64_odd_col", "int64", (30, 20), (8, 16), (24, 5), "cp.async"),
    Case("cp_f64", "float64", (30, 20), (8, 16), (24, 8), "cp.async"),
    Case("cp_1d_1024_f32", "float32", (1000,), (1, 1024), (0, 100), "cp.async"),
    Case("cp_1d_8_f32", "float32", (1000,), (1, 8), (0, 996), "cp.async"),
    Case("cp_1d_4byte_pieces_f32", "float32", (1001,), (1, 64), (0, 10), "cp.async", skip=1),
    Case("cp_2d_4byte_pieces_f32", "float32", (50, 37), (16, 16), (40, 30), "cp.async",
         skip=1),
    Case("cp_8byte_pieces_f16", "float16", (100, 196), (8, 64), (90, 150), "cp.async"),
    Case("cp_transposed_f16", "float16", (200, 100), (16, 64), (90, 160), "cp.async",
         transposed=True),
    Case("cp_operand_f16", "float16", (200, 100), (128, 64), (128, 64), "cp.async",
         operand=True),
]


def _layout(case, itemsize):
    """(phys_cols, box_cols, xor, swizzle, boxes, bytes) as lower_loads lays the part out."""
    if case.operand:
        nbytes, boxes, box_cols, swizzle = layout_part(case.tile, itemsize)
        return case.tile[1], box_cols, True, swizzle, boxes, nbytes
    lay = element_layout(case.tile, itemsize)
    return (lay["phys_cols"], lay["box_cols"], lay["xor"], lay["swizzle"], lay["boxes"],
            lay["bytes"])


def _kernel(case, itemsize, vec):
    rows, cols = case.tile
    phys_cols, box_cols, xor, swizzle, boxes, nbytes = _layout(case, itemsize)
    slot = -(-nbytes // 1024) * 1024
    full, empty = slot, slot + 8
    box_bytes = rows * box_cols * itemsize
    tma = case.path == "tma"
    arrivals = 1 if tma else PRODUCER_THREADS
    tr, operand, xor_i = int(case.transposed), int(case.operand), int(xor)
    total = rows * cols
    ntype = _NUMBA_TYPES[case.dtype]

    if tma:
        def k(x, out, tmap, r0, c0):
            gpu_init_channel(full, empty, 1, arrivals, 1)
            gpu_barriers_ready(90)
            gpu_producer_acquire(empty, full, 0, 0, nbytes)
            gpu_tma_copy(0, slot, 0, tmap, 0, full, r0, c0, boxes, box_cols, box_bytes)
            gpu_consumer_wait(full, 0, 0, 90)
            dyn = cuda.shared.array(0, dtype=ntype)
            for i in range(cuda.threadIdx.x, total, PRODUCER_THREADS):
                r = i // cols
                c = i % cols
                out[r, c] = dyn[_part_offset(r, c, rows, box_cols, itemsize, xor) // itemsize]
    else:
        def k(x, out, tmap, r0, c0):
            gpu_init_channel(full, empty, 1, arrivals, 1)
            gpu_barriers_ready(90)
            gpu_cp_async_copy(0, slot, 0, x, r0, c0, (rows, cols), vec, tr, phys_cols,
                              box_cols, xor_i, operand)
            gpu_cp_async_commit(full, 0, 90)
            gpu_consumer_wait(full, 0, 0, 90)
            dyn = cuda.shared.array(0, dtype=ntype)
            for i in range(cuda.threadIdx.x, total, PRODUCER_THREADS):
                r = i // cols
                c = i % cols
                out[r, c] = dyn[_part_offset(r, c, rows, box_cols, itemsize, xor) // itemsize]
    return cuda.jit(k), slot + 16, (box_cols, swizzle)


def _host_array(case, rng):
    dt = np.dtype(case.dtype)
    n = int(np.prod(case.array)) + case.skip
    if dt.kind == "i":
        flat = rng.integers(1, 2 ** 30, n).astype(dt)
    else:
        flat = rng.uniform(-8, 8, n).astype(dt)
    if case.skip:   # a view whose base is ``skip`` elements past an aligned allocation
        return flat, flat[case.skip:].reshape(case.array)
    shaped = flat.reshape(case.array)
    return shaped, np.asfortranarray(shaped) if case.transposed else shaped


def _expected(view2d, tile, at):
    rows, cols = tile
    out = np.zeros(tile, view2d.dtype)
    for r in range(rows):
        for c in range(cols):
            gr, gc = at[0] + r, at[1] + c
            if 0 <= gr < view2d.shape[0] and 0 <= gc < view2d.shape[1]:
                out[r, c] = view2d[gr, gc]
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_load_lands_where_part_offset_says(case):
    if cuda.get_current_device().compute_capability < (9, 0):
        pytest.skip("the kernels arrive with fence.proxy.async / try_wait (sm_90)")
    rng = np.random.default_rng(len(case.name))
    base, host = _host_array(case, rng)
    dev_base = cp.asarray(base)
    dev = dev_base[case.skip:].reshape(case.array) if case.skip else cp.asarray(host)
    if case.transposed:
        dev = cp.asfortranarray(dev)
    itemsize = host.dtype.itemsize
    info = array_info(None, {"x": interop.describe(dev, "x")})["x"]
    assert info["transposed"] == case.transposed
    if case.path == "tma":
        assert info["tma_ok"], info["why"]
    assert info["vec"] >= 4, info["why"]
    kern, smem, (box_cols, swizzle) = _kernel(case, itemsize, info["vec"])

    view = host.T if case.transposed else host
    view2d = view.reshape(1, -1) if view.ndim == 1 else view
    tmap_dev = cp.zeros(128, cp.uint8)
    if case.path == "tma":
        ptr = dev.data.ptr
        shape, stride = tiled_2d_view(dev.shape, dev.strides, itemsize, case.transposed)
        blob = encode_tiled_2d(ptr, itemsize, shape, stride, (case.tile[0], box_cols),
                               swizzle, dtype=case.dtype, name="x")
        tmap_dev = cp.asarray(np.frombuffer(blob, np.uint8))
    # poisoned: every byte 0xFF (NaN for the float types), so an unwritten element shows
    out = cp.asarray(np.full(case.tile, -1, f"i{itemsize}").view(host.dtype))
    kern[1, PRODUCER_THREADS, 0, smem](dev, out, tmap_dev.data.ptr, case.at[0], case.at[1])
    cuda.synchronize()
    got = cp.asnumpy(out)
    want = _expected(view2d, case.tile, case.at)
    bad = got.view(f"u{itemsize}") != want.view(f"u{itemsize}")
    assert not bad.any(), (f"{int(bad.sum())} of {bad.size} elements wrong, first at "
                           f"{np.argwhere(bad)[0].tolist()}: got {got[bad][:8]}, "
                           f"want {want[bad][:8]}")
