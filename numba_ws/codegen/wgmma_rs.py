"""wgmma with the A operand in registers (PTX ISA 9.7.15.5, sm_90a): ``gpu_dot_rs``.

PTX form (A from registers: no A descriptor and no ``imm-trans-a``; only B may be
transposed)::

    wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16|bf16}.{f16|bf16}
        {d0, ..., d(N/2-1)}, {a0, a1, a2, a3}, b_desc, p_scale_d, 1, 1, imm_trans_b;

``a0..a3`` are four ``.b32`` registers, each packing two fp16/bf16 elements (the lower
element in bits 0-15).

Register A layout (9.7.15.5.1.1.1, Figure 148 "WGMMA .m64nNk16 register fragment layout
for matrix A"): warp w of the warp group holds rows 16w..16w+15 of the 64x16 A slice,
laid out like the A fragment of ``mma.m16n8k16`` (9.7.14.5.8, Figure 79): with
``g = lane >> 2`` and ``t = lane % 4``, element ``a_i`` (i = 0..7) is at

    row = 16w + g + 8*((i >> 1) & 1)          (a0 a1 a4 a5: row g; a2 a3 a6 a7: row g+8)
    col = 2t + (i & 1) + 8*(i >> 2)           (a0..a3: cols 0..7; a4..a7: cols 8..15)

and ``.b32`` register j holds ``{a_2j (low), a_2j+1 (high)}``. (CUTLASS's CuTe names the
same thing: its SM90 16-bit register-A layout is the 64x16 accumulator layout.)

The mapping from an accumulator-layout fragment. A (64*mb, K) fp16 fragment produced by
``p.astype(ws.float16)`` from an fp32 accumulator keeps the accumulator layout: its
register ``r`` (0 <= r < K/2 in each 64-row block) is at row ``16w + g + 8*((r >> 1) &
1)``, column ``8*(r >> 2) + 2t + (r & 1)``. Columns 16s..16s+15 (k-step s) are the
registers ``r = 8s + i``, i = 0..7, and substituting ``r = 8s + i`` gives row
``16w + g + 8*((i >> 1) & 1)``, column ``16s + 8*(i >> 2) + 2t + (i & 1)``: exactly
``a_i`` of the A layout above, shifted by 16s columns. Hence, for block mi and k-step s::

    a_j = pack(frag[mi*K/2 + 8s + 2j] (low), frag[mi*K/2 + 8s + 2j + 1] (high)),  j = 0..3

-- no shuffles: each thread already holds its A elements (the reason FlashAttention-style
kernels feed P to the second GEMM from registers). tests/test_frag_math.py checks this
mapping with a NumPy model of both layouts.
"""
from llvmlite import ir

from numba.cuda import types
from numba.cuda.core.errors import TypingError
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ..language.types import FragType, SmemTileType
from . import tile_ops as to
from . import wgmma
from ._util import F32, I32, asm, literal_int, outputs_type, u32, u64
from .channel_ops import emit

_WGMMA_DTYPE = {types.float16: "f16", types.bfloat16: "bf16"}


def register_a_dtype_error(a_dtype, b_dtype):
    """The TypingError of a register-A dot whose operands are not fp16 / bf16 of one dtype;
    float32 (tf32) gets its own advice: its A must come from shared memory."""
    if a_dtype == b_dtype == types.float32:
        return TypingError("dot of float32 (tf32) tiles with A computed in registers: tf32 "
                           "reads A from shared memory only; use the loaded tile as A, or "
                           "convert both operands with .astype(ws.float16) / ws.bfloat16")
    return TypingError(f"dot with A in registers needs fp16/bf16 operands of one dtype, got "
                       f"{a_dtype}, {b_dtype}: convert A with .astype(ws.float16)")


def a_register_indices(s, mi=0, k=16):
    """Fragment registers packed into (a0, a1, a2, a3) for k-step ``s`` of block ``mi``
    of a (rows, k) fragment: pairs (low, high). Host-side reference for tests."""
    base = mi * (k // 2) + 8 * s
    return [(base + 2 * j, base + 2 * j + 1) for j in range(4)]


@intrinsic
def wgmma_mma_rs(typingctx, acc, a_regs, b_desc, scale_d, dtype, trans_b):
    """wgmma_mma_rs(acc, a_regs, b_desc, scale_d, dtype, trans_b) -> acc

    One ``m64nNk16`` MMA with A from registers: ``acc`` UniTuple(float32, N/2), ``a_regs``
    UniTuple(uint32, 4) (two fp16/bf16 each, see the module docstring), ``b_desc`` uint64
    (:func:`wgmma.wgmma_desc`), ``scale_d`` int (0: D = A*B), ``dtype`` literal 'f16' or
    'bf16', ``trans_b`` literal 0/1. sm_90a; all 128 threads of the warp group;
    ``wgmma_fence()`` after the last write of ``acc`` / ``a_regs`` and before this.
    """
    n = wgmma._acc_count("wgmma_mma_rs", acc)
    if not (isinstance(a_regs, types.UniTuple) and a_regs.count == 4
            and isinstance(a_regs.dtype, types.Integer) and a_regs.dtype.bitwidth == 32):
        raise TypingError(f"wgmma_mma_rs: a_regs must be UniTuple(uint32, 4), got {a_regs}")
    if not (isinstance(dtype, types.StringLiteral) and dtype.literal_value in ("f16", "bf16")):
        raise TypingError(f"wgmma_mma_rs: dtype must be the literal 'f16' or 'bf16', got {dtype}")
    dt = dtype.literal_value
    tb = literal_int("wgmma_mma_rs", "trans_b", trans_b, (0, 1))
    sig = signature(acc, acc, a_regs, b_desc, scale_d, dtype, trans_b)
    form = mma_rs_form(n, dt, tb)

    def codegen(context, builder, sig, args):
        ins = [builder.extract_value(args[0], i) for i in range(n)]
        avals = [builder.extract_value(args[1], j) for j in range(4)]
        bd = u64(context, builder, sig.args[2], args[2])
        sc = u32(context, builder, sig.args[3], args[3])
        return to._pack(context, builder, sig.return_type,
                        mma_rs_values(builder, form, ins, avals, bd, sc))

    return sig, codegen


def mma_rs_form(n, dt, tb):
    """(asm text, constraints) of :func:`wgmma_mma_rs` for ``n`` accumulator registers."""
    regs = ", ".join(f"${i}" for i in range(n))
    a = ", ".join(f"${2 * n + j}" for j in range(4))
    text = ("{\n .reg .pred ws_p;\n"
            f" setp.ne.b32 ws_p, ${2 * n + 5}, 0;\n"
            f" wgmma.mma_async.sync.aligned.m64n{2 * n}k16.f32.{dt}.{dt}\n"
            f"  {{{regs}}},\n  {{{a}}}, ${2 * n + 4}, ws_p, 1, 1, {tb};\n}}")
    cons = ",".join(["=f"] * n + [str(i) for i in range(n)] + ["r"] * 4
                    + ["l", "r", "~{memory}"])
    return text, cons


def mma_rs_values(builder, form, ins, a_regs, b_desc, scale):
    """The accumulator registers after one :func:`wgmma_mma_rs` of ``form`` on the
    registers ``ins`` with A in the four i32 ``a_regs`` (no tuples: see
    :func:`wgmma.mma_values`)."""
    text, cons = form
    res = asm(builder, text, cons, list(ins) + list(a_regs) + [b_desc, scale],
              ret=outputs_type(builder, F32, len(ins)))
    return [builder.extract_value(res, i) for i in range(len(ins))]


def _pack_halves(builder, lo, hi):
    """Two 16-bit floats as one i32, ``lo`` in bits 0-15."""
    vec = ir.Constant(ir.VectorType(lo.type, 2), ir.Undefined)
    vec = builder.insert_element(vec, lo, ir.Constant(I32, 0))
    vec = builder.insert_element(vec, hi, ir.Constant(I32, 1))
    return builder.bitcast(vec, I32)


@intrinsic
def gpu_dot_rs(typingctx, a, b, acc):
    """``acc + a @ b`` on the tensor cores with ``a`` an fp16/bf16 register fragment
    (rows, K) in the accumulator layout and ``b`` a shared-memory tile (K, N).

    Per 64-row block of ``a`` and k-step s of 16: pack registers 8s..8s+7 of the block into
    four .b32 (module docstring), one ``wgmma.mma_async ... {a0..a3}, b_desc``. The packed
    A registers and the accumulator pass through an empty asm *before* ``wgmma.fence`` so
    that no write of them can be scheduled between the fence and the MMAs; then
    ``wgmma.commit_group``. Like :func:`tile_ops.gpu_dot`, the caller waits
    (``wgmma.wait_group``) before reading the result. sm_90a.
    """
    if not isinstance(a, FragType) or len(a.shape) != 2:
        raise TypingError(f"gpu_dot_rs(a) must be a register tile, got {a}")
    if not isinstance(b, SmemTileType):
        raise TypingError(f"dot(b) on the GPU must be a tile loaded by ws.load (shared "
                          f"memory), got {b}")
    m, kdim = a.shape
    n = b.shape[1]
    if a.dtype not in _WGMMA_DTYPE or a.dtype != b.dtype:
        raise register_a_dtype_error(a.dtype, b.dtype)
    resty, has_acc = to.mma_result_type(m, kdim, b, acc)
    sig = signature(resty, a, b, acc)
    dt = _WGMMA_DTYPE[a.dtype]
    blocks, ksteps, per_block, a_per_block = m // 64, kdim // 16, n // 2, kdim // 2

    def codegen(context, builder, sig, args):
        halves = [builder.extract_value(args[0], i) for i in range(a.count)]
        packed = []
        for mi in range(blocks):
            for s in range(ksteps):
                for lo, hi in a_register_indices(s, mi, kdim):
                    packed.append(_pack_halves(builder, halves[lo], halves[hi]))
        packed = to._pin(builder, packed)
        if has_acc:
            vals = to._pin(builder, [builder.extract_value(args[2], i)
                                     for i in range(blocks * per_block)])
        else:
            vals = [ir.Constant(F32, 0.0)] * (blocks * per_block)
        emit(wgmma.wgmma_fence, context, builder, (), ())
        out = []
        for mi in range(blocks):
            block = vals[mi * per_block:(mi + 1) * per_block]
            for s in range(ksteps):
                regs = packed[(mi * ksteps + s) * 4:(mi * ksteps + s + 1) * 4]
                db, tb = to._operand_desc(builder, context, args[1], b, s, 0, False)
                scale = 1 if (has_acc or s > 0) else 0
                block = mma_rs_values(builder, mma_rs_form(per_block, dt, tb), block, regs,
                                      db, ir.Constant(I32, scale))
            out.extend(block)
        emit(wgmma.wgmma_commit_group, context, builder, (), ())
        return to._pack(context, builder, resty, out)

    return sig, codegen
