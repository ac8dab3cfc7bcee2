"""Tile programs whose register tiles need the layouts pass's harder cases: a tile read
in another tile's layout through a reduction, and real conversions through scratch.

Plain functions; each documents its grid. Shapes: any M, N (ragged) unless stated.
"""
import numba_ws as ws


def gemm_div_rowsum(a, b, x, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """c = (a @ b) / (rowsum(x tile) + 1) per output tile, x: (M, N) float32 >= 0.

    The row sums divide an accumulator, so the layouts pass reads the x tile straight in
    the accumulator layout (no conversion). Grid: (cdiv(M, BM) * cdiv(N, BN),)."""
    pid_m, pid_n, acc = gemm_tile(a, b, BM, BN, BK)
    t = ws.load(x, (pid_m * BM, pid_n * BN), (BM, BN))
    ws.store(c, (pid_m * BM, pid_n * BN), acc / (ws.sum(t, 1, keepdims=True) + 1.0))


def gemm_tile(a, b, BM, BN, BK):
    """(pid_m, pid_n, acc): program ``ws.program_id(0)``'s output tile of a @ b, the
    tiles numbered row-major (a kernel helper, inlined where it is called)."""
    M, K = a.shape
    N = b.shape[1]
    pid = ws.program_id(0)
    pid_m = pid // ws.cdiv(N, BN)
    pid_n = pid % ws.cdiv(N, BN)
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(K, BK)):
        acc = ws.dot(ws.load(a, (pid_m * BM, k * BK), (BM, BK)),
                     ws.load(b, (k * BK, pid_n * BN), (BK, BN)), acc)
    return pid_m, pid_n, acc


def gemm_div_rowsum_np(a, b, x, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """:func:`gemm_div_rowsum` written as NumPy / Triton code: ``ws.sum(t, axis=1)`` is a
    (BM,) vector, ``[:, None]`` puts it back as a column; the layouts pass still reads
    ``t`` in the accumulator layout (through the squeeze and the expand_dims). Grid: as
    :func:`gemm_div_rowsum`."""
    pid_m, pid_n, acc = gemm_tile(a, b, BM, BN, BK)     # a helper function, inlined
    t = ws.load(x, (pid_m * BM, pid_n * BN), (BM, BN))
    ws.store(c, (pid_m * BM, pid_n * BN), acc / (ws.sum(t, axis=1) + 1.0)[:, None])


def transposed_scores_dot(x, y, z, o, BM: ws.constexpr, BN: ws.constexpr,
                          D: ws.constexpr):
    """o = (x @ y)^T @ z for one (BM, BN) score tile per program: the transposed
    accumulator (BN, BM) must become the register A operand of the second dot, which is
    the accumulator layout of a (BN, BM) tile: a conversion through scratch.

    x: (M, D), y: (D, N), z: (M, D), o: (N, D); needs M == BM (one row block).
    Grid: (cdiv(N, BN),)."""
    col = ws.program_id(0) * BN
    s = ws.dot(ws.load(x, (0, 0), (BM, D)), ws.load(y, (0, col), (D, BN)))
    p = ws.trans(s).astype(ws.float16)
    out = ws.dot(p, ws.load(z, (0, 0), (BM, D)))
    ws.store(o, (col, 0), out)


def blocked_stats_on_acc(a, b, x, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """c = a @ b - colmax(x tile)[None, :] where the column maxima come from a tile that
    is also stored (so it stays in its own blocked layout): the (1, BN) vector is
    converted to the accumulator's column slice. x: (M, N) float32; y gets x's tile.
    Grid: (cdiv(M, BM) * cdiv(N, BN),)."""
    pid_m, pid_n, acc = gemm_tile(a, b, BM, BN, BK)
    t = ws.load(x, (pid_m * BM, pid_n * BN), (BM, BN)) * 1.0
    m = ws.max(ws.trans(t) * 1.0, 1, keepdims=True)  # (BN, 1): a row slice of trans(t)'s
    ws.store(c, (pid_m * BM, pid_n * BN), acc - ws.trans(m))
