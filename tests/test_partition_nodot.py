"""Data partitioning without a ws.dot (issue 14, item 3), on the CPU.

With num_consumer_groups = G > 1, element-wise / reduction work on tiles is split along
the rows of the stored tiles: consumer g loads, computes and stores rows
[g*R/G, (g+1)*R/G) of every R-row tile linked to a stored tile. Checked with the schedule
simulator against the interpreter (``ws.verify``, bitwise), on shapes that are not
multiples of the tile; that every output element is stored exactly once per program (no
consumer stores another's rows); that the partitioned IR's stores of the consumers use
different row offsets; and that a split that cannot be made falls back to one consumer
group with a :class:`PartitionFallbackWarning` naming the reason.
"""
import math
import operator
import warnings

import numpy as np
import pytest
from numba import cuda
from numba.cuda.core import ir

import numba_ws as ws
from numba_ws.errors import WSCompileError
from numba_ws.interpreter.simulator import language_ops, simulate
from numba_ws.passes.data_partition import PartitionFallbackWarning
from numba_ws.passes.ir_tools import tile_op
from numba_ws.runtime.binding import bind, resolve_grid
import kernels


@cuda.jit(device=True)
def rsqrt(v):
    return 1.0 / math.sqrt(v)


def copy2d(x, y, BM: ws.constexpr, BN: ws.constexpr):
    r = ws.program_id(0) * BM
    c = ws.program_id(1) * BN
    ws.store(y, (r, c), ws.load(x, (r, c), (BM, BN)))


def vector_add(x, y, z, B: ws.constexpr):
    """1-D tiles: the split is along their only dim."""
    i = ws.program_id(0) * B
    ws.store(z, (i,), ws.load(x, (i,), (B,)) + ws.load(y, (i,), (B,)))


def layer_norm(x, w, b, y, eps, BM: ws.constexpr, BN: ws.constexpr):
    """Needs N == BN. ``w`` and ``b`` are (BN,) vectors broadcast over the rows: every
    consumer loads them whole."""
    row = ws.program_id(0) * BM
    t = ws.load(x, (row, 0), (BM, BN)).astype(ws.float32)
    mean = ws.sum(t, 1, keepdims=True) / BN
    d = t - mean
    rstd = rsqrt(ws.sum(d * d, 1, keepdims=True) / BN + eps)
    wt = ws.load(w, (0,), (BN,)).astype(ws.float32)
    bt = ws.load(b, (0,), (BN,)).astype(ws.float32)
    ws.store(y, (row, 0), (d * rstd * wt + bt).astype(ws.float16))


def row_sums(x, out, BM: ws.constexpr, BN: ws.constexpr):
    """out[:, 0] = x.sum(axis=1), accumulated over column tiles (a ring of slots)."""
    row = ws.program_id(0) * BM
    acc = ws.zeros((BM, 1), ws.float32)
    for j in range(ws.cdiv(x.shape[1], BN)):
        acc = acc + ws.sum(ws.load(x, (row, j * BN), (BM, BN)).astype(ws.float32), 1, keepdims=True)
    ws.store(out, (row, 0), acc)


def column_sums(x, out, BM: ws.constexpr, BN: ws.constexpr):
    """out[0, :] = x.sum(axis=0) with every row in one tile (needs M <= BM)."""
    col = ws.program_id(0) * BN
    t = ws.load(x, (0, col), (BM, BN)).astype(ws.float32)
    ws.store(out, (0, col), ws.sum(t, 0, keepdims=True))


def plus_transpose(x, y, B: ws.constexpr):
    t = ws.load(x, (0, 0), (B, B))
    ws.store(y, (0, 0), t + ws.trans(t))


def copy_rows(x, y, BM: ws.constexpr, BN: ws.constexpr):
    r = ws.program_id(0) * BM
    ws.store(y, (r, 0), ws.load(x, (r, 0), (BM, BN)))


RNG = np.random.default_rng(3)


def f16(*shape):
    return (RNG.random(shape) * 2 - 1).astype(np.float16)


def f32(*shape):
    return (RNG.random(shape) * 2 - 1).astype(np.float32)


# (kernel, grid, args, constexprs); no row count is a multiple of the tile's rows (and
# the columns of copy2d / row_sums are not a multiple of BN; softmax / layer norm need
# N == BN)
CASES = {
    "copy2d": (copy2d, (3, 2), (f32(300, 200), np.zeros((300, 200), np.float32)),
               dict(BM=128, BN=128)),
    "vector_add": (vector_add, (3,), (f32(300), f32(300), np.zeros(300, np.float32)),
                   dict(B=128)),
    "softmax_rows": (kernels.softmax_rows, (3,),
                     (f16(300, 64), np.zeros((300, 64), np.float32)), dict(BM=128, BN=64)),
    "layer_norm": (layer_norm, (5,), (f16(300, 64), f16(64), f16(64),
                                      np.zeros((300, 64), np.float16), 1e-5),
                   dict(BM=64, BN=64)),
    "row_sums": (row_sums, (3,), (f16(300, 200), np.zeros((300, 1), np.float32)),
                 dict(BM=128, BN=64)),
}
#: G = 4 needs a smaller consumer register budget (640 threads share the register file)
GROUPS = {1: {}, 2: {}, 4: dict(reg_inc_consumer=104)}


def _meta(meta, groups):
    return dict(meta, num_consumer_groups=groups, **GROUPS[groups])


@pytest.mark.parametrize("groups", sorted(GROUPS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_verify_matches_the_interpreter(name, groups):
    kernel, grid, args, meta = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error", PartitionFallbackWarning)   # no fallback here
        report = ws.verify(kernel, grid, *args, seeds=2, **_meta(meta, groups))
    assert report.ok, str(report)
    assert report.config["num_consumer_groups"] == groups
    state = ws.jit(kernel).partition(*args, **_meta(meta, groups))
    plan = state.ws
    if groups > 1:
        assert plan.split_source == "rows" and plan.partition_dim == "M"
        rows = {"vector_add": 128, "layer_norm": 64}.get(name, 128)
        assert plan.slice_size == rows // groups
        for ch in plan.channels:
            assert ch.arrivals == groups
    else:
        assert plan.split == {} and plan.partition_dim is None


def _store_counts(kernel, grid, args, meta, seed=0):
    """Run the partitioned IR in the simulator; per array argument, how many times each
    element was written by ws.store over all programs."""
    state = ws.jit(kernel).partition(*args, **meta)
    bound = bind(kernel, args, meta)
    grid = resolve_grid(grid, bound.meta)
    arrays = {n: v.copy() if isinstance(v, np.ndarray) else v for n, v in bound.args.items()}
    counts = {id(v): np.zeros(v.shape, np.int64) for v in arrays.values()
              if isinstance(v, np.ndarray)}
    table = language_ops()
    real_store = table["store"]

    def counting_store(array, offsets, tile):
        real_store(array, offsets, tile)
        window = tuple(slice(max(o, 0), min(o + s, n))
                       for o, s, n in zip(offsets, tile.shape, array.shape))
        counts[id(array)][window] += 1

    table["store"] = counting_store
    pids = [tuple(p) for p in np.ndindex(*grid)]
    findings, _ = simulate(state, grid, arrays, pids, seed, table)
    assert not list(findings)
    return {n: counts[id(v)] for n, v in arrays.items() if isinstance(v, np.ndarray)}


@pytest.mark.parametrize("groups", [2, 4])
@pytest.mark.parametrize("name, output", [("copy2d", "y"), ("vector_add", "z"),
                                          ("softmax_rows", "y"), ("row_sums", "out")])
def test_every_element_is_stored_once(name, output, groups):
    """No duplicate stores: each consumer writes only its rows (and together they write
    every row of the output)."""
    kernel, grid, args, meta = CASES[name]
    counts = _store_counts(kernel, grid, args, _meta(meta, groups))
    assert counts[output].min() == 1 and counts[output].max() == 1
    assert all(c.max() == 0 for n, c in counts.items() if n != output)


def _row_offset(fir, tuple_var):
    """(base variable without its task suffix, constant added) of dim 0 of an offsets
    tuple in the partitioned IR."""
    items = fir.get_definition(tuple_var).items
    d = fir.get_definition(items[0])
    if isinstance(d, ir.Expr) and d.op == "binop" and d.fn is operator.add:
        const = fir.get_definition(d.rhs)
        if isinstance(const, ir.Const):
            return d.lhs.name.split("__t")[0], const.value
    return items[0].name.split("__t")[0], 0


def _stores_by_task(state):
    plan, fir = state.ws, state.func_ir
    bounds = sorted(plan.branches.items(), key=lambda kv: kv[1])
    out = {}
    for i, (task, lo) in enumerate(bounds):
        hi = bounds[i + 1][1] if i + 1 < len(bounds) else 10 ** 9
        for label, block in fir.blocks.items():
            if lo <= label < hi:
                out.setdefault(task, []).extend(
                    s for s in block.body if tile_op(s, state.typemap) == "store")
    return out


@pytest.mark.parametrize("name, rows", [("copy2d", 64), ("softmax_rows", 64),
                                        ("vector_add", 64)])
def test_partitioned_stores_use_each_consumers_row_offset(name, rows):
    kernel, _, args, meta = CASES[name]
    # one clone per group, to see each clone's constant offset (the shared consumer body's
    # run-time one: test_shared_consumer_body.py)
    state = ws.jit(kernel).partition(*args, shared_consumer_body=0, **_meta(meta, 2))
    stores = _stores_by_task(state)
    assert not stores[0]                        # the producer stores nothing
    (s1,), (s2,) = stores[1], stores[2]
    base1, delta1 = _row_offset(state.func_ir, s1.value.args[1])
    base2, delta2 = _row_offset(state.func_ir, s2.value.args[1])
    assert base1 == base2 and (delta1, delta2) == (0, rows)
    # each consumer stores a tile of its slice's rows
    assert state.typemap[s1.value.args[2].name].shape[0] == rows
    assert state.typemap[s2.value.args[2].name].shape[0] == rows


def test_loads_are_split_into_row_parts_and_broadcast_vectors_stay_whole():
    _, _, args, meta = CASES["layer_norm"]
    plan = ws.jit(layer_norm).partition(*args, **_meta(meta, 2)).ws
    members = [m for ch in plan.channels for m in ch.members]
    x, w, b = sorted(members, key=lambda m: m["line"])
    assert x["split_dim"] == 0
    assert [(p["offset"], p["shape"]) for p in x["parts"]] == [((0, 0), (32, 64)),
                                                              ((32, 0), (32, 64))]
    for vec in (w, b):
        assert vec["split_dim"] is None and [p["shape"] for p in vec["parts"]] == [(64,)]


def test_a_kernel_with_a_dot_keeps_the_m_else_n_rule():
    a, b = f16(256, 128), f16(128, 256)
    bias, c = f16(256), np.zeros((256, 256), np.float16)
    plan = ws.jit(kernels.matmul_bias_relu).partition(a, b, bias, c, BM=128, BN=128,
                                                      BK=64).ws
    assert plan.split_source == "dot" and plan.partition_dim == "M"
    assert plan.slice_size == 64 and plan.split["bias_tile"] is None
    # 64 rows and columns over two groups: neither dim splits; one group, with a warning
    with pytest.warns(PartitionFallbackWarning, match="M: M=64 .*N: N=64 .*larger tiles"):
        plan = ws.jit(kernels.matmul_bias_relu).partition(a, b, bias, c, BM=64, BN=64,
                                                          BK=64).ws
    assert plan.num_consumers == 1 and plan.split == {}


# -- splits that cannot be made: one consumer group, with a warning ------------------

FALLBACKS = {
    "column_sums": (column_sums, (4,), (f16(100, 200), np.zeros((1, 200), np.float32)),
                    dict(BM=128, BN=64), "ws.sum along axis 0"),
    "plus_transpose": (plus_transpose, (1,), (f32(64, 64), np.zeros((64, 64), np.float32)),
                       dict(B=64), "split along both dims"),
    "two_rows": (copy_rows, (50,), (f32(100, 32), np.zeros((100, 32), np.float32)),
                 dict(BM=2, BN=32), "2 row\\(s\\), not divisible by num_consumer_groups=4"),
}


@pytest.mark.parametrize("name", sorted(FALLBACKS))
def test_impossible_split_falls_back_to_one_group_with_a_warning(name):
    kernel, grid, args, meta, reason = FALLBACKS[name]
    groups = 4 if name == "two_rows" else 2
    meta = _meta(meta, groups)
    with pytest.warns(PartitionFallbackWarning, match=f"{kernel.__name__}.*{reason}"):
        plan = ws.jit(kernel).partition(*args, **meta).ws
    assert plan.num_consumers == 1 and plan.num_threads == 256
    assert plan.consumer_tasks == (1,) and plan.split == {}
    assert any("num_consumer_groups=1" in n and "cannot split" in n for n in plan.notes)
    assert all(ch.consumers == (1,) and ch.arrivals == 1 for ch in plan.channels)
    with pytest.warns(PartitionFallbackWarning):
        report = ws.verify(kernel, grid, *args, seeds=2, **meta)
    assert report.ok, str(report)
    assert report.config["num_consumer_groups"] == 1


def test_fallback_warning_points_at_the_reducing_line():
    kernel, _, args, meta, _ = FALLBACKS["column_sums"]
    with pytest.warns(PartitionFallbackWarning) as record:
        ws.jit(kernel).partition(*args, **_meta(meta, 2))
    import inspect
    lines, first = inspect.getsourcelines(column_sums)
    line = first + next(i for i, text in enumerate(lines) if "ws.sum(" in text)
    assert record[0].filename == __file__ and record[0].lineno == line


def test_ping_pong_without_a_dot_is_still_an_error():
    kernel, _, args, meta = CASES["copy2d"]
    with pytest.raises(WSCompileError, match="ping_pong=1 needs a ws.dot"):
        ws.jit(kernel).partition(*args, **meta, ping_pong=1)


def test_explain_shows_each_consumers_rows_without_a_dot():
    kernel, _, args, meta = CASES["softmax_rows"]
    text = ws.jit(kernel).explain(*args, **_meta(meta, 2))
    assert "split along the rows of the stored tiles (no ws.dot), 64 per consumer" in text
    assert "t_1 = ws.astype(ws.load(x, (row, 0), (BM // 2, BN)), ws.float32) " \
           "# async_task 0, 1" in text
    assert "t_2 = ws.astype(ws.load(x, (row + BM // 2, 0), (BM // 2, BN)), ws.float32) " \
           "# async_task 0, 2" in text
    assert "ws.store(y, (row + BM // 2, 0), e_2 / s_2) # async_task 2" in text
    kernel, _, args, meta = CASES["vector_add"]
    text = ws.jit(kernel).explain(*args, **_meta(meta, 2))
    assert ("ws.store(z, (i + B // 2,), ws.load(x, (i + B // 2,), (B // 2,)) + "
            "ws.load(y, (i + B // 2,), (B // 2,))) # async_task 0, 2") in text
