#!/usr/bin/env python3
"""Where the host time of one fast launch goes, statement by statement (GPU machine).

    python3 scripts/launch_lines.py

Takes the generated launcher (runtime/fastcode.py) of the trivial kernel of
benchmarks/overhead.py on a CuPy array and times it whole, then with one statement (or
group) replaced by a constant at a time; the difference is that statement's cost. Each
variant: the median of 10 batches of 400 calls, variants alternated over 3 rounds.
Diagnostic only: the variants without the driver call launch nothing.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))


def main():
    import cupy as cp
    from overhead import _per_launch_us, _trivial
    from numba_ws.runtime import fastpath
    bump = _trivial()
    x = cp.zeros(64, cp.float32)
    bound = bump[(1,)]
    bound(x, B=64)
    bound(x, B=64)
    plan = bump._plans[fastpath.signature((1,), (x,), dict(B=64))]
    fast, src = plan.fast, plan.fast.source
    print(src)
    env = fast.__globals__

    def variant(old, new):
        if old not in src:
            return None
        scope = dict(env)
        exec(src.replace(old, new), scope)
        return scope["launch"]
    call_line = next(line for line in src.splitlines()
                     if "err = e[" in line or "err = _bound(" in line)
    pack_line = next((line for line in src.splitlines() if "e[4](" in line), "<no pack line>")
    args, grid, meta = (x,), (1,), dict(B=64)
    cases = {
        "bound launcher (kernel[grid] once)": lambda: bound(x, B=64),
        "kernel[grid](...)": lambda: bump[(1,)](x, B=64),
        "generated launcher, signature checked": lambda: fast(args, grid, meta),
        "generated launcher, unchecked": lambda: fast(args),
    }
    for name, (old, new) in {
            "- knob guard": ("if not _knobs_hold(_KNOBS): return False", "pass"),
            "- stream lookup": ("st = _cupy_stream().ptr", "st = 0"),
            "- entry lookup": ("e = _entries.get(", "e = _E0 or _entries.get("),
            "- pack": (pack_line.strip(), "pass"),
            "- driver call (native: with the pack and knob check)": (call_line.strip(),
                                                                     "err = 0"),
    }.items():
        if name == "- entry lookup":
            env["_E0"] = next(iter(env["_entries"].values()))
        launch = variant(old, new)
        if launch is not None:
            cases[f"generated launcher, signature checked {name}"] = (
                lambda launch=launch: launch(args, grid, meta))
    try:            # CuPy's C-level current stream pointer (what its own launches read)
        from cupy_backends.cuda import stream as backend_stream
        env["_stream_ptr"] = getattr(backend_stream, "get_current_stream_ptr")
        launch = variant("st = _cupy_stream().ptr", "st = _stream_ptr()")
        if launch is not None:
            cases["generated launcher, signature checked, backend stream ptr"] = (
                lambda: launch(args, grid, meta))
            print(f"  stream pointers agree: {backend_stream.get_current_stream_ptr()} "
                  f"{cp.cuda.get_current_stream().ptr}")
            with cp.cuda.Stream() as s:
                print(f"  under a Stream: {backend_stream.get_current_stream_ptr()} "
                      f"{cp.cuda.get_current_stream().ptr} {s.ptr}")
    except (ImportError, AttributeError) as e:
        print(f"  no C-level current stream pointer: {e}")
    sync = cp.cuda.runtime.deviceSynchronize
    _expressions(x, sync)
    out = {name: [] for name in cases}
    for _ in range(3):
        for name, fn in cases.items():
            out[name].append(_per_launch_us(fn, sync))
    whole = float(np.median(out["generated launcher, signature checked"]))
    for name, runs in out.items():
        med = float(np.median(runs))
        delta = f"  (saves {whole - med:5.2f})" if name.startswith(
            "generated launcher, signature checked -") else ""
        print(f"  {name:<58} {med:6.2f} us{delta}  rounds {', '.join(f'{r:.2f}' for r in runs)}")


def _expressions(x, sync):
    """The cost of single reads a launcher makes, alone (no launch)."""
    import timeit
    import cupy as cp
    scope = {"x": x, "cp": cp, "gcs": cp.cuda.get_current_stream, "d": {((64,), (4,), 0): 1},
             "k": ((64,), (4,), 0), "tup": (x,), "m": dict(B=64), "m2": dict(B=64)}
    try:
        from cupy_backends.cuda import stream as backend_stream
        scope["bsp"] = backend_stream.get_current_stream_ptr
    except (ImportError, AttributeError):
        pass
    for expr in ["gcs().ptr", "bsp()", "x.data.ptr", "x.shape", "x.strides", "x.size",
                 "x.dtype", "d.get((x.shape, x.strides, x.data.ptr & 15))", "m != m2",
                 "d.get(k)"]:
        if expr.startswith("bsp") and "bsp" not in scope:
            continue
        n = 200000
        best = min(timeit.repeat(expr, globals=scope, number=n, repeat=5)) / n * 1e9
        print(f"  {expr:<52} {best:7.1f} ns")


if __name__ == "__main__":
    main()
