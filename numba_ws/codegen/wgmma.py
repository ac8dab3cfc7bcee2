"""Warp-group MMA (PTX ISA 9.7.15, sm_90a): wgmma.mma_async with both operands in SMEM.

Shared-memory matrix descriptor (9.7.15.5.1.2.2 "Matrix Descriptor Format"), 64 bits:
bits 0-13 ``(start address & 0x3FFFF) >> 4``, 16-29 ``LBO >> 4``, 32-45 ``SBO >> 4``,
49-51 base offset (0 when the swizzle pattern starts on its repeat boundary: 1024 B for
128B swizzle), 62-63 swizzle mode (0 none, 1 = 128B, 2 = 64B, 3 = 32B).

What LBO / SBO mean (9.7.15.5.1.2.1 "Major-ness supported by Strides" and the canonical
layouts of 9.7.15.5.1.2.1.3, in elements, T = 128 / element bits = 8 for fp16/bf16)::

    K-major,  128B swizzle: ((8,m),(T,2k)) : ((8T,SBO),(1,T))
        "LBO -- Swizzled layouts: not used, assumed to be 1";
        "SBO -- K-Major: the offset from the first 8 rows to the next 8 rows".
    MN-major, 128B swizzle: ((T,8,m),(8,k)) : ((1,T,LBO),(8T,SBO))
        "LBO -- MN-Major, Swizzled layouts: offset from the first (swizzle-byte-size/16)
         rows to the next (swizzle-byte-size/16) rows"  (= next 64-element MN chunk);
        "SBO -- MN-Major, Swizzled layout: offset from the first 8 columns to the next 8
         columns"  (= next group of 8 K rows).
    (The 64B-swizzle bf16 MN example of the same section, ((8,4,2),(8,2)):((1,8,256),
    (32,512)) with LBO = 256, SBO = 512 elements, confirms: LBO steps MN, SBO steps K.)

Values for numba_ws tiles (fp16/bf16, 128B swizzle, tiles written by TMA):

(1) A: BM x 64 K-major (box {64, rows}; row r at byte 128*r, 8-row atoms 1024 B apart):
    LBO = 16 B (encoded 1, unused), SBO = 1024 B (encoded 64), trans_a = 0.
    k16 step s (0..3) inside the 64-wide K tile: start address + 32*s bytes (base offset
    stays 0: the pattern still starts at the tile's 1024-aligned address). Rows 64g..64g+63
    for consumer g: start address + 8192*g.
(2) B: K x N with N contiguous (MN-major, trans_b = 1), ceil(BN/64) TMA boxes {64 (N),
    BK (K)} stored one after another, each BK*128 bytes (K row r of a box at 128*r):
    LBO = BK*128 bytes (8192 for BK = 64; between 64-column N chunks),
    SBO = 1024 B (between 8-row K groups), k16 step s: start address + 2048*s bytes.
    A K-major B (trans_b = 0, tile N x 64 like A) uses A's values. B rows of 64 / 32 bytes
    (N = 32 / 16 fp16, or N * 2 not a multiple of 128 / 64) are boxes of 32 / 16 columns
    in the 64 / 32-byte swizzle: LBO = BK*swz, SBO = 8*swz, k16 step 16*swz bytes
    (codegen/swizzle.wgmma_operand_fields; ptxas-checked on the CPU 2026-12-07, GPU test
    tests/gpu/test_gemm.py::test_gemm_narrow_n_row_major_b). Every form's fields are
    checked element by element against a model of these canonical layouts and TMA's
    writes in tests/test_wgmma_operand_layout.py (CPU).

Validated on an H200 (2026-12-02) by tests/gpu/test_hand_gemm.py: (1) and (2) give correct
C for 4096^3, 1000^3, 1024x1024x64 and 130x264x72 (partial and fully out-of-bound boxes).
"""
from llvmlite import ir

from numba.cuda import types
from numba.cuda.core.errors import TypingError
from numba.cuda.extending import intrinsic
from numba.cuda.typing import signature

from ._util import F32, I64, asm, check_ints, literal_int, outputs_type, u32, u64

SWIZZLE_NONE, SWIZZLE_128B, SWIZZLE_64B, SWIZZLE_32B = 0, 1, 2, 3


def desc_value(addr, lbo_bytes, sbo_bytes, swizzle):
    """Host-side reference of :func:`wgmma_desc` (same bits), for tests and constants."""
    enc = lambda x: (int(x) & 0x3FFFF) >> 4  # noqa: E731
    return enc(addr) | (enc(lbo_bytes) << 16) | (enc(sbo_bytes) << 32) | ((swizzle & 3) << 62)


@intrinsic
def wgmma_desc(typingctx, addr, lbo_bytes, sbo_bytes, swizzle):
    """wgmma_desc(addr_u32, lbo_bytes, sbo_bytes, swizzle) -> uint64 matrix descriptor.

    Pure integer arithmetic (no PTX instruction of its own; folds to a constant when the
    inputs are constants): ``enc(addr) | enc(lbo) << 16 | enc(sbo) << 32 | swizzle << 62``
    with ``enc(x) = (x & 0x3FFFF) >> 4``; base offset 0. ``swizzle`` is the mode code
    (1 = 128B). See the module docstring for the LBO/SBO values of A and B tiles.
    Invariants: ``addr`` 16-byte aligned; for 128B swizzle the tile's pattern origin must be
    1024-byte aligned (sub-tile starts like +32 B per k16 step are fine). Any sm.
    """
    check_ints("wgmma_desc", addr=addr, lbo_bytes=lbo_bytes, sbo_bytes=sbo_bytes,
               swizzle=swizzle)
    sig = signature(types.uint64, addr, lbo_bytes, sbo_bytes, swizzle)

    def codegen(context, builder, sig, args):
        def enc(i):
            v = u64(context, builder, sig.args[i], args[i])
            return builder.lshr(builder.and_(v, ir.Constant(I64, 0x3FFFF)), ir.Constant(I64, 4))
        sw = builder.and_(u64(context, builder, sig.args[3], args[3]), ir.Constant(I64, 3))
        d = enc(0)
        d = builder.or_(d, builder.shl(enc(1), ir.Constant(I64, 16)))
        d = builder.or_(d, builder.shl(enc(2), ir.Constant(I64, 32)))
        return builder.or_(d, builder.shl(sw, ir.Constant(I64, 62)))

    return sig, codegen


def _simple(text):
    def codegen(context, builder, sig, args):
        asm(builder, text, "~{memory}")
        return context.get_dummy_value()
    return codegen


@intrinsic
def wgmma_fence(typingctx):
    """wgmma_fence(): ``wgmma.fence.sync.aligned;``

    Orders prior register/shared-memory accesses of the warp group before the following
    wgmma.mma_async that read them (the accumulator registers, SMEM written by generic
    stores). Required before the first wgmma of a batch (9.7.15.7.1). Requires sm_90a.
    Invariants: all 128 threads of the warp group, warp-group-uniform control flow.
    """
    return signature(types.none), _simple("wgmma.fence.sync.aligned;")


@intrinsic
def wgmma_commit_group(typingctx):
    """wgmma_commit_group(): ``wgmma.commit_group.sync.aligned;`` -- closes the wgmma-group
    of all prior uncommitted wgmma.mma_async. Requires sm_90a. All 128 threads."""
    return signature(types.none), _simple("wgmma.commit_group.sync.aligned;")


@intrinsic
def wgmma_wait_group(typingctx, n):
    """wgmma_wait_group(n): ``wgmma.wait_group.sync.aligned n;`` (n a literal int 0..7)

    Waits until at most ``n`` wgmma-groups are pending; with n = 0 all prior wgmma have
    completed, their SMEM operands may be released and the accumulators read. Requires
    sm_90a. Invariants: all 128 threads; afterwards pass the accumulator through
    :func:`wgmma_fence_operand` before any non-wgmma use so that no read of it can be
    scheduled above the wait.
    """
    count = literal_int("wgmma_wait_group", "n", n, range(8))
    return signature(types.none, n), _simple(f"wgmma.wait_group.sync.aligned {count};")


def _acc_count(name, acc):
    if not (isinstance(acc, types.UniTuple) and acc.dtype == types.float32
            and 4 <= acc.count <= 128 and acc.count % 4 == 0):
        raise TypingError(f"{name}: acc must be UniTuple(float32, N/2) with N a multiple of 8"
                          f" in 8..256 (2..128 registers in steps of 4), got {acc}")
    return acc.count


def _unpack(builder, acc, n):
    return [builder.extract_value(acc, i) for i in range(n)]


def _pack(context, builder, tupty, vals):
    out = ir.Constant(context.get_value_type(tupty), ir.Undefined)
    for i, v in enumerate(vals):
        out = builder.insert_value(out, v, i)
    return out


@intrinsic
def wgmma_zero_acc(typingctx, n):
    """wgmma_zero_acc(N) -> UniTuple(float32, N // 2) of zeros (N a literal, 8..256, %8).

    The initial accumulator of an ``m64nNk16`` chain (constants, no PTX of its own).
    Alternatively pass scale_d = 0 to the first wgmma_mma. Any thread.
    """
    big_n = literal_int("wgmma_zero_acc", "N", n, range(8, 257, 8))
    tupty = types.UniTuple(types.float32, big_n // 2)
    sig = signature(tupty, n)

    def codegen(context, builder, sig, args):
        zero = ir.Constant(F32, 0.0)
        return _pack(context, builder, sig.return_type, [zero] * (big_n // 2))

    return sig, codegen


@intrinsic
def wgmma_fence_operand(typingctx, acc):
    """wgmma_fence_operand(acc) -> acc: an empty asm that "rewrites" every register of acc.

    Emits nothing in PTX; to LLVM it is a side-effecting asm with ``=f`` outputs tied to
    the inputs, so computations on the accumulator cannot move across it (or across the
    side-effecting wgmma_wait_group before it). Use after ``wgmma_wait_group`` and before
    reading the accumulator. Any sm.
    """
    n = _acc_count("wgmma_fence_operand", acc)
    sig = signature(acc, acc)

    def codegen(context, builder, sig, args):
        cons = ",".join(["=f"] * n + [str(i) for i in range(n)])
        ret = outputs_type(builder, F32, n)
        res = asm(builder, "", cons, _unpack(builder, args[0], n), ret=ret)
        return _pack(context, builder, sig.return_type, _unpack(builder, res, n))

    return sig, codegen


@intrinsic
def wgmma_mma(typingctx, acc, a_desc, b_desc, scale_d, dtype, trans_a, trans_b):
    """wgmma_mma(acc, a_desc, b_desc, scale_d, dtype, trans_a, trans_b) -> acc

    One ``m64nNk16`` MMA, A and B from shared memory through descriptors, fp32 accumulate.
    ``acc``: UniTuple(float32, N/2) (N = 2*len(acc), 8..256, multiple of 8); ``a_desc`` /
    ``b_desc``: uint64 (:func:`wgmma_desc`); ``scale_d``: int, 0 -> D = A*B, else
    D = A*B + D; ``dtype``: literal 'f16' or 'bf16'; ``trans_a`` / ``trans_b``: literal 0/1
    (1 = M-major A / N-major B). PTX (one asm; N/2 ``=f`` outputs tied to N/2 inputs,
    returned as an LLVM literal struct of floats, i.e. registers, never memory)::

        { .reg .pred ws_p;
          setp.ne.b32 ws_p, scale_d, 0;
          wgmma.mma_async.sync.aligned.m64n{N}k16.f32.{dt}.{dt}
              {d0, ..., d(N/2-1)}, a_desc, b_desc, ws_p, 1, 1, trans_a, trans_b; }

    Requires sm_90a. Invariants: all 128 threads of a warp group (warps 4g..4g+3) execute
    it with identical descriptors; ``wgmma_fence()`` before the first MMA of a batch, then
    ``wgmma_commit_group()`` / ``wgmma_wait_group(n)``; register fragment layout: see
    :mod:`numba_ws.codegen.fragments`.
    """
    n = _acc_count("wgmma_mma", acc)
    check_ints("wgmma_mma", a_desc=a_desc, b_desc=b_desc, scale_d=scale_d)
    if not (isinstance(dtype, types.StringLiteral) and dtype.literal_value in ("f16", "bf16")):
        raise TypingError(f"wgmma_mma: dtype must be the literal 'f16' or 'bf16', got {dtype}")
    dt = dtype.literal_value
    ta = literal_int("wgmma_mma", "trans_a", trans_a, (0, 1))
    tb = literal_int("wgmma_mma", "trans_b", trans_b, (0, 1))
    sig = signature(acc, acc, a_desc, b_desc, scale_d, dtype, trans_a, trans_b)
    form = mma_form(n, dt, ta, tb)

    def codegen(context, builder, sig, args):
        ad = u64(context, builder, sig.args[1], args[1])
        bd = u64(context, builder, sig.args[2], args[2])
        sc = u32(context, builder, sig.args[3], args[3])
        outs = mma_values(builder, form, _unpack(builder, args[0], n), ad, bd, sc)
        return _pack(context, builder, sig.return_type, outs)

    return sig, codegen


def mma_form(n, dt, ta, tb):
    """(asm text, constraints) of :func:`wgmma_mma` for ``n`` accumulator registers.

    ``dt`` 'tf32' (float32 operands, both K-major: ``ta = tb = 0``) gives the
    ``m64nNk8.f32.tf32.tf32`` form, which has no transpose operands (PTX ISA 9.7.15.5.2)."""
    regs = ", ".join(f"${i}" for i in range(n))
    if dt == "tf32":
        if ta or tb:
            raise ValueError("wgmma .tf32 reads both operands K-major (no transpose)")
        shape, trans = "k8", ""
    else:
        shape, trans = "k16", f", {ta}, {tb}"
    text = ("{\n .reg .pred ws_p;\n"
            f" setp.ne.b32 ws_p, ${2 * n + 2}, 0;\n"
            f" wgmma.mma_async.sync.aligned.m64n{2 * n}{shape}.f32.{dt}.{dt}\n"
            f"  {{{regs}}},\n  ${2 * n}, ${2 * n + 1}, ws_p, 1, 1{trans};\n}}")
    cons = ",".join(["=f"] * n + [str(i) for i in range(n)] + ["l", "l", "r", "~{memory}"])
    return text, cons


def mma_values(builder, form, ins, a_desc, b_desc, scale):
    """The accumulator registers after one :func:`wgmma_mma` of ``form`` (mma_form) on
    the registers ``ins`` (LLVM floats), descriptors i64, scale i32: the codegen of the
    intrinsic without packing its tuples, so that a chain of k-steps passes registers
    straight from one asm to the next (the IR of a 128x256 GEMM: 256 fewer
    ``extractvalue`` / ``insertvalue`` a k-step)."""
    text, cons = form
    res = asm(builder, text, cons, list(ins) + [a_desc, b_desc, scale],
              ret=outputs_type(builder, F32, len(ins)))
    return _unpack(builder, res, len(ins))
