"""The sm_80 tensor-core dot: ``ldmatrix`` + ``mma.sync.aligned.m16n8k16`` per warp.

Same contract as :func:`numba_ws.codegen.tile_ops.gpu_dot` (A, B shared-memory tiles in
the 128-byte swizzled layout, the result a float32 :class:`FragType` in the wgmma
accumulator layout), so everything after the dot (astype, arithmetic, gpu_frag_store)
is shared with the sm_90a path.

Why the layouts agree (PTX ISA 9.7.14.5.8, "Matrix Fragments for mma.m16n8k16" with
floating point types; ``g = lane >> 2``, ``t = lane % 4``):

- C/D (f32 x4): c0, c1 at (row g, cols 2t, 2t+1), c2, c3 at (row g+8, same cols). The
  FragType keeps, per 64-row block, warp w's rows 16w..16w+15 and, for n8 block j,
  registers 4j..4j+3 in exactly this order (codegen/fragments.py): one mma per
  (64-row block, n8 block) updates registers 4j..4j+3 in place.
- A (.f16x2 / .bf16x2 x4): a0a1 (g, 2t..), a2a3 (g+8, 2t..), a4a5 (g, 2t+8..),
  a6a7 (g+8, 2t+8..). ``ldmatrix.x4`` gives lane l, from 8x8 matrix q, the pair at row
  l//4, elements 2(l%4), 2(l%4)+1; matrices (rows 0-7, K 0-7), (8-15, 0-7), (0-7, 8-15),
  (8-15, 8-15) of the warp's 16 rows and the K step are a0a1 .. a6a7.
- B (x2): b0b1 at (K 2t, 2t+1; col g), b2b3 at (K 2t+8, 2t+9; col g). A K x N tile with N
  contiguous is read with ``.trans`` (lane l then gets element (2(l%4) + i, l//4) of the
  stored 8x8 matrix, i.e. two consecutive K of column g); the transposed view (N rows, K
  contiguous) without it.

Addresses: :mod:`numba_ws.codegen.swizzle` (``a_offset``, ``b_offset``, ``b_loads``),
shared with the NumPy model in tests/test_sm80_layout.py. mma.sync is synchronous: there
is nothing to wait for afterwards; the dot ends with ``bar.warp.sync -1`` so that every
lane's ldmatrix reads are ordered before lane 0 releases the slot.

A in registers (:func:`gpu_dot_rs_sm80`, attention's ``p.astype(ws.float16) @ v``): the A
fragment above is, per warp, the accumulator layout's registers of one k step, so an
fp16/bf16 fragment converted from an accumulator already holds its A operand; the packing
is :func:`numba_ws.codegen.wgmma_rs.a_register_indices` (derived in that module's
docstring: wgmma's register-A layout is m16n8k16's A fragment per warp).
"""
from llvmlite import ir

from numba.cuda import types
from numba.cuda.core.errors import TypingError
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ..language.types import FragType, SmemTileType
from .swizzle import a_offset, b_loads, b_offset
from .tile_ops import _elements, _pack, dot_result_type, mma_result_type
from .wgmma_rs import _pack_halves, a_register_indices, register_a_dtype_error
from ._util import F32, I32, IRInt, asm, outputs_type, sreg

#: mma.sync operand dtypes (tf32 dots run on sm_90a only).
_MMA_DTYPE = {types.float16: "f16", types.bfloat16: "bf16"}

_ITEMSIZE = 2


def ldmatrix_ptx(count, trans, imm):
    """``ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16 {$0..}, [$count+imm];``"""
    regs = ",".join(f"${i}" for i in range(count))
    return (f"ldmatrix.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16 "
            f"{{{regs}}}, [${count}+{imm}];")


def mma_ptx(dt):
    """``mma.sync.aligned.m16n8k16.row.col.f32.{dt}.{dt}.f32 {d0-3}, {a0-3}, {b0-1},
    {c0-3};``"""
    return (f"mma.sync.aligned.m16n8k16.row.col.f32.{dt}.{dt}.f32 "
            "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};")


def _ldmatrix(builder, base, offset, count, trans):
    """``count`` (4 or 2) b32 registers of one ldmatrix at shared address ``base`` +
    ``offset`` (``(fixed, lane part)`` of :mod:`.swizzle`; ``fixed`` becomes the
    immediate, so LLVM cannot fold it into one hoisted register per load).

    Volatile with a memory clobber: it reads what the producer's cp.async wrote, so it
    must stay after the barrier wait and before the slot release."""
    fixed, lane_part = offset
    addr = (base + lane_part).value
    ret = outputs_type(builder, I32, count)
    res = asm(builder, ldmatrix_ptx(count, trans, fixed),
              ",".join(["=r"] * count + ["r", "~{memory}"]), [addr], ret=ret)
    return [builder.extract_value(res, i) for i in range(count)]


def _mma(builder, dt, a_regs, b_regs, c_vals):
    """One mma.sync: the 4 new accumulator values. Volatile (no memory clobber) only to
    keep LLVM from sinking every mma below the ldmatrix of the step: in program order
    each B fragment dies right after its two mma (ptxas schedules from there)."""
    res = asm(builder, mma_ptx(dt), ",".join(["=f"] * 4 + ["r"] * 6 + ["f"] * 4),
              list(a_regs) + list(b_regs) + list(c_vals),
              ret=outputs_type(builder, F32, 4), side_effect=True)
    return [builder.extract_value(res, i) for i in range(4)]


def _lane_and_warp(builder):
    """(lane 0..31, warp 0..3 of the warp group) of this thread, as IRInt."""
    tid = sreg(builder, "tid.x")
    lane = IRInt(builder, builder.and_(tid, ir.Constant(I32, 31)))
    warp = IRInt(builder, builder.and_(builder.lshr(tid, ir.Constant(I32, 5)),
                                       ir.Constant(I32, 3)))
    return lane, warp


def _mma_steps(builder, dt, a_regs_of, b_base, b, ksteps, blocks, per_block, vals, lane):
    """The k loop both sm_80 dots share: per K step k16, ``a_regs_of(k16)`` (the four A
    registers of each 64-row block), then per ldmatrix of B (read once for every block)
    one mma per (block, n8 block), updating ``vals`` (the accumulator, constant indices)
    in place. Ends with ``bar.warp.sync -1``."""
    b_rows, b_trans = b.layout[0], b.layout[2]
    loads = b_loads(b.shape[1])
    for k16 in range(ksteps):
        a_regs = a_regs_of(k16)
        for j, nregs in loads:
            b_regs = _ldmatrix(builder, b_base,
                               b_offset(lane, k16, j, b_rows, _ITEMSIZE, b_trans),
                               nregs, not b_trans)
            for mi in range(blocks):
                for jj in range(nregs // 2):
                    at = mi * per_block + 4 * (j + jj)
                    vals[at:at + 4] = _mma(builder, dt, a_regs[mi],
                                           b_regs[2 * jj:2 * jj + 2], vals[at:at + 4])
    asm(builder, "bar.warp.sync -1;", "~{memory}")


@intrinsic
def gpu_dot_sm80(typingctx, a, b, acc):
    """``acc + a @ b`` with ``mma.sync`` (sm_80): same typing as ``tile_ops.gpu_dot``.

    Per warp w of the consumer warp group, for each K step k16: per 64-row block mi of A
    one ``ldmatrix.sync.aligned.m8n8.x4.shared.b16`` (rows 64mi+16w.. +15, K 16k16..
    +15), then per pair of n8 blocks one ``ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16``
    of B (``.x2`` for a last odd block; no ``.trans`` for a transposed view of an N x K
    tile), read once for every mi, and one ``mma.sync.aligned.m16n8k16.row.col.f32.
    {f16|bf16}.{f16|bf16}.f32`` per (mi, n8 block), accumulating in registers (constant
    indices only).
    Ends with ``bar.warp.sync -1;``. Minimum sm_80 (ldmatrix: sm_75, PTX ISA 6.5; mma
    m16n8k16 with f16 / bf16 inputs and f32 accumulators: sm_80, PTX ISA 7.0). Register
    budget: the (M, N) accumulator (M*N/128 per thread) + 4 per 64-row block of A + 4 of
    B + a few addresses; 64 x 256 per warp group assembles in 168 registers without
    spills (tests/test_ptx.py). All 128 threads of the warp group,
    converged (every instruction is ``.sync.aligned`` per warp).
    """
    resty, has_acc = dot_result_type(a, b, acc)
    if a.dtype not in _MMA_DTYPE:
        raise TypingError(f"dot on sm_80: {a.dtype} (tf32) operands are not supported yet "
                          "(sm_90a's wgmma runs them); convert them with .astype(ws.float16)")
    if a.layout[2]:
        raise TypingError("dot on sm_80: a transposed (M-major) A operand is not supported "
                          "yet (sm_90a's wgmma reads it)")
    m, kdim = a.shape
    n = b.shape[1]
    sig = signature(resty, a, b, acc)
    dt = _MMA_DTYPE[a.dtype]
    a_rows = a.layout[0]
    blocks, ksteps, per_block = m // 64, kdim // 16, n // 2

    def codegen(context, builder, sig, args):
        count = blocks * per_block
        zero = ir.Constant(F32, 0.0)
        vals = _elements(builder, args[2], count) if has_acc else [zero] * count
        lane, warp = _lane_and_warp(builder)
        a_base, b_base = IRInt(builder, args[0]), IRInt(builder, args[1])

        def a_regs_of(k16):
            return [_ldmatrix(builder, a_base,
                              a_offset(lane, warp, mi, k16, a_rows, _ITEMSIZE), 4, False)
                    for mi in range(blocks)]

        _mma_steps(builder, dt, a_regs_of, b_base, b, ksteps, blocks, per_block, vals, lane)
        return _pack(context, builder, resty, vals)

    return sig, codegen


@intrinsic
def gpu_dot_rs_sm80(typingctx, a, b, acc):
    """``acc + a @ b`` with ``mma.sync`` (sm_80), ``a`` an fp16/bf16 register fragment
    (rows, K) in the accumulator layout, ``b`` a shared-memory tile (K, N) of the same
    dtype; the result a float32 fragment (rows, N) in the accumulator layout.

    Per K step k16 and 64-row block mi, the A registers are packed in place, no shuffle
    and no memory: ``a_j = {frag[mi*K/2 + 8*k16 + 2j] (bits 0-15), frag[.. + 2j + 1]
    (bits 16-31)}``, j = 0..3 (:func:`wgmma_rs.a_register_indices`; why this is the
    m16n8k16 A fragment of the warp: module docstring). B and the mma loop are
    :func:`gpu_dot_sm80`'s: per pair of n8 blocks one
    ``ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16`` (``.x2`` for a last odd block;
    ``.trans`` for a K x N tile with N contiguous, none for a transposed N x K view), then
    per (mi, n8 block) ``mma.sync.aligned.m16n8k16.row.col.f32.{f16|bf16}.{f16|bf16}.f32
    {d0-3}, {a0-3}, {b0-1}, {c0-3};``. Constant register indices only (no local memory);
    ends with ``bar.warp.sync -1;``. Minimum sm_80 (PTX ISA 7.0). Register budget: the
    A fragment (M*K/128 16-bit values per thread, paired by ``mov.b32 {lo, hi}`` as each
    K step issues), the accumulator and 4 of B; tests/kernels.py attention (BM=128, one
    64-row block per consumer) assembles in 131 / 163 / 168 registers for (BN, D) = (64,
    64) / (64, 128) / (128, 64), without spills (tests/test_sm80_layout.py). All 128
    threads of the warp group that owns ``a``, converged.
    """
    if not isinstance(a, FragType) or len(a.shape) != 2:
        raise TypingError(f"gpu_dot_rs_sm80(a) must be a register tile, got {a}")
    if not isinstance(b, SmemTileType):
        raise TypingError(f"dot(b) on the GPU must be a tile loaded by ws.load (shared "
                          f"memory), got {b}")
    if a.dtype not in _MMA_DTYPE or a.dtype != b.dtype:
        raise register_a_dtype_error(a.dtype, b.dtype)
    m, kdim = a.shape
    resty, has_acc = mma_result_type(m, kdim, b, acc)
    sig = signature(resty, a, b, acc)
    dt = _MMA_DTYPE[a.dtype]
    blocks, ksteps, per_block = m // 64, kdim // 16, b.shape[1] // 2

    def codegen(context, builder, sig, args):
        count = blocks * per_block
        zero = ir.Constant(F32, 0.0)
        vals = _elements(builder, args[2], count) if has_acc else [zero] * count
        halves = _elements(builder, args[0], a.count)
        lane, _ = _lane_and_warp(builder)

        def a_regs_of(k16):
            return [[_pack_halves(builder, halves[lo], halves[hi])
                     for lo, hi in a_register_indices(k16, mi, kdim)]
                    for mi in range(blocks)]

        _mma_steps(builder, dt, a_regs_of, IRInt(builder, args[1]), b, ksteps, blocks,
                   per_block, vals, lane)
        return _pack(context, builder, resty, vals)

    return sig, codegen
