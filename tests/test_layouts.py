"""Register layouts (numba_ws/codegen/layouts.py) against NumPy models of what the
threads of a warp group hold, and the algorithms of codegen/regtile.py run on them."""
import itertools

import numpy as np
import pytest

from numba_ws.codegen import layouts as L
from numba_ws.codegen.fragments import col_of, row_of
from numba_ws.codegen.reduce_ops import reduce_scratch_bytes
from numba_ws.codegen.regtile import convert_needs_scratch
from numba_ws.codegen.swizzle import part_offset

SHAPES = [(1, 1), (1, 8), (1, 1024), (2, 4096), (4, 4), (8, 1), (64, 2), (128, 1), (64, 64),
          (128, 128), (32, 256), (256, 256)]


def held(layout):
    """(threads, registers) array of the flat index r * C + c each register holds."""
    rows, cols = layout.shape
    out = np.empty((L.THREADS, layout.count), np.int64)
    for w, lane in itertools.product(range(L.WARPS), range(L.LANES)):
        for i in range(layout.count):
            r, c = layout.coord(i, lane, w)
            out[32 * w + lane, i] = r * cols + c
    return out


def test_acc_is_the_wgmma_fragment_map():
    layout = L.acc(128, 64).check()
    for i, lane, w in itertools.product(range(layout.count), range(32), range(4)):
        mi, k = divmod(i, 32)
        assert layout.coord(i, lane, w) == (64 * mi + row_of(k, lane, w), col_of(k, lane))


@pytest.mark.parametrize("rows,cols", [(64, 8), (64, 24), (128, 256), (192, 64)])
def test_acc_covers_its_tile_once(rows, cols):
    layout = L.acc(rows, cols).check()
    counts = np.bincount(held(layout).ravel(), minlength=rows * cols)
    assert (counts == 1).all()                # no replicas in the accumulator layout


def test_acc_refuses_shapes_wgmma_cannot_make():
    with pytest.raises(ValueError, match="rows % 64"):
        L.acc(32, 64)
    with pytest.raises(ValueError):
        L.acc(64, 12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
def test_blocked_covers_the_tile(shape, itemsize):
    layout = L.blocked(shape, itemsize).check()
    counts = np.bincount(held(layout).ravel(), minlength=shape[0] * shape[1])
    replicas = (L.LANES >> bin(layout.replica_lane_mask).count("1")) * \
        (L.WARPS >> bin(layout.replica_warp_mask).count("1"))
    # every element held by the same number of threads: 128 / owners
    assert (counts == L.THREADS // replicas).all()
    owners = [(lane, w) for w in range(4) for lane in range(32) if layout.is_owner(lane, w)]
    assert len(owners) == replicas
    owned = sorted(r for lane, w in owners for r in held(layout)[32 * w + lane])
    assert owned == list(range(shape[0] * shape[1]))   # the owners hold each element once


def test_blocked_vectors_are_16_bytes_when_the_tile_allows():
    assert L.blocked((64, 128), 4).runs(4)[0] == (0, 4)
    assert L.blocked((64, 64), 2).runs(8)[0] == (0, 8)
    assert L.blocked((64, 2), 4).runs(4)[0] == (0, 2)
    assert L.blocked((16, 16), 8).runs(2)[0] == (0, 2)


def test_blocked_refuses_non_power_of_two_shapes():
    with pytest.raises(ValueError, match="power-of-two"):
        L.blocked((96, 64), 4)


def test_one_dimensional_tiles_use_a_row():
    assert L.shape2d((256,)) == (1, 256)
    assert L.blocked((256,), 4).shape == (1, 256)


@pytest.mark.parametrize("parent", [L.acc(128, 64), L.acc(64, 256), L.blocked((64, 128), 4),
                                    L.blocked((1, 1024), 2), L.blocked((128, 1), 4)])
@pytest.mark.parametrize("axis", [0, 1])
def test_slice_holds_what_the_reduction_leaves(parent, axis):
    """Every thread of the parent holds, in the slice, exactly the kept coordinates of
    the elements it held: a reduction needs no data movement beyond the axis."""
    vec = L.slice_of(parent, axis).check()
    for w, lane in itertools.product(range(4), range(32)):
        kept = {(r, 0) if axis == 1 else (0, c)
                for r, c in (parent.coord(i, lane, w) for i in range(parent.count))}
        assert {vec.coord(j, lane, w) for j in range(vec.count)} == kept
    index = L.broadcast_index(vec, parent, axis)
    for i, lane, w in itertools.product(range(parent.count), range(32), range(4)):
        r, c = parent.coord(i, lane, w)
        assert vec.coord(index[i], lane, w) == ((r, 0) if axis == 1 else (0, c))


def test_slices_compare_by_content():
    """Attention's row statistics: the slice of the (BM, BN) and (BM, D) accumulators."""
    assert L.slice_of(L.acc(128, 64), 1) == L.slice_of(L.acc(128, 128), 1)
    assert L.slice_of(L.acc(128, 64), 1) != L.slice_of(L.acc(128, 64), 0)
    assert L.broadcast_index(L.slice_of(L.acc(128, 64), 0), L.acc(128, 64), 1) is None


def test_transposed_swaps_coordinates():
    layout = L.blocked((32, 128), 4)
    t = L.transposed(layout).check()
    for i, lane, w in itertools.product(range(layout.count), range(32), range(4)):
        r, c = layout.coord(i, lane, w)
        assert t.coord(i, lane, w) == (c, r)


def reduce_model(layout, axis, values, combine):
    """reduce_ops.gpu_tile_reduce's algorithm on a (threads, registers) array: per output
    register a tree over the thread's registers with that kept coordinate, a butterfly
    over the lane bits along ``axis``, then the warps along ``axis`` combined."""
    out_ly = L.slice_of(layout, axis)
    index = {rc: j for j, rc in enumerate(out_ly.regs)}
    groups = [[] for _ in out_ly.regs]
    for i, rc in enumerate(layout.regs):
        groups[index[(rc[0], 0) if axis == 1 else (0, rc[1])]].append(i)
    part = np.stack([combine.reduce(values[:, g], axis=1) for g in groups], axis=1)
    for b, basis in enumerate(layout.lanes):
        if basis[axis]:
            partner = np.arange(128) ^ (1 << b)
            part = combine(part, part[partner])
    for b, basis in enumerate(layout.warps):
        if basis[axis]:
            partner = np.arange(128) ^ (32 << b)
            part = combine(part, part[partner])
    return out_ly, part


@pytest.mark.parametrize("layout", [L.acc(128, 64), L.blocked((64, 128), 4),
                                    L.blocked((128, 16), 2), L.blocked((1, 2048), 4),
                                    L.blocked((256, 1), 4), L.transposed(L.acc(64, 32))])
@pytest.mark.parametrize("axis", [0, 1])
def test_reduction_algorithm_gives_numpy_sums(layout, axis):
    rng = np.random.default_rng(0)
    tile = rng.integers(-1000, 1000, layout.shape)
    flat = held(layout)
    out_ly, part = reduce_model(layout, axis, tile.ravel()[flat], np.add)
    want = tile.sum(axis=axis)
    for t in range(128):
        for j in range(out_ly.count):
            r, c = out_ly.coord(j, t % 32, t // 32)
            assert part[t, j] == want[r if axis == 1 else c]
    nw = 1 << sum(1 for basis in layout.warps if basis[axis])
    assert reduce_scratch_bytes(layout, axis) == (0 if nw == 1 else nw * layout.shape[1 - axis])


def test_conversion_scratch_is_zero_for_register_selections():
    acc = L.acc(128, 64)
    assert convert_needs_scratch(acc, acc) == 0
    assert convert_needs_scratch(L.slice_of(acc, 1), acc) == 0
    assert convert_needs_scratch(L.blocked((128, 64), 4), acc) == 128 * 64
    assert convert_needs_scratch(L.slice_of(L.blocked((128, 64), 4), 1), acc) == 128


@pytest.mark.parametrize("rows,cols,box_cols,itemsize,xor", [
    (8, 64, 64, 2, True), (64, 128, 32, 4, True), (16, 32, 32, 2, True), (16, 16, 16, 2, True),
    (1, 1024, 256, 4, False), (128, 4, 4, 4, False), (3, 24, 8, 2, False)])
def test_part_offsets_are_a_permutation_of_the_part(rows, cols, box_cols, itemsize, xor):
    """Distinct elements at distinct, element-aligned offsets inside the part's bytes;
    16-byte chunks stay whole (a vector read of <= 16 aligned bytes is contiguous)."""
    offs = np.array([[part_offset(r, c, rows, box_cols, itemsize, xor) for c in range(cols)]
                     for r in range(rows)])
    assert len(set(offs.ravel())) == rows * cols
    assert offs.min() == 0 and offs.max() == rows * cols * itemsize - itemsize
    per_chunk = 16 // itemsize
    if box_cols % per_chunk == 0:
        runs = offs.reshape(rows, cols // per_chunk, per_chunk)
        assert (np.diff(runs, axis=2) == itemsize).all()
