"""Option ``lag_last_dot`` (passes/lag_last_dot.py) without a GPU: which loops it rewrites,
``ws.verify`` of the rewritten attention program against the interpreter (the schedule
simulator runs the partitioned IR), and the order of waits in its PTX.
tests/gpu/test_attention_variants_gpu.py runs the same option on the GPU.
"""
import re

import numpy as np
import pytest

import numba_ws as ws
from numba_ws import examples

import kernels
import kernels_attention as ka
import kernels_tiles as kt

LAG = dict(lag_last_dot=1, num_buffers_warp_spec=2)
TWO = ["attention-causal-bfloat16-d128-s200-128x64",
       "attention-causal-bfloat16-d64-s77-gqa3:1-128x128",    # one key block: no loop trip
       "attention-full-float16-d128-s333-gqa4:2-128x64",
       "attention-causal-float16-d64-s384-nan-v128-128x64"]
ONE = ["attention-causal-bfloat16-d64-s200-64x128", "attention-full-float16-d128-s130-gqa4:1-64x64"]


def _launch(case):
    args, grid = case.make(np.random.default_rng(0))
    launch, _ = kt.host_args(args)
    return launch, grid


@pytest.mark.parametrize("in_flight", [0, 1])
@pytest.mark.parametrize("name,groups", [(n, 2) for n in TWO] + [(n, 1) for n in ONE])
def test_verify_matches_interpreter(name, groups, in_flight):
    case = (ka.CASES if groups == 2 else ka.ONE_GROUP)[name]
    launch, grid = _launch(case)
    report = ws.verify(case.kernel, grid, *launch, seeds=2, max_programs=3, exact=False,
                       num_consumer_groups=groups,
                       **dict(case.meta, dot_in_flight=in_flight, **LAG))
    assert report.ok, str(report)


def _rewritten(kernel, launch, **meta):
    notes = ws.jit(kernel).partition(*launch, **meta).ws.notes
    (note,) = [n for n in notes if n.startswith("lag_last_dot")]
    return int(note.split(": ")[1].split()[0])


def test_attention_loop_is_rewritten():
    case = ka.CASES[TWO[0]]
    launch, _ = _launch(case)
    assert _rewritten(case.kernel, launch, **dict(case.meta, **LAG)) == 1


def test_gemm_loop_is_left_alone():
    """One dot per iteration: nothing to lag, the PTX is the option-off PTX."""
    a = np.zeros((256, 256), np.float16)
    meta = dict(BM=128, BN=128, BK=64)
    assert _rewritten(kernels.matmul, (a, a, a), lag_last_dot=1, **meta) == 0
    unversioned = lambda ptx: re.sub(r"B\d+v\d+B", "B", ptx)  # noqa: E731 (mangled names)
    assert unversioned(ws.jit(kernels.matmul).inspect_ptx(a, a, a, lag_last_dot=1, **meta)) \
        == unversioned(ws.jit(kernels.matmul).inspect_ptx(a, a, a, **meta))


def two_dots_v_read_twice(q, k, v, o, n, BM: ws.constexpr, BN: ws.constexpr,
                          D: ws.constexpr):
    """The last dot's tile is read by another statement too: not rewritten."""
    q_tile = ws.load(q, (0, 0), (BM, D))
    acc = ws.zeros((BM, D), ws.float32)
    for j in range(n):
        k_tile = ws.load(k, (j * BN, 0), (BN, D))
        v_tile = ws.load(v, (j * BN, 0), (BN, D))
        s = ws.dot(q_tile, ws.trans(k_tile))
        acc = ws.dot(s.astype(v.dtype), v_tile, acc) + ws.sum(v_tile.astype(ws.float32))
    ws.store(o, (0, 0), acc)


def two_dots_j_after_loop(q, k, v, o, n, BM: ws.constexpr, BN: ws.constexpr,
                          D: ws.constexpr):
    """The loop variable is read after the loop: not rewritten."""
    q_tile = ws.load(q, (0, 0), (BM, D))
    acc = ws.zeros((BM, D), ws.float32)
    j = 0
    for j in range(n):
        k_tile = ws.load(k, (j * BN, 0), (BN, D))
        v_tile = ws.load(v, (j * BN, 0), (BN, D))
        s = ws.dot(q_tile, ws.trans(k_tile))
        acc = ws.dot(s.astype(v.dtype), v_tile, acc)
    ws.store(o, (j, 0), acc)


@pytest.mark.parametrize("kernel", [two_dots_v_read_twice, two_dots_j_after_loop])
def test_other_loop_shapes_are_left_alone(kernel):
    x = np.zeros((512, 64), np.float16)
    o = np.zeros((512, 64), np.float32)
    assert _rewritten(kernel, (x, x, x, o, 2), BM=128, BN=64, D=64, **LAG) == 0


def test_ptx_waits_for_qk_then_softmax_then_pv():
    """In the rewritten loop both dots are committed before ``wait_group 1`` (q @ k^T
    done, p @ v in flight: K's slot is released there, V's after the ``wait_group 0``
    that lets the accumulator be rescaled), the softmax's ex2 come between; without
    the option the loop has no ``wait_group 1``."""
    q = np.zeros((4 * 512, 128), np.float16)
    lse = np.zeros(4 * 512, np.float32)
    args = (q, q, q, q, lse, 512, 1, 0.1)
    meta = dict(BM=128, BN=128, D=128, CAUSAL=False)
    ptx = ws.jit(examples.attention_fwd).inspect_ptx(*args, **meta, **LAG)
    events = re.findall(r"wgmma\.commit_group|wgmma\.wait_group\.sync\.aligned \d|ex2\.approx",
                        ptx)
    names = {"wgmma.commit_group": "commit", "ex2.approx": "ex2"}
    text = " ".join(names.get(e, "wait" + e[-1]) for e in events)
    text = re.sub(r"(ex2 )+", "ex2 ", text + " ")
    loop = text[text.index("commit commit wait1"):]
    assert "ex2" in loop[:loop.index("wait0")], text
    plain = ws.jit(examples.attention_fwd).inspect_ptx(*args, **meta)
    assert "wait_group.sync.aligned 1" not in plain
