#!/usr/bin/env python3
"""compute-sanitizer over one small launch of every kernel family (issue 19 item 2).

    python3 scripts/sanitize.py [--tools memcheck,racecheck,synccheck,initcheck]
        [--families NAME,...] [--skip NAME,...] [--jobs N] [--timeout S] [--out DIR]
        [--json FILE] [--sanitizer PATH] [--list]
    python3 scripts/sanitize.py --run FAMILY     # one family's launch (what each run runs)

Each family (:data:`FAMILIES`) is one small launch whose outputs are checked against a
float64 reference (NaN-poisoned outputs first), so a run that computes garbage fails too.
First every family runs once without the sanitizer (the "plain" column: it compiles into
one fresh NUMBA_WS_HOME, so the sanitized runs load from the on-disk cache and do not
compile again), then one process per (tool, family)::

    compute-sanitizer --tool TOOL --report-api-errors no python3 scripts/sanitize.py --run FAMILY

``--jobs`` processes at a time (default: the number of CPUs), so one failing or
crashing run does not poison another. The table gives per tool and family the errors of
compute-sanitizer's ``ERROR SUMMARY`` (racecheck: its hazards, errors + warnings, as
``errors/warnings`` when there are warnings), ``T/O`` for a run past ``--timeout``,
``rc=N`` for a run that exited non-zero without a summary (a crash or a wrong result:
its log says which), ``-`` where the plain run already failed, ``n/a`` for a family whose
kernels do not exist in this checkout. Exit status 0 only if every cell is 0 (n/a
aside). Logs: ``OUT/<tool>-<family>.log``. API errors are not reported
(``--report-api-errors no``: the host side's benign ``cuGetProcAddress`` probes).

About 70 processes; on the H200 with 16 cores the whole run should take 2 to 5 minutes
(the racecheck runs of the GEMMs dominate).
"""
import argparse
import importlib
import concurrent.futures as cf
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")


# -- the families (run inside one process each) -------------------------------------------

def _paths():
    for p in (os.path.join(TESTS, "gpu"), TESTS, ROOT):
        if p not in sys.path:
            sys.path.insert(0, p)


def _close(out, ref, tol, what):
    import numpy as np
    out = np.asarray(out, dtype=np.float64)
    nan = int(np.isnan(out).sum())
    assert nan == 0, f"{what}: {nan} outputs never written (NaN)"
    err = float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30))
    assert err <= tol, f"{what}: max relative error {err:.3e} > {tol}"
    return f"{what}: max rel. error {err:.1e}"


def _gemm(M, N, K, kernel="matmul", grid=None, cc=None, dtype="float16", **meta):
    """One GEMM launch (tests/kernels.py ``kernel``) on random ``dtype`` inputs (float16,
    or float32: tf32 dots), c in the same dtype."""
    import cupy as cp
    import numpy as np
    import numba_ws as ws
    from numba_ws import knobs
    import kernels
    rng = np.random.default_rng(0)
    a = cp.asarray(rng.uniform(-1, 1, (M, K)).astype(dtype))
    b = cp.asarray(rng.uniform(-1, 1, (K, N)).astype(dtype))
    c = cp.full((M, N), cp.nan, dtype)
    if grid is None:
        grid = (ws.cdiv(M, meta["BM"]) * ws.cdiv(N, meta["BN"]),)
    with knobs.scope(NUMBA_WS_CC=cc):
        ws.jit(getattr(kernels, kernel))[grid](a, b, c, **meta)
    cp.cuda.runtime.deviceSynchronize()
    ref = cp.asnumpy(a).astype(np.float64) @ cp.asnumpy(b).astype(np.float64)
    return _close(cp.asnumpy(c), ref, 1e-2, f"{kernel} {M}x{N}x{K} {meta}")


def _attention(heads=1, seq=256, D=64, cc=None, **meta):
    import cupy as cp
    import numpy as np
    import numba_ws as ws
    from numba_ws import knobs
    import kernels
    rng = np.random.default_rng(0)
    host = [rng.uniform(-2, 2, (heads * seq, D)).astype(np.float16) for _ in range(3)]
    q, k, v = (cp.asarray(x) for x in host)
    o = cp.full((heads * seq, D), cp.nan, cp.float16)
    BM = meta.setdefault("BM", 128)
    meta.setdefault("BN", 64)
    with knobs.scope(NUMBA_WS_CC=cc):
        ws.jit(kernels.attention_fwd)[(seq // BM, heads)](q, k, v, o, seq, 0.125, D=D, **meta)
    cp.cuda.runtime.deviceSynchronize()
    q64, k64, v64 = (x.astype(np.float64).reshape(heads, seq, D) for x in host)
    s = np.einsum("hqd,hkd->hqk", q64, k64) * 0.125
    p = np.exp(s - s.max(axis=2, keepdims=True))
    ref = np.einsum("hqk,hkd->hqd", p / p.sum(axis=2, keepdims=True), v64)
    return _close(cp.asnumpy(o), ref.reshape(heads * seq, D), 2e-2,
                  f"attention h{heads} s{seq} d{D}")


def _case(module, name, cc=None):
    """One case of tests/kernels_tiles.py or tests/kernels_masks.py (float dtypes only:
    CuPy arrays; every output poisoned, with guard rows, checked by its ``Out``),
    compiled for ``cc`` (NUMBA_WS_CC) when given."""
    import cupy as cp
    import numpy as np
    import numba_ws as ws
    from numba_ws import knobs
    import kernels_tiles as kt
    case = __import__(module).CASES[name]
    args, grid = case.make(np.random.default_rng(0))
    launch, outs = [], []
    for a in args:
        if isinstance(a, kt.Out):
            base = cp.asarray(a.host()[0])
            outs.append((a, base))
            a = base[:a.shape[0]]
        elif isinstance(a, np.ndarray):
            a = cp.asarray(a)
        launch.append(a)
    with knobs.scope(NUMBA_WS_CC=cc):
        ws.jit(case.kernel)[grid](*launch, **case.meta)
    cp.cuda.runtime.deviceSynchronize()
    for i, (out, base) in enumerate(outs):
        out.check(cp.asnumpy(base), f"{name} output {i}")
    return f"{name}: {len(outs)} output(s) checked"


def _cluster():
    """The hand-written 2-CTA-cluster GEMM (tests/gpu/test_hand_gemm_cluster.py)."""
    import test_hand_gemm_cluster as hc
    ok, msg = hc.check(384, 512, 64, multicast=True)
    assert ok, msg
    return msg


def _masks_exist():
    try:
        _paths()
        importlib.import_module("kernels_masks")   # its CASES are the masked families
        import numba_ws as ws
        import inspect
        return "mask" in inspect.signature(ws.load).parameters
    except Exception:
        return False


#: family -> (launch, available?)
FAMILIES = {
    "gemm": (lambda: _gemm(256, 512, 192, BM=128, BN=256, BK=64), None),
    # ragged M and N, 16-byte row pitch: the default (tma_store=3) stages the store and
    # TMA clips the edge tiles
    "gemm_staged_ragged": (lambda: _gemm(200, 320, 192, BM=128, BN=256, BK=64), None),
    "gemm_cp_async": (lambda: _gemm(130, 300, 200, BM=128, BN=256, BK=64), None),
    # N = 301: b's rows are 602 bytes (2-byte aligned): a by cp.async, b by ld.global
    "gemm_ld_global": (lambda: _gemm(130, 301, 200, BM=128, BN=256, BK=64), None),
    "gemm_persistent": (lambda: _gemm(384, 512, 128, "matmul_persistent", grid=(2,),
                                      BM=128, BN=256, BK=64, GROUP_M=2), None),
    "gemm_ping_pong": (lambda: _gemm(384, 256, 128, "matmul_persistent", grid=(2,),
                                     BM=128, BN=128, BK=64, GROUP_M=2, ping_pong=1), None),
    "gemm_cluster": (_cluster, None),
    # a dot's B through the per-group operand buffer, rewritten every K step: a masked B
    # (register tile) and a row-major float32 B (copied K-major from its slot, tf32)
    "gemm_masked_b": (lambda: _case("kernels_masks", "gemm_masked_ab-float16-100"),
                      _masks_exist),
    "gemm_tf32_staged_b": (lambda: _gemm(200, 256, 192, dtype="float32", BM=128, BN=128,
                                         BK=32), None),
    # the same with one buffer for both groups (named barrier 6 around the copy)
    "gemm_tf32_shared_b": (lambda: _gemm(200, 256, 192, dtype="float32", BM=128, BN=128,
                                         BK=32, shared_operand_buffer=1), None),
    "attention": (lambda: _attention(), None),
    # families from here on reuse slots (loops longer than the ring): a release that
    # came too early would show as a race
    "attention_causal": (lambda: _case("kernels_masks", "causal_attention-h2-s256-d64-128x64"),
                         _masks_exist),
    "attention_causal_diag": (lambda: _case("kernels_masks",
                                            "causal_attention_diag-h2-s256-d64-128x64"),
                              _masks_exist),
    "row_reduce_loop": (lambda: _case("kernels_tiles", "row_sums-float32-N200"), None),
    "persistent_bands": (lambda: _case("kernels_tiles", "persistent_bands-float32"), None),
    "sm80_row_reduce_loop": (lambda: _case("kernels_tiles", "row_sums-float32-N200", "8.0"),
                             None),
    "copy": (lambda: _case("kernels_tiles", "copy2d-float32"), None),
    "softmax": (lambda: _case("kernels_tiles", "softmax-float32"), None),
    "layernorm": (lambda: _case("kernels_tiles", "layernorm_fwd-float16"), None),
    "masked": (lambda: _case("kernels_masks", "softmax_masked-float32-N100"), _masks_exist),
    "sm80_gemm": (lambda: _gemm(256, 256, 128, cc="8.0", BM=128, BN=128, BK=64), None),
    "sm80_attention": (lambda: _attention(cc="8.0"), None),
}


def run_family(name):
    _paths()
    print(f"{name}: {FAMILIES[name][0]()}", flush=True)


# -- the driver --------------------------------------------------------------------------

_ERRORS = re.compile(r"ERROR SUMMARY: (\d+) error")
_HAZARDS = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, "
                      r"(\d+) warnings?\)")


def _one(cmd, log, timeout, env):
    """(return code or 'T/O', seconds, log text) of one process."""
    start = time.time()
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "T/O"
    with open(log, errors="replace") as f:
        return rc, time.time() - start, f.read()


def cell(tool, rc, text):
    """(table text, failed?) of one sanitized run from its log."""
    if rc == "T/O":
        return "T/O", True
    errors = _ERRORS.findall(text)
    hazards = _HAZARDS.findall(text) if tool == "racecheck" else []
    if not errors and hazards:      # racecheck prints its RACECHECK SUMMARY only
        errors = [h[1] for h in hazards]
    if not errors:
        return f"rc={rc}", True
    n = sum(int(e) for e in errors)
    warnings = sum(int(h[2]) for h in hazards)
    text = (f"{n}/{warnings}w" if warnings else str(n)) + (f" rc={rc}" if rc else "")
    return text, n > 0 or warnings > 0 or rc != 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", help=argparse.SUPPRESS)
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--skip", default="")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--sanitizer", default=None)
    ap.add_argument("--list", action="store_true")
    opt = ap.parse_args(argv)
    if opt.run:
        run_family(opt.run)
        return 0
    tools = [t for t in opt.tools.split(",") if t]
    skip = set(opt.skip.split(","))
    families = [f for f in opt.families.split(",") if f and f not in skip]
    unknown = [f for f in families if f not in FAMILIES] + [t for t in tools if t not in TOOLS]
    if unknown:
        ap.error(f"unknown families/tools {unknown}; families: {list(FAMILIES)}, tools: "
                 f"{list(TOOLS)}")
    if opt.list:
        print("\n".join(families))
        return 0
    sanitizer = opt.sanitizer or shutil.which("compute-sanitizer") or next(
        (p for p in ("/usr/local/cuda/bin/compute-sanitizer",) if os.path.exists(p)), None)
    if sanitizer is None:
        print("sanitize: compute-sanitizer not found (PATH, /usr/local/cuda/bin; or "
              "--sanitizer PATH)", file=sys.stderr)
        return 2
    out = opt.out or tempfile.mkdtemp(prefix="ws_sanitize_")
    os.makedirs(out, exist_ok=True)
    env = {**os.environ, "NUMBA_WS_HOME": os.path.join(out, "home"),
           "NUMBA_WS_ALWAYS_COMPILE": "0", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    for k in ("NUMBA_WS_CC", "NUMBA_WS_INTERPRET", "NUMBA_WS_DISABLE",
              "NUMBA_WS_DEBUG_BARRIERS", "NUMBA_WS_DEBUG_DROP_RELEASE"):
        env.pop(k, None)
    version = subprocess.run([sanitizer, "--version"], capture_output=True, text=True).stdout
    version = (re.findall(r"Version \S+", version) or ["?"])[-1]
    start = time.time()
    me = [sys.executable, os.path.abspath(__file__), "--run"]
    absent = [f for f in families if FAMILIES[f][1] is not None and not FAMILIES[f][1]()]
    present = [f for f in families if f not in absent]
    plain = {}
    with cf.ThreadPoolExecutor(max(1, opt.jobs)) as pool:
        futs = {pool.submit(_one, me + [f], os.path.join(out, f"plain-{f}.log"), opt.timeout,
                            env): f for f in present}
        for fut in cf.as_completed(futs):
            plain[futs[fut]] = fut.result()
    runs = [(t, f) for f in present if plain[f][0] == 0 for t in tools]
    results = {}
    with cf.ThreadPoolExecutor(max(1, opt.jobs)) as pool:
        futs = {pool.submit(_one, [sanitizer, "--tool", t, "--report-api-errors", "no"] + me
                            + [f], os.path.join(out, f"{t}-{f}.log"), opt.timeout, env): (t, f)
                for t, f in runs}
        for fut in cf.as_completed(futs):
            results[futs[fut]] = fut.result()

    failed, table = 0, {}
    width = max(len(f) for f in families) + 2
    print(f"compute-sanitizer {version} --report-api-errors no, {len(runs)} sanitized runs "
          f"+ {len(present)} plain, {time.time() - start:.0f} s, logs in {out}")
    print(f"{'family':<{width}}{'plain':<8}" + "".join(f"{t:<12}" for t in tools))
    for f in families:
        row = {}
        if f in absent:
            row = {t: "n/a" for t in ["plain"] + tools}
        else:
            rc, secs, text = plain[f]
            row["plain"] = "ok" if rc == 0 else ("T/O" if rc == "T/O" else "FAIL")
            failed += rc != 0
            for t in tools:
                if (t, f) not in results:
                    row[t] = "-"
                    continue
                row[t], bad = cell(t, *results[(t, f)][::2])
                failed += bad
        table[f] = row
        errs = sum(int(re.match(r"\d+", v).group()) for v in row.values()
                   if re.match(r"\d+", v))
        print(f"{f:<{width}}{row['plain']:<8}" + "".join(f"{row[t]:<12}" for t in tools)
              + f"errors={errs}")
    for f in families:                        # what went wrong, briefly
        for key in ["plain"] + tools:
            v = table[f][key]
            if v in ("ok", "0", "n/a", "-"):
                continue
            log = os.path.join(out, f"{key}-{f}.log")
            lines = [ln for ln in open(log, errors="replace").read().splitlines()
                     if ln.strip()][-12:]
            print(f"--- {key} {f}: {v} ({log})\n    " + "\n    ".join(lines))
    if absent:
        print(f"n/a: {absent} (tests/kernels_masks.py or ws.load(mask=) missing)")
    print(f"sanitize: {len(runs)} runs, {failed} failed cell(s): "
          f"{'OK' if not failed else 'ERRORS'}")
    if opt.json:
        with open(opt.json, "w") as fh:
            json.dump({"version": version, "tools": tools, "table": table,
                       "seconds": round(time.time() - start, 1), "failed": failed}, fh, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
