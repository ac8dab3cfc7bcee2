"""Reference tile programs: the GEMM of the design notes and its persistent form.

Plain functions (wrap them with ``ws.jit``); ``python -m numba_ws``, the benchmarks, the
notebooks and the tests all use these, so there is one copy of each.
"""
import numba_ws as ws


def matmul(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """c = a @ b, stored in c's dtype (the fp32 accumulator rounded once: fp16 in, fp16
    out; bf16 in, bf16 out). Grid: (cdiv(M, BM) * cdiv(N, BN),)."""
    M, K = a.shape
    N = b.shape[1]
    pid = ws.program_id(0)
    num_pid_n = ws.cdiv(N, BN)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(K, BK)):
        x = ws.load(a, (pid_m * BM, k * BK), (BM, BK))
        y = ws.load(b, (k * BK, pid_n * BN), (BK, BN))
        acc = ws.dot(x, y, acc)
    ws.store(c, (pid_m * BM, pid_n * BN), acc)


def matmul_persistent(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr,
                      GROUP_M: ws.constexpr):
    """c = a @ b (in c's dtype) with one program per SM looping over output tiles in
    grouped order.

    Grid: (number of SMs,). The producer runs ahead across tiles: its ring of slots and
    phases carries over from one tile to the next.
    """
    M, K = a.shape
    N = b.shape[1]
    num_pid_m = ws.cdiv(M, BM)
    num_pid_n = ws.cdiv(N, BN)
    num_tiles = num_pid_m * num_pid_n
    for tile in range(ws.program_id(0), num_tiles, ws.num_programs(0)):
        group = tile // (GROUP_M * num_pid_n)
        first_m = group * GROUP_M
        rows = min(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (tile % rows)
        pid_n = (tile % (GROUP_M * num_pid_n)) // rows
        acc = ws.zeros((BM, BN), ws.float32)
        for k in range(ws.cdiv(K, BK)):
            x = ws.load(a, (pid_m * BM, k * BK), (BM, BK))
            y = ws.load(b, (k * BK, pid_n * BN), (BK, BN))
            acc = ws.dot(x, y, acc)
        ws.store(c, (pid_m * BM, pid_n * BN), acc)
