"""Helper functions and the kernels calling them, for tests/test_helpers_inline.py and
tests/gpu/test_helpers_args_gpu.py (issue 15 item 5), with float64 NumPy references.

The helpers are plain Python functions on tiles (the compiler inlines them before
typing; the interpreter calls them), one is a ``@ws.jit`` function, some call each
other, some take the caller's constexprs. They live in this module, not beside the
kernels' tests, so the inliner resolves their globals through another module."""
import numpy as np

import numba_ws as ws


# --- helpers -------------------------------------------------------------------------

def leaky(x, ALPHA):
    """max(x, ALPHA * x); ALPHA a float constexpr of the caller."""
    return ws.maximum(x, x * ALPHA)


def scale_shift(x, s, t):
    return x * s + t


def leaky_affine(x, s, t, ALPHA):
    """A helper calling two helpers."""
    return leaky(scale_shift(x, s, t), ALPHA)


def row_max(x):
    return ws.max(x, 1, keepdims=True)


def softmax_rows(x):
    """Row softmax of a float32 tile (every column real); calls row_max."""
    e = ws.exp(x - row_max(x))
    return e / ws.sum(e, 1, keepdims=True)


def activation(x, ACT):
    """Chosen by a str constexpr; the untaken branches are never typed."""
    if ACT == "relu":
        return ws.maximum(x, 0.0)
    if ACT == "ill_typed":
        return ws.trans(ws.program_id(0))      # ill-typed: trans of an int
    return x


def filled(BM, BN, value):
    """A tile whose shape comes from the caller's constexprs."""
    return ws.full((BM, BN), value, ws.float32)


@ws.jit
def doubled(x):
    """A @ws.jit function called as a helper."""
    return x * 2.0


def blocks_sum(a, row, BM, BN, NB):
    """Sum of NB column blocks of ``a`` (unrolled): block 0 once, the others twice."""
    acc = ws.zeros((BM, BN), ws.float32)
    for j in ws.static_range(NB):
        x = ws.load(a, (row, j * BN), (BM, BN)).astype(ws.float32)
        if j == 0:
            acc = acc + x
        else:
            acc = acc + x * 2.0
    return acc


# --- kernels -------------------------------------------------------------------------

def gemm_helpers(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr,
                 ALPHA: ws.constexpr):
    """GEMM whose epilogue calls leaky twice (once through leaky_affine) and doubled."""
    pid_m = ws.program_id(0)
    pid_n = ws.program_id(1)
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(a.shape[1], BK)):
        x = ws.load(a, (pid_m * BM, k * BK), (BM, BK))
        y = ws.load(b, (k * BK, pid_n * BN), (BK, BN))
        acc = ws.dot(x, y, acc)
    acc = leaky(acc, ALPHA)
    acc = leaky_affine(acc, 2.0, -1.0, ALPHA) + doubled(acc)
    ws.store(c, (pid_m * BM, pid_n * BN), acc.astype(ws.float16))


def gemm_helpers_ref(a, b, alpha):
    acc = a.astype(np.float64) @ b.astype(np.float64)
    acc = np.maximum(acc, acc * alpha)
    t = acc * 2.0 - 1.0
    return np.maximum(t, t * alpha) + 2.0 * acc


def two_softmaxes(x, y, out, BM: ws.constexpr, BN: ws.constexpr, ACT: ws.constexpr):
    """softmax(x) + activation(softmax(y)) + 0.5 by rows: softmax_rows called twice."""
    pid = ws.program_id(0)
    u = ws.load(x, (pid * BM, 0), (BM, BN)).astype(ws.float32)
    v = ws.load(y, (pid * BM, 0), (BM, BN)).astype(ws.float32)
    r = softmax_rows(u) + activation(softmax_rows(v), ACT) + filled(BM, BN, 0.5)
    ws.store(out, (pid * BM, 0), r)


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def two_softmaxes_ref(x, y, act):
    s = _softmax(y.astype(np.float64))
    return _softmax(x.astype(np.float64)) + (np.maximum(s, 0) if act == "relu" else s) + 0.5


def unrolled_blocks(a, c, BM: ws.constexpr, BN: ws.constexpr, NB: ws.constexpr):
    """blocks_sum (a static_range loop in a helper) called twice."""
    pid = ws.program_id(0)
    r = blocks_sum(a, pid * BM, BM, BN, NB) + blocks_sum(a, pid * BM, BM, BN, NB)
    ws.store(c, (pid * BM, 0), r)


def unrolled_blocks_ref(a, bn, nb):
    blocks = [a[:, j * bn:(j + 1) * bn].astype(np.float64) for j in range(nb)]
    return 2.0 * (blocks[0] + 2.0 * sum(blocks[1:]))


def row_scale(a, scale, bias, c, BM: ws.constexpr, BN: ws.constexpr):
    """Scalar loads: program pid's rows times scale[pid], plus bias[0] (Numba indexing)."""
    pid = ws.program_id(0)
    s = scale[pid]
    x = ws.load(a, (pid * BM, 0), (BM, BN)).astype(ws.float32)
    ws.store(c, (pid * BM, 0), x * s + bias[0])


def row_scale_ref(a, scale, bias, bm):
    rows = np.arange(a.shape[0]) // bm
    return a.astype(np.float64) * scale.astype(np.float64)[rows][:, None] + float(bias[0])
