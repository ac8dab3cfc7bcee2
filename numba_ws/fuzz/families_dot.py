"""The ``ws.dot`` program families of the generator (``gemm``, ``attn``);
:mod:`numba_ws.fuzz.generator` describes them."""
import math

import numpy as np

from . import intervals as iv
from .exprs import DOT_DTYPES, FLOAT_DTYPES, Iv, Loadable, Node
from .families import (_fit_buffers, _options, _persistent_header, _prologue_2d, _ragged,
                       _shift, _off, _tile_bytes)


def _dot_tiles(g, cc):
    if cc == "8.0":
        return g.pick((64, 128)), g.pick((64, 128)), 64
    BM = g.pick((64, 128))
    BN = g.pick((16, 32, 64, 128, 128, 256), (1, 1, 2, 3, 0, 0.5))
    BK = g.pick((16, 32, 64), (1, 1, 2))
    return BM, BN, BK


def _dot_array(g, prefix, shape, dt, a_operand=False, cc="9.0a"):
    """An array a ws.dot operand is loaded from. An A operand may be column-major (M-major
    in shared memory) only on sm_90a and not for float32 (tf32 reads A K-major only):
    sm_80's mma.sync path does not read it yet. :func:`_tma_only` may restrict it
    afterwards."""
    column_major = not (a_operand and (cc == "8.0" or dt == "float32"))
    views = ("contig", "contig", "pitch16", "pitch4") + (("T",) if column_major else ())
    return g.array(prefix, shape, dt, view=g.pick(views))


def _tma_only(g, names):
    """Make the arrays of a loop TMA-readable: one channel has one lowering, and a dot
    operand with rows of fewer than 128 bytes needs TMA (cp.async writes only the 128-byte
    swizzle for dot operands). Row-major, with a row pitch that is a multiple of 16 bytes."""
    from .program import np_dtype
    for spec in g.arrays:
        if spec.name in names:
            spec.view = "contig" if spec.view in ("T", "pitch4", "contig") else spec.view
            per = 16 // np.dtype(np_dtype(spec.dtype)).itemsize
            spec.shape = spec.shape[:-1] + (-(-spec.shape[-1] // per) * per,)


def family_gemm(g, cc):
    tf32 = cc != "8.0" and g.chance(0.15)      # float32 operands: tf32 wgmma (sm_90a)
    dt = "float32" if tf32 else g.pick(DOT_DTYPES, (3, 2))
    BM, BN, BK = _dot_tiles(g, cc)
    if tf32:
        BK = g.pick((16, 32))                  # rows of 64 / 128 bytes
        g.notes.append("tf32 dot")
    G = g.pick((1, 2))
    if G == 2:                 # rows split in two wgmma M = 64 halves
        BM = 128
    g.rows_only = G == 2
    if BN == 256 and (G == 1 or BM == 64):
        BN = 128
    btrans = g.chance(0.35)
    g.constexprs.update(BM=BM, BN=BN, BK=BK)
    nk = g.randint(1, 4)
    npm, npn = g.randint(1, 2), g.randint(1, 2)
    qstyle = g.chance(0.15)
    M, N = _ragged(g, npm, BM, dt), _ragged(g, npn, BN, dt)
    K = BK if qstyle else _ragged(g, nk, BK, dt)
    if qstyle:
        nk = g.randint(1, 3)
    a = _dot_array(g, "a", (M, K), dt, a_operand=True, cc=cc)
    KB = nk * BK if qstyle else K
    b = _dot_array(g, "b", (KB, N), dt) if not btrans else _dot_array(g, "bt", (N, KB), dt)
    out_dt = g.pick(("float16", "bfloat16", "float32", "float32", "float64"))
    out = g.array("out", (M, N), out_dt, "out")
    mode = g.pick(("carried", "carried", "plus", "scaled", "store"), (3, 2, 1, 1, 1))
    if mode == "store":
        out = None
        g.arrays.pop()
        out = g.array("out", (M, npn * nk * BN), out_dt, "out")
    persistent = g.chance(0.25) and mode != "store"
    npn_src = f"ws.cdiv({b}.shape[{0 if btrans else 1}], BN)"
    if persistent:
        g.emit(f"npn = {npn_src}")
        _persistent_header(g, f"ws.cdiv({a}.shape[0], BM) * npn", "npn")
    else:
        _prologue_2d(g, "1d", npn_src)
    g.emit("r0 = pid_m * BM")
    g.emit("c0 = pid_n * BN")
    # loads before the loop
    extra_before = []
    if qstyle:
        g.emit(f"q = ws.load({a}, (r0, 0), (BM, BK))")
        g.env["q"] = Node("q", Iv(dt, (BM, BK), min(g.spec(a).lo, 0), max(g.spec(a).hi, 0)))
    if g.chance(0.3) and mode != "store":
        bias = g.array("bias", (N,), g.pick(FLOAT_DTYPES))
        g.loadables.append(Loadable(g, bias, "(c0,)", (BN,)))
        extra_before.append(g.loadables[-1])
        if g.chance(0.6):
            g.loadables[-1].make()
    if g.chance(0.2) and mode != "store":
        rv = g.array("r", (M, 1), "float32")
        g.loadables.append(Loadable(g, rv, "(r0, 0)", (BM, 1)))
        extra_before.append(g.loadables[-1])
        if g.chance(0.6):
            g.loadables[-1].make()
    if mode != "store":
        g.emit("acc = ws.zeros((BM, BN), ws.float32)")
    g.emit(f"for k in range(ws.cdiv({b}.shape[{1 if btrans else 0}], BK)):")
    g.indent += 1
    xs = _shift(g, 0.1)
    if not qstyle:
        g.emit(f"x = ws.load({a}, ({_off('r0', xs[0])}, k * BK), (BM, BK))")
        xa = Iv(dt, (BM, BK), min(g.spec(a).lo, 0), max(g.spec(a).hi, 0))
        xname = "x"
    else:
        xa, xname = g.env["q"].val, "q"
    if btrans:
        g.emit(f"yt = ws.load({b}, (c0, k * BK), (BN, BK))")
        ya = iv.trans(Iv(dt, (BN, BK), min(g.spec(b).lo, 0), max(g.spec(b).hi, 0)))
        ysrc = "ws.trans(yt)"
    else:
        g.emit(f"y = ws.load({b}, (k * BK, c0), (BK, BN))")
        ya = Iv(dt, (BK, BN), min(g.spec(b).lo, 0), max(g.spec(b).hi, 0))
        ysrc = "y"
    # the A operand: shared memory, or a register tile of the same dtype
    areg = "smem" if tf32 else g.pick(("smem", "smem", "scale", "relu", "neg", "exp", "f32"),
                                      (4, 2, 1, 1, 1, 1, 1))   # no register A for tf32
    asrc, aval = {
        "smem": (xname, xa),
        "scale": (f"({xname} * 2.0)", iv.mul(xa, 2.0)),
        "relu": (f"ws.maximum({xname}, 0.0)", iv.maximum(xa, 0.0)),
        "neg": (f"(-{xname})", iv.neg(xa)),
        "exp": (f"ws.exp({xname} * 0.5)", iv.exp(iv.mul(xa, 0.5))),
        "f32": (f"({xname}.astype(ws.float32) * 0.5).astype({g.dt(dt)})",
                iv.astype(iv.mul(iv.astype(xa, "float32"), 0.5), dt)),
    }[areg]
    if areg != "smem":
        g.notes.append(f"register A ({areg})")
    dot = iv.dot(aval, ya)
    z = None
    if g.chance(0.3):
        zarr = g.array("e", (M, nk * BN), g.pick(FLOAT_DTYPES))
        g.emit(f"z = ws.load({zarr}, (r0, k * BN), (BM, BN))")
        spec = g.spec(zarr)
        z = Iv(spec.dtype, (BM, BN), min(spec.lo, 0), max(spec.hi, 0))
    if min(BK, BN) * (4 if tf32 else 2) < 128 and "odd_pitch" not in g.features:
        _tma_only(g, [a, b] + ([zarr] if z is not None else []))
    zterm, zval = "", None
    if z is not None:
        c = g.pick((0.5, -0.25, 1.0))
        zterm = f" + ws.astype(z, ws.float32) * {c!r}"
        zval = iv.mul(iv.astype(z, "float32"), c)

    def with_z(v):
        return iv.add(v, zval) if zval is not None else v
    if mode == "store":
        g.emit(f"t = ws.dot({asrc}, {ysrc}){zterm}")
        g.env["t"] = Node("t", with_z(dot))
        e = g.ex((BM, BN), "float32", g.randint(0, 2))
        g.store(out, f"(r0, (pid_n * {nk} + k) * BN)", e)
        g.indent -= 1
    else:
        accv = iv.zeros((BM, BN), "float32")
        for _ in range(nk):
            if mode == "carried":
                accv = with_z(iv.dot(aval, ya, accv))
            elif mode == "plus":
                accv = with_z(iv.add(accv, dot))
            else:
                accv = with_z(iv.dot(aval, ya, iv.mul(accv, 0.5)))
        line = {"carried": f"acc = ws.dot({asrc}, {ysrc}, acc){zterm}",
                "plus": f"acc = acc + ws.dot({asrc}, {ysrc}){zterm}",
                "scaled": f"acc = ws.dot({asrc}, {ysrc}, acc * 0.5){zterm}"}[mode]
        g.emit(line)
        g.indent -= 1
        g.env = {k: v for k, v in g.env.items() if k in [ld.node.src for ld in extra_before
                                                           if ld.node is not None]}
        g.env["acc"] = Node("acc", accv)
        g.loadables = [ld for ld in extra_before]
        if g.chance(0.3):
            res = g.array("res", (M, N), g.pick(("float16", "bfloat16", "float32")))
            g.loadables.append(Loadable(g, res, "(r0, c0)", (BM, BN)))
            if g.chance(0.5):
                g.loadables[-1].make()
        epi = g.using(g.ex((BM, BN), "float32", g.randint(0, 3)), g.env["acc"])
        ss = _shift(g, 0.15)
        g.store(out, f"({_off('r0', ss[0])}, {_off('c0', ss[1])})", epi)
        if g.chance(0.25):
            stat = g.array("out", (M, npn), "float32", "out")
            v = g.vector_of((BM, BN), 1, "float32")
            g.store(stat, "(r0, pid_n)", v)
    opts = _options(g, G)
    if g.chance(0.2):
        opts["dot_in_flight"] = 1
    g.options.update(opts)
    loop_bytes = _tile_bytes((BM, BK), dt, True) * (0 if qstyle else 1) + \
        _tile_bytes((BK, BN), dt, True) + (_tile_bytes((BM, BN), "float32") if z else 0)
    # a float32 B tile stored N-major is copied K-major into a buffer per consumer group
    stage = -(-BK * BN * 4 // 1024) * 1024 * G if tf32 else 0
    _fit_buffers(g, g.options, loop_bytes, 2 * BM * BN * 4 // max(G, 1) + 2048 + stage, cc)
    if persistent:
        return (g.randint(1, max(1, min(npm * npn - 1, 3))),) if npm * npn > 1 else (1,)
    return (npm * npn,)


def _attn_view(g, BN):
    """A view for an attention operand: a row pitch that is a 16-byte multiple (TMA), or
    a 4-byte one (cp.async) where tiles have rows of 128 bytes; never column-major (q, p
    and x are A operands, which cannot be M-major yet; k, v, y, w would land with rows
    of BN elements)."""
    views = ("contig", "contig", "contig", "pitch16") + (("pitch4",) if BN >= 64 else ())
    return g.pick(views)


def family_attn(g, cc):
    dt = g.pick(DOT_DTYPES, (3, 2))
    if cc == "8.0":
        BM, BN, D = g.pick((64, 128)), 64, g.pick((64, 128))
    else:
        BM = g.pick((64, 128))
        BN = g.pick((16, 32, 64, 128), (1, 1, 3, 1))
        D = g.pick((32, 64, 128), (1, 3, 1))  # v (BN, D): an N-major B, 64-byte swizzle at 32
    G = g.pick((1, 2))
    if G == 2:
        BM = 128
    g.rows_only = G == 2
    variant = g.pick(("flash", "plain", "chain"), (3, 2, 1))
    g.constexprs.update(BM=BM, BN=BN, D=D)
    nj = g.randint(1, 4)
    npm = g.randint(1, 2)
    S = _ragged(g, max(npm, 1), BM, dt)
    L = _ragged(g, nj, BN, dt)
    g.emit("r0 = ws.program_id(0) * BM")
    scale = 1.0 / math.sqrt(D) * g.pick((0.5, 1.0, 0.25))
    if variant == "chain":
        x = g.array("x", (S, D), dt, rng_range=(-1.0, 1.0), view=_attn_view(g, BN))
        y = g.array("y", (D, L), dt, rng_range=(-1.0, 1.0), view=_attn_view(g, BN))
        w = g.array("w", (L, D), dt, rng_range=(-1.0, 1.0), view=_attn_view(g, BN))
        out = g.array("out", (S, D), g.pick(("float16", "float32")), "out")
        g.emit(f"xt = ws.load({x}, (r0, 0), (BM, D))")
        g.emit("acc = ws.zeros((BM, D), ws.float32)")
        g.emit(f"for j in range(ws.cdiv({y}.shape[1], BN)):")
        g.indent += 1
        g.emit(f"yt = ws.load({y}, (0, j * BN), (D, BN))")
        g.emit(f"wt = ws.load({w}, (j * BN, 0), (BN, D))")
        xa = Iv(dt, (BM, D), -1, 1)
        ya = Iv(dt, (D, BN), -1, 1)
        wa = Iv(dt, (BN, D), -1, 1)
        inner = iv.astype(iv.mul(iv.dot(xa, ya), scale), dt)
        accv = iv.zeros((BM, D), "float32")
        for _ in range(nj):
            accv = iv.dot(inner, wa, accv)
        g.emit(f"acc = ws.dot((ws.dot(xt, yt) * {scale!r}).astype({g.dt(dt)}), wt, acc)")
        g.indent -= 1
        g.env = {"acc": Node("acc", accv)}
        e = g.using(g.ex((BM, D), "float32", g.randint(0, 2)), g.env["acc"])
        g.store(out, "(r0, 0)", e)
        lb = _tile_bytes((D, BN), dt, True) + _tile_bytes((BN, D), dt, True)
    else:
        q = g.array("q", (S, D), dt, rng_range=(-1.0, 1.0), view=_attn_view(g, BN))
        k = g.array("k", (L, D), dt, rng_range=(-1.0, 1.0), view=_attn_view(g, BN))
        v = g.array("v", (L, D), dt, rng_range=(-1.0, 1.0), view=_attn_view(g, BN))
        out = g.array("out", (S, D), g.pick(("float16", "float32", "bfloat16")), "out")
        sm = g.scalar(scale) if g.chance(0.5) else repr(scale)
        g.emit(f"q_tile = ws.load({q}, (r0, 0), (BM, D))")
        qa = Iv(dt, (BM, D), -1, 1)
        ka = Iv(dt, (BN, D), -1, 1)
        va = Iv(dt, (BN, D), -1, 1)
        s_val = iv.mul(iv.dot(qa, iv.trans(ka)), scale)
        stats = variant == "flash" and g.chance(0.5)
        if variant == "flash":
            g.emit("m_i = ws.full((BM, 1), -math.inf, ws.float32)")
            g.emit("l_i = ws.zeros((BM, 1), ws.float32)")
        g.emit("acc = ws.zeros((BM, D), ws.float32)")
        g.emit(f"for j in range(ws.cdiv({k}.shape[0], BN)):")
        g.indent += 1
        g.emit(f"k_tile = ws.load({k}, (j * BN, 0), (BN, D))")
        g.emit(f"v_tile = ws.load({v}, (j * BN, 0), (BN, D))")
        g.emit(f"s = ws.dot(q_tile, ws.trans(k_tile)) * {sm}")
        if variant == "flash":
            g.emit(f"m_new = ws.maximum(m_i, {g.red('max', 's', 1)})")
            g.emit("alpha = ws.exp(m_i - m_new)")
            g.emit("p = ws.exp(s - m_new)")
            g.emit(f"l_i = l_i * alpha + {g.red('sum', 'p', 1)}")
            g.emit(f"acc = ws.dot(p.astype({g.dt(dt)}), v_tile, acc * alpha)")
            g.emit("m_i = m_new")
            m_i, l_i, accv = iv.full((BM, 1), -math.inf, "float32"), \
                iv.zeros((BM, 1), "float32"), iv.zeros((BM, D), "float32")
            for _ in range(nj):
                m_new = iv.maximum(m_i, iv.reduce_max(s_val, 1))
                alpha = iv.exp(iv.sub(m_i, m_new))
                p = iv.exp(iv.sub(s_val, m_new))
                l_i = iv.add(iv.mul(l_i, alpha), iv.reduce_sum(p, 1))
                accv = iv.dot(iv.astype(p, dt), va, iv.mul(accv, alpha))
                m_i = m_new
        else:
            c = g.pick((1.0, 0.5, -1.0))
            g.emit(f"p = ws.exp(s * {c!r})")
            g.emit(f"acc = ws.dot(p.astype({g.dt(dt)}), v_tile, acc)")
            p = iv.exp(iv.mul(s_val, c))
            accv = iv.zeros((BM, D), "float32")
            for _ in range(nj):
                accv = iv.dot(iv.astype(p, dt), va, accv)
        g.indent -= 1
        g.env = {"acc": Node("acc", accv)}
        if variant == "flash":
            g.env["l_i"] = Node("l_i", l_i)
            g.env["m_i"] = Node("m_i", m_i)
            if g.chance(0.7):
                g.store(out, "(r0, 0)", Node("(acc / l_i)", iv.truediv(accv, l_i)))
            else:
                g.store(out, "(r0, 0)", g.using(g.ex((BM, D), "float32", g.randint(0, 2)),
                                                g.env["acc"]))
            if stats:
                mo = g.array("out", (S, 1), "float32", "out")
                g.store(mo, "(r0, 0)", Node("m_i", m_i))
                lse = g.array("out", (S, 1), "float32", "out")
                g.store(lse, "(r0, 0)", Node("(m_i + ws.log(l_i))", iv.add(m_i, iv.log(l_i))))
        else:
            g.store(out, "(r0, 0)", g.using(g.ex((BM, D), "float32", g.randint(0, 2)),
                                            g.env["acc"]))
        lb = 2 * _tile_bytes((BN, D), dt, True)
    g.options.update(_options(g, G))
    _fit_buffers(g, g.options, lb, _tile_bytes((BM, D), dt, True) + 2 * BM * BN * 4
                 + 2 * BM * D * 4, cc)
    return (npm,)


