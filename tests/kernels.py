"""Tile kernels shared by the interpreter tests and the compiler tests.

Plain functions (not decorated): wrap them with ``ws.jit`` or
``numba_ws.interpreter.run.InterpretedKernel``. Each documents its grid and any
requirement on the shapes.
"""
import math

from numba import cuda

import numba_ws as ws
from numba_ws.examples import matmul, matmul_persistent, matmul_splitk_atomic  # noqa: F401


def matmul_bias_relu(a, b, bias, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """c = relu(a @ b + bias) with bias of length N. Grid: as :func:`matmul`."""
    M, K = a.shape
    N = b.shape[1]
    pid = ws.program_id(0)
    num_pid_n = ws.cdiv(N, BN)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    bias_tile = ws.load(bias, (pid_n * BN,), (BN,))
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(K, BK)):
        x = ws.load(a, (pid_m * BM, k * BK), (BM, BK))
        y = ws.load(b, (k * BK, pid_n * BN), (BK, BN))
        acc = ws.dot(x, y, acc)
    acc = acc + bias_tile
    acc = ws.maximum(acc, 0.0)
    ws.store(c, (pid_m * BM, pid_n * BN), acc.astype(ws.float16))


def softmax_rows(x, y, BM: ws.constexpr, BN: ws.constexpr):
    """y = softmax(x, axis=1) in float32 over BM rows per program.

    Needs N == BN (whole rows in one tile). Grid: (cdiv(M, BM),).
    """
    row = ws.program_id(0) * BM
    t = ws.astype(ws.load(x, (row, 0), (BM, BN)), ws.float32)
    m = ws.max(t, 1, keepdims=True)
    e = ws.exp(t - m)
    s = ws.sum(e, 1, keepdims=True)
    ws.store(y, (row, 0), e / s)


def attention_fwd(q, k, v, o, seq_len, sm_scale,
                  BM: ws.constexpr, BN: ws.constexpr, D: ws.constexpr):
    """Flash-attention forward, o = softmax(q k^T * sm_scale) v, fp16 in and out.

    q, k, v, o are (heads * seq_len, D) with each head's rows contiguous; needs
    seq_len % BM == 0 and seq_len % BN == 0. Grid: (seq_len // BM, heads).
    """
    row0 = ws.program_id(1) * seq_len
    q_tile = ws.load(q, (row0 + ws.program_id(0) * BM, 0), (BM, D))
    m_i = ws.full((BM, 1), -math.inf, ws.float32)
    l_i = ws.zeros((BM, 1), ws.float32)
    acc = ws.zeros((BM, D), ws.float32)
    for j in range(ws.cdiv(seq_len, BN)):
        k_tile = ws.load(k, (row0 + j * BN, 0), (BN, D))
        v_tile = ws.load(v, (row0 + j * BN, 0), (BN, D))
        s = ws.dot(q_tile, ws.trans(k_tile)) * sm_scale
        m_new = ws.maximum(m_i, ws.max(s, 1, keepdims=True))
        alpha = ws.exp(m_i - m_new)
        p = ws.exp(s - m_new)
        l_i = l_i * alpha + ws.sum(p, 1, keepdims=True)
        acc = ws.dot(p.astype(ws.float16), v_tile, acc * alpha)
        m_i = m_new
    acc = acc / l_i
    ws.store(o, (row0 + ws.program_id(0) * BM, 0), acc.astype(ws.float16))


def matmul_nt(a, bt, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """c = a @ bt.T (in c's dtype) with bt of shape (N, K): the dot reads ``ws.trans`` of a
    loaded (BN, BK) tile. Grid: (cdiv(M, BM) * cdiv(N, BN),)."""
    M, K = a.shape
    N = bt.shape[0]
    pid = ws.program_id(0)
    num_pid_n = ws.cdiv(N, BN)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(K, BK)):
        x = ws.load(a, (pid_m * BM, k * BK), (BM, BK))
        y = ws.load(bt, (pid_n * BN, k * BK), (BN, BK))
        acc = ws.dot(x, ws.trans(y), acc)
    ws.store(c, (pid_m * BM, pid_n * BN), acc.astype(c.dtype))


def matmul_tn(at, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """c = at.T @ b (c's dtype out) with at of shape (K, M): the dot's A is ``ws.trans`` of
    a loaded (BK, BM) tile, M-major in shared memory. Grid: (cdiv(M, BM), cdiv(N, BN))."""
    r0, c0 = ws.program_id(0) * BM, ws.program_id(1) * BN
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(at.shape[0], BK)):
        x = ws.load(at, (k * BK, r0), (BK, BM))
        acc = ws.dot(ws.trans(x), ws.load(b, (k * BK, c0), (BK, BN)), acc)
    ws.store(c, (r0, c0), acc.astype(c.dtype))


@cuda.jit(device=True)
def gelu(x):
    """tanh-approximated GELU of one scalar (an ordinary Numba CUDA device function)."""
    return 0.5 * x * (1.0 + math.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def matmul_gelu(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """c = gelu(a @ b): a device function called on a tile is applied element-wise."""
    M, K = a.shape
    N = b.shape[1]
    pid = ws.program_id(0)
    pid_m = pid // ws.cdiv(N, BN)
    pid_n = pid % ws.cdiv(N, BN)
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(K, BK)):
        x = ws.load(a, (pid_m * BM, k * BK), (BM, BK))
        y = ws.load(b, (k * BK, pid_n * BN), (BK, BN))
        acc = ws.dot(x, y, acc)
    ws.store(c, (pid_m * BM, pid_n * BN), gelu(acc).astype(ws.float16))


def accumulate_matmul(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr):
    """c += a @ b: the kernel reads the array it stores."""
    M, K = a.shape
    pid_m = ws.program_id(0)
    pid_n = ws.program_id(1)
    acc = ws.load(c, (pid_m * BM, pid_n * BN), (BM, BN)).astype(ws.float32)
    for k in range(ws.cdiv(K, BK)):
        acc = ws.dot(ws.load(a, (pid_m * BM, k * BK), (BM, BK)),
                     ws.load(b, (k * BK, pid_n * BN), (BK, BN)), acc)
    ws.store(c, (pid_m * BM, pid_n * BN), acc)


def shifted_matmul(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr,
                   SHIFT: ws.constexpr):
    """c[:, SHIFT:] = a @ b (c has N + SHIFT columns): the store's column offset is only
    SHIFT-aligned, so TMA may write it only when SHIFT * itemsize is a multiple of 16."""
    M, K = a.shape
    pid_m = ws.program_id(0)
    pid_n = ws.program_id(1)
    acc = ws.zeros((BM, BN), ws.float32)
    for k in range(ws.cdiv(K, BK)):
        acc = ws.dot(ws.load(a, (pid_m * BM, k * BK), (BM, BK)),
                     ws.load(b, (k * BK, pid_n * BN), (BK, BN)), acc)
    ws.store(c, (pid_m * BM, pid_n * BN + SHIFT), acc)
