"""The element-wise program families of the generator (``ew``, ``ew_loop``, ``vec``) and
the helpers every family uses (ragged extents, shifted offsets, grids, options, shared
memory). :mod:`numba_ws.fuzz.generator` describes them."""
import math

import numpy as np

from . import intervals as iv
from .exprs import (FLOAT_DTYPES, INT_DTYPES, IMAX, LIMIT, SMEM_BUDGET, Iv, Loadable, Node,
                    Retry)


def _pow2(rng, lo, hi):
    return 2 ** int(rng.integers(int(math.log2(lo)), int(math.log2(hi)) + 1))


def _float_or_int(g, int_weight=0.2):
    if g.chance(int_weight):
        return g.pick(INT_DTYPES)
    return g.pick(FLOAT_DTYPES, (3, 2, 4, 1))


def _ragged(g, n_tiles, tile, dtype=None):
    """An extent of ``n_tiles`` tiles, often cut short (ragged), keeping rows of fp16 /
    bf16 arrays 4-byte aligned unless odd pitches are a feature."""
    n = n_tiles * tile
    if g.chance(0.5):
        cut = g.randint(1, max(1, tile - 1))
        n = max(1, n - cut)
    if dtype is not None and dtype in ("float16", "bfloat16") and n % 2 \
            and "odd_pitch" not in g.features:
        n = n + 1 if n + 1 <= n_tiles * tile else n - 1
    return max(n, 1)


def _shift(g, p=0.2):
    if not g.chance(p):
        return (0, 0)
    return (g.pick((0, 0, 1, -1, 3, -5)), g.pick((0, 1, -2, 7, -3)))


def _off(base, s):
    return base if s == 0 else f"{base} + {s}" if s > 0 else f"{base} - {-s}"


def _prologue_2d(g, style, npn_src):
    """Emit pid_m / pid_n / r0 / c0 for a non-persistent grid."""
    if style == "2d":
        g.emit("pid_m = ws.program_id(0)")
        g.emit("pid_n = ws.program_id(1)")
    else:
        g.emit("pid = ws.program_id(0)")
        g.emit(f"pid_m = pid // {npn_src}")
        g.emit(f"pid_n = pid % {npn_src}")


def _persistent_header(g, ntiles_src, npn_src):
    g.emit(f"for tile in range(ws.program_id(0), {ntiles_src}, ws.num_programs(0)):")
    g.indent += 1
    g.emit(f"pid_m = tile // {npn_src}")
    g.emit(f"pid_n = tile % {npn_src}")


def _grid(g, style, npm, npn):
    if style == "2d":
        return (npm, npn)
    if style == "persistent":
        return (g.randint(1, max(1, min(npm * npn - 1, 4))),) if npm * npn > 1 else (1,)
    return (npm * npn,)


def _options(g, groups=None):
    return {"num_consumer_groups": groups if groups is not None else g.pick((1, 2)),
            "num_buffers_warp_spec": g.randint(1, 4)}


def _fit_buffers(g, options, loop_bytes, other_bytes, cc):
    budget = SMEM_BUDGET[cc] - other_bytes
    nb = options["num_buffers_warp_spec"]
    while nb > 1 and nb * loop_bytes > budget:
        nb -= 1
    options["num_buffers_warp_spec"] = nb
    if nb * loop_bytes > budget:
        raise Retry("shared memory")


def _tile_bytes(shape, dtype, dot=False):
    from .program import np_dtype
    item = np.dtype(np_dtype(dtype)).itemsize
    rows = shape[0] if len(shape) == 2 else 1
    cols = shape[-1]
    if not dot:
        cols = -(-cols * item // 16) * 16 // item
    return rows * cols * item


def family_ew(g, cc):
    dt = _float_or_int(g)
    G = g.pick((1, 2))
    limit = 8192 if G == 1 else 16384
    while True:
        BM, BN = _pow2(g.rng, 16, 128), _pow2(g.rng, 16, 128)
        if BM * BN <= limit:
            break
    g.constexprs.update(BM=BM, BN=BN)
    npm, npn = g.randint(1, 3), g.randint(1, 3)
    style = g.pick(("2d", "1d", "persistent"), (2, 2, 1))
    in_dtypes = [dt] + [_float_or_int(g) for _ in range(g.randint(0, 2))]
    M = _ragged(g, npm, BM, "float16")
    N = _ragged(g, npn, BN, "float16")
    ins = [g.array("a", (M, N), d) for d in in_dtypes]
    out_dt = dt if g.chance(0.6) else _float_or_int(g)
    out = g.array("out", (M, N), out_dt, "out")
    vec = g.array("v", (N,), g.pick(FLOAT_DTYPES)) if g.chance(0.3) else None
    rvec = g.array("r", (M, 1), g.pick(("float32", "float64"))) if g.chance(0.25) else None
    cvec = g.array("c", (1, N), g.pick(FLOAT_DTYPES)) if g.chance(0.2) else None
    rstat = g.array("out", (M, npn), "float32", "out") if g.chance(0.3) else None
    cstat = g.array("out", (npm, N), "float32", "out") if g.chance(0.2) else None
    tout = g.array("out", (N, M), g.pick(FLOAT_DTYPES), "out") if g.chance(0.2) else None
    astat = g.array("out", (M, npn), "int32", "out") \
        if "argmax" in g.features and g.chance(0.25) else None
    npn_src = f"ws.cdiv({out}.shape[1], BN)"
    if style == "persistent":
        g.emit(f"npn = {npn_src}")
        _persistent_header(g, f"ws.cdiv({out}.shape[0], BM) * npn", "npn")
    else:
        _prologue_2d(g, style, npn_src)
    g.emit("r0 = pid_m * BM")
    g.emit("c0 = pid_n * BN")
    for a in ins:
        s = _shift(g)
        g.loadables.append(Loadable(g, a, f"({_off('r0', s[0])}, {_off('c0', s[1])})",
                                    (BM, BN)))
    if vec:
        g.loadables.append(Loadable(g, vec, "(c0,)", (BN,)))
    if rvec:
        g.loadables.append(Loadable(g, rvec, "(r0, 0)", (BM, 1)))
    if cvec:
        g.loadables.append(Loadable(g, cvec, "(0, c0)", (1, BN)))
    main = g.compute((BM, BN), dt)
    ss = _shift(g, 0.15)
    g.store(out, f"({_off('r0', ss[0])}, {_off('c0', ss[1])})", main)
    if rstat:
        v = g.vector_of((BM, BN), 1, dt)
        g.store(rstat, "(r0, pid_n)", v)
    if cstat:
        v = g.vector_of((BM, BN), 0, dt)
        g.store(cstat, "(pid_m, c0)", v)
    if tout:
        t = g.ex((BM, BN), g.pick(FLOAT_DTYPES), 2)
        g.store(tout, "(c0, r0)", Node(f"ws.trans({t.src})", iv.trans(t.val)))
    if astat:                  # the index of a row's maximum / minimum (ties: the first)
        t = g.leaf((BM, BN), dt) if g.chance(0.5) else g.ex((BM, BN), dt, 2)
        g.store(astat, "(r0, pid_n)", Node(g.red(g.pick(("argmax", "argmin")), t.src, 1),
                                           Iv("int32", (BM, 1), 0, BN - 1)))
    g.options.update(_options(g, G))
    tiles = sum(_tile_bytes((BM, BN), d) for d in in_dtypes)
    _fit_buffers(g, g.options, tiles if style == "persistent" else 0, 0 if style ==
                 "persistent" else tiles, cc)
    return _grid(g, style, npm, npn)


def family_ew_loop(g, cc):
    dt = _float_or_int(g, 0.15)
    G = g.pick((1, 2))
    along = g.pick(("cols", "rows"), (3, 1))   # loop over column tiles (row stats) or rows
    while True:
        BM, BN = _pow2(g.rng, 16, 128), _pow2(g.rng, 16, 128)
        if BM * BN <= (8192 if G == 1 else 16384):
            break
    g.constexprs.update(BM=BM, BN=BN)
    nb_tiles, nk = g.randint(1, 3), g.randint(1, 4)
    if along == "cols":
        M, N = _ragged(g, nb_tiles, BM, "float16"), _ragged(g, nk, BN, "float16")
    else:
        M, N = _ragged(g, nk, BM, "float16"), _ragged(g, nb_tiles, BN, "float16")
    in_dtypes = [dt] + [_float_or_int(g, 0.1) for _ in range(g.randint(0, 1))]
    ins = [g.array("a", (M, N), d) for d in in_dtypes]
    persistent = g.chance(0.25)
    band = "pid_m" if along == "cols" else "pid_n"
    if persistent:
        count = f"ws.cdiv({ins[0]}.shape[{0 if along == 'cols' else 1}], " \
                f"{'BM' if along == 'cols' else 'BN'})"
        g.emit(f"for {band} in range(ws.program_id(0), {count}, ws.num_programs(0)):")
        g.indent += 1
    else:
        g.emit(f"{band} = ws.program_id(0)")
    origin = "r0 = pid_m * BM" if along == "cols" else "c0 = pid_n * BN"
    g.emit(origin)
    # loads before the loop: k-independent
    if along == "cols":
        if g.chance(0.35):
            rv = g.array("r", (M, 1), g.pick(("float32", "float64")))
            g.loadables.append(Loadable(g, rv, "(r0, 0)", (BM, 1)))
        if g.chance(0.3):
            first = g.array("f", (M, BN), g.pick(FLOAT_DTYPES))
            g.loadables.append(Loadable(g, first, "(r0, 0)", (BM, BN)))
    else:
        if g.chance(0.35):
            cv = g.array("c", (1, N), g.pick(FLOAT_DTYPES))
            g.loadables.append(Loadable(g, cv, "(0, c0)", (1, BN)))
    pre = [ld.make() for ld in g.loadables if g.chance(0.7)]
    # accumulators
    acc_dt = "float32" if dt in FLOAT_DTYPES and g.chance(0.6) else dt
    vshape = (BM, 1) if along == "cols" else (1, BN)
    axis = 1 if along == "cols" else 0
    accs = []
    for kind in g.rng.permutation(["tile", "vec", "store"])[:g.randint(1, 3)]:
        accs.append(str(kind))
    if "tile" in accs:
        init = g.pick(("zeros", "full"))
        if init == "zeros":
            g.emit(f"acc = ws.zeros((BM, BN), {g.dt(acc_dt)})")
            acc0 = iv.zeros((BM, BN), acc_dt)
        else:
            c = g.literal(acc_dt)
            g.emit(f"acc = ws.full((BM, BN), {c!r}, {g.dt(acc_dt)})")
            acc0 = iv.full((BM, BN), c, acc_dt)
    vec_dt = "float32" if dt in FLOAT_DTYPES else dt
    vec_op = g.pick(("sum", "max")) if vec_dt in FLOAT_DTYPES else "sum"
    if "vec" in accs:
        if vec_op == "max":
            g.emit(f"vacc = ws.full({g.shape_src(vshape)}, -math.inf, {g.dt(vec_dt)})")
            vacc0 = iv.full(vshape, -math.inf, vec_dt)
        else:
            g.emit(f"vacc = ws.zeros({g.shape_src(vshape)}, {g.dt(vec_dt)})")
            vacc0 = iv.zeros(vshape, vec_dt)
    store_out = None
    if "store" in accs:
        store_out = g.array("out", (M, N), _float_or_int(g, 0.1), "out")
    g.emit(f"for k in range(ws.cdiv({ins[0]}.shape[{1 if along == 'cols' else 0}], "
           f"{'BN' if along == 'cols' else 'BM'})):")
    g.indent += 1
    outer_loadables = g.loadables
    g.loadables = [ld for ld in outer_loadables if ld.node is not None]
    for a in ins:
        s = _shift(g, 0.15)
        offs = (f"({_off('r0', s[0])}, {_off('k * BN', s[1])})" if along == "cols"
                else f"({_off('k * BM', s[0])}, {_off('c0', s[1])})")
        g.loadables.append(Loadable(g, a, offs, (BM, BN)))
    env_before = dict(g.env)
    t = g.bind(g.fit(g.compute((BM, BN), dt if acc_dt in INT_DTYPES else
                               g.pick((dt, acc_dt)) if dt in FLOAT_DTYPES else dt), 8.0))
    if "tile" in accs:
        tv = g.cast(t, acc_dt)
        form = g.pick(("add", "max", "decay")) if acc_dt in FLOAT_DTYPES else "add"
        val = acc0
        for _ in range(nk):
            val = {"add": lambda v: iv.add(v, tv.val), "max": lambda v: iv.maximum(v, tv.val),
                   "decay": lambda v: iv.add(iv.mul(v, 0.5), tv.val)}[form](val)
        if val.mag > LIMIT * 16 or (acc_dt in INT_DTYPES and val.mag > IMAX):
            form = "max" if acc_dt in FLOAT_DTYPES else "add"
            if acc_dt in INT_DTYPES:
                raise Retry("int accumulator")
            val = iv.maximum(acc0, tv.val)
        g.emit({"add": f"acc = acc + {tv.src}", "max": f"acc = ws.maximum(acc, {tv.src})",
                "decay": f"acc = acc * 0.5 + {tv.src}"}[form])
        accv = val
    if "vec" in accs:
        src_t = g.cast(t, vec_dt) if vec_dt != t.dtype else t
        rv = (iv.reduce_sum if vec_op == "sum" else iv.reduce_max)(src_t.val, axis)
        val = vacc0
        for _ in range(nk):
            val = iv.add(val, rv) if vec_op == "sum" else iv.maximum(val, rv)
        if vec_op == "sum":
            g.emit(f"vacc = vacc + {g.red('sum', src_t.src, axis)}")
        else:
            g.emit(f"vacc = ws.maximum(vacc, {g.red('max', src_t.src, axis)})")
        vaccv = val
    if store_out:
        e = g.ex((BM, BN), dt, 2)
        offs = "(r0, k * BN)" if along == "cols" else "(k * BM, c0)"
        g.store(store_out, offs, e)
    g.indent -= 1
    g.env = {k: v for k, v in env_before.items() if any(p is v for p in pre)}
    g.loadables = [ld for ld in outer_loadables if ld.node is not None]
    # after the loop: a residual load, then the epilogue
    if along == "cols" and g.chance(0.35):
        res = g.array("res", (M, BN), g.pick(FLOAT_DTYPES))
        g.loadables.append(Loadable(g, res, "(r0, 0)", (BM, BN)))
    if "tile" in accs:
        g.env["acc"] = Node("acc", accv)
    if "vec" in accs:
        g.env["vacc"] = Node("vacc", vaccv)
    if "tile" in accs:
        out = g.array("out", (M, BN) if along == "cols" else (BM, N), _float_or_int(g, 0.1),
                      "out")
        e = g.using(g.ex((BM, BN), acc_dt, g.randint(0, 2)), g.env["acc"])
        g.store(out, "(r0, 0)" if along == "cols" else "(0, c0)", e)
    if "vec" in accs:
        out = g.array("out", (M, 1) if along == "cols" else (1, N), "float32", "out")
        e = Node("vacc", vaccv)
        if g.chance(0.5) and vec_dt in FLOAT_DTYPES:
            e = g.fit(Node(f"(vacc * {g.literal(vec_dt)!r})", iv.mul(vaccv, 0.5)))
        g.store(out, "(r0, 0)" if along == "cols" else "(0, c0)", e)
    g.options.update(_options(g, G))
    loop_bytes = sum(_tile_bytes((BM, BN), d) for d in in_dtypes)
    _fit_buffers(g, g.options, loop_bytes, 2 * _tile_bytes((BM, BN), "float32"), cc)
    if persistent:
        return (g.randint(1, max(1, nb_tiles)),)
    return (nb_tiles,)


def family_vec(g, cc):
    dt = _float_or_int(g, 0.25)
    BLK = _pow2(g.rng, 32, 1024)
    g.constexprs.update(B=BLK)
    P = g.randint(1, 4)
    n = _ragged(g, P, BLK, "float16")
    ins = [g.array("a", (n,), d) for d in [dt] + [_float_or_int(g) for _ in
                                                   range(g.randint(0, 2))]]
    out = g.array("out", (n,), dt if g.chance(0.7) else _float_or_int(g), "out")
    sums = g.array("out", (P,), "float32" if dt in FLOAT_DTYPES else dt, "out") \
        if g.chance(0.5) else None
    persistent = g.chance(0.3)
    if persistent:
        acc_dt = "float32" if dt in FLOAT_DTYPES else dt
        if sums:
            g.emit(f"acc = ws.zeros((1,), {g.dt(acc_dt)})")
        g.emit(f"for t in range(ws.program_id(0), ws.cdiv({out}.shape[0], B), "
               "ws.num_programs(0)):")
        g.indent += 1
        g.emit("off = t * B")
    else:
        g.emit("off = ws.program_id(0) * B")
    for a in ins:
        s = g.pick((0, 0, 0, 1, -3))
        g.loadables.append(Loadable(g, a, f"({_off('off', s)},)", (BLK,)))
    e = g.compute((BLK,), dt)
    g.store(out, "(off,)", e)
    if sums:
        t = g.fit(g.ex((BLK,), dt, 2), 8.0)
        if t.dtype in INT_DTYPES and t.val.mag * BLK > IMAX * 8:
            t = g.cast(g.fit(g.ex((BLK,), "float32", 1), 8.0), dt)
        red = g.red("sum", t.src, 0)
        if persistent:
            acc_dt = "float32" if dt in FLOAT_DTYPES else dt
            tt = g.cast(Node(red, iv.reduce_sum(t.val, 0)), acc_dt)
            g.emit(f"acc = acc + {tt.src}")
            g.indent -= 1
            g.store(sums, "(ws.program_id(0),)", Node("acc", tt.val))
        else:
            g.store(sums, "(ws.program_id(0),)", Node(red, iv.reduce_sum(t.val, 0)))
    elif persistent:
        g.indent -= 1
    g.options.update(_options(g))
    grid = (P,) if not persistent else (g.randint(1, P),)
    if sums and persistent:
        grid = (min(grid[0], P),)
    return grid


