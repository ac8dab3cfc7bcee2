"""The 16-byte epilogue path (codegen/epilogue.py) modelled in NumPy: the same
``quad_transpose`` / ``wide_groups`` / ``pair_coords`` the codegen runs, on 32 lanes of
a warp with ``shfl.sync.bfly`` as an index permutation. Every element of the tile must
land at its own (row, column), each exactly once; plus PTX checks via ptxas."""
import numpy as np
import pytest

import numba_ws as ws
import kernels
from numba_ws.codegen.epilogue import pair_coords, quad_transpose, wide_groups
from ptx_tools import assemble, resources

LANES = np.arange(32)


def _lane_values(tile, warp, per_block):
    """Per register pair idx: the (32,) packed pair ids each lane holds (wgmma layout)."""
    ids = {}
    for idx in range(0, per_block * (tile.shape[0] // 64), 2):
        dr, dc = pair_coords(idx, per_block)
        rows = 16 * warp + LANES // 4 + dr
        cols = 2 * (LANES % 4) + dc
        ids[idx] = tile[rows, cols // 2]                  # one id per 2-column pair
    return ids


@pytest.mark.parametrize("rows,cols", [(64, 256), (128, 128), (64, 32), (128, 64)])
def test_wide_path_writes_every_pair_once_in_place(rows, cols):
    per_block = cols // 2
    pair_ids = np.arange(rows * cols // 2).reshape(rows, cols // 2)
    written = np.full((rows, cols // 2), -1)
    t = LANES % 4
    t_bits = [(t & 2) != 0, (t & 1) != 0]
    shfl = lambda v, mask: v[LANES ^ mask]                 # noqa: E731
    for warp in range(4):
        held = _lane_values(pair_ids, warp, per_block)
        for idxs in wide_groups(rows // 64 * per_block):
            out = quad_transpose([held[i] for i in idxs], t_bits, np.where, shfl)
            dr, dc = pair_coords(idxs[0], per_block)
            row = 16 * warp + LANES // 4 + dr
            col = 8 * t + dc                                  # lane's first column
            for v in range(4):                                # 16 bytes = 4 pairs
                cell = written[row, col // 2 + v]
                assert (cell == -1).all(), "a pair written twice"
                written[row, col // 2 + v] = out[v]
    np.testing.assert_array_equal(written, pair_ids)


def test_quad_transpose_is_a_transpose():
    x = [np.arange(4) * 10 + v for v in range(4)]         # lane t, value v -> 10 t + v
    t = np.arange(4)
    y = quad_transpose(x, [(t & 2) != 0, (t & 1) != 0], np.where,
                       lambda v, mask: v[np.arange(4) ^ mask])
    for v in range(4):
        np.testing.assert_array_equal(y[v], 10 * v + t)      # lane t's y[v] = lane v's x[t]


def test_epilogue_ptx_has_the_wide_path_without_spills(tmp_path):
    a = np.zeros((512, 256), np.float16)
    ptx = ws.jit(kernels.matmul).inspect_ptx(a, a.T.copy(), np.zeros((512, 512), np.float16),
                                             BM=128, BN=256, BK=64, tma_store=0)
    # (tma_store=0: the direct epilogue alone; the default sends edge tiles through TMA,
    # tests/test_staged_stores.py) the shared consumer body stores each group's 64x256 slice: 16 KB by 1 KB stores
    assert ptx.count("st.global.v4") == 16
    assert ptx.count("shfl.sync.bfly.b32") >= 64
    regs, spills, stack = resources(assemble(ptx, tmp_path))
    assert spills == [0, 0] and stack == 0   # no stack frame: it slows every CTA launch
    # the edge path: one predicated scalar store per element, no pair branches, no local
    assert ptx.count("st.u16") == 128 and "st.v2" not in ptx and ".local" not in ptx
