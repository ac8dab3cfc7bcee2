"""A fuzzing run: programs generated and checked in a pool until the time budget ends,
failures minimized, counts printed and written as JSON.

:func:`run` keeps ``jobs`` workers (:class:`~numba_ws.fuzz.pool.Pool`) fed with programs
of seeds ``seed, seed + 1, ...`` (each program's inputs come from its own seed, so
``--seed SEED`` reproduces it). New programs stop at the end of the budget -- earlier,
by ``reserve`` seconds, once a failure needs minimizing; programs still running then are
counted as ``unfinished``. Failures (every outcome but ``match`` / ``compiled`` /
``unsupported`` / ``resource``) are minimized in the time left, one distinct failure
signature after another, with the same device as the predicate (a batch of candidates
per round, one per worker).

:func:`detect_features` says which optional ops of :data:`generator.OPTIONAL` this
checkout has: each probe kernel must exist in ``numba_ws``, run in the interpreter and
compile for sm_90a with ``inspect_ptx`` (other engineers add ops while this runs).
"""
import collections
import importlib.util
import json
import pathlib
import shlex
import statistics
import sys
import tempfile
import time

import numpy as np

from . import generator, tags
from .devices import Interp, run_program, signature
from .pool import Pool

#: outcomes that are not findings
PASSING = ("match", "compiled")
DOCUMENTED = ("unsupported", "resource")

_PROBE_BODY = {
    "sqrt": "ws.sqrt(t * t + 1.0)", "rsqrt": "ws.rsqrt(t * t + 1.0)", "abs": "ws.abs(t)",
    "minimum": "ws.minimum(t, 0.5)", "sigmoid": "ws.sigmoid(t)", "tanh": "ws.tanh(t)",
    "gelu": "ws.gelu(t)", "fma": "ws.fma(t, t, t)", "where": "ws.where(t > 0.0, t, -t)",
    "min": "t - ws.min(t, 0)", "argmax": "t + ws.argmax(t, 0).astype(ws.float32)",
    "masks": "ws.where(ws.arange(0, 64)[:, None] < 9, t, 0.0), mask=ws.arange(0, 64)[None, :] < 5",
}


def _probe_source(feature):
    if feature in _PROBE_BODY:
        return ("import numba_ws as ws\n\n\ndef probe(x, y):\n"
                "    t = ws.load(x, (0, 0), (64, 64))\n"
                f"    ws.store(y, (0, 0), {_PROBE_BODY[feature]})\n"), "float32", (64, 64)
    if feature == "int_maximum":
        return ("import numba_ws as ws\n\n\ndef probe(x, y):\n"
                "    t = ws.load(x, (0, 0), (64, 64))\n"
                "    ws.store(y, (0, 0), ws.maximum(t, t * 2))\n"), "int32", (64, 64)
    if feature == "odd_pitch":
        return ("import numba_ws as ws\n\n\ndef probe(x, y):\n"
                "    ws.store(y, (0, 0), ws.load(x, (0, 0), (64, 8)) * 2.0)\n"), "float16", (64, 7)
    return None


def detect_features(folder):
    """The optional features (generator.OPTIONAL) this checkout has, as a tuple."""
    import numba_ws as ws
    found = []
    for feature in generator.OPTIONAL:
        name = {"int_maximum": "maximum", "masks": "arange"}.get(feature, feature)
        if feature != "odd_pitch" and not hasattr(ws, name):
            continue
        src, dt, shape = _probe_source(feature)
        path = pathlib.Path(folder) / f"probe_{feature}.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location(f"probe_{feature}", path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
            x = np.ones(shape, getattr(ws, dt).dtype)
            y = np.zeros(shape, getattr(ws, dt).dtype)
            ws.jit(module.probe)[(1,)](x, y)
            ws.jit(module.probe).inspect_ptx(x, y, num_consumer_groups=1)
        except Exception:
            continue
        found.append(feature)
    return tuple(found)


def _counts(results, generated, unfinished):
    by = collections.Counter(r["outcome"] for r in results)
    compiled = by["match"] + by["mismatch"] + by["compiled"] + sum(
        1 for r in results if r["outcome"] == "crash" and r.get("fatal"))
    ran = by["match"] + by["mismatch"] + sum(
        1 for r in results if r["outcome"] == "crash" and r.get("fatal"))
    return {"generated": generated, "finished": len(results), "compiled": compiled,
            "ran": ran, "matched": by["match"], "mismatched": by["mismatch"],
            "crashed": by["crash"] + by["timeout"], "timeouts": by["timeout"],
            "compile_errors": by["compile_error"], "launch_errors": by["launch_error"],
            "unsupported": by["unsupported"],
            "resource": by["resource"], "sim_findings": by["sim_finding"],
            "generator_errors": by["interp_error"] + by["analysis_error"],
            "unfinished": unfinished}


class Run:
    """State of one fuzzing run (see the module doc); :meth:`main` does it all."""

    def __init__(self, opts, out=None):
        self.opts, self.out = opts, out
        self.work = pathlib.Path(opts.work_dir or tempfile.mkdtemp(prefix="numba_ws_fuzz_"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.results, self.failures, self.programs = [], [], {}
        self.start = time.monotonic()
        self.deadline = self.start + opts.budget
        self.next_id = 0

    def say(self, text):
        print(text, file=self.out or sys.stdout, flush=True)

    def elapsed(self):
        return time.monotonic() - self.start

    def task(self, program):
        self.next_id += 1
        return {"id": self.next_id, "program": program.to_dict()}

    def features(self):
        f = self.opts.features
        if f == "auto":
            return detect_features(self.work)
        return tuple(x for x in f.split(",") if x) if f not in ("", "none") else ()

    def generate_phase(self, pool, features):
        seed = self.opts.seed
        reserve = min(0.25 * self.opts.budget, 90.0) if self.opts.minimize else 0.0
        limit = self.opts.max_programs
        last_note, generated = 0.0, 0
        while True:
            stop_at = self.deadline - (reserve if self.failures else 0.0)
            now = time.monotonic()
            if now < stop_at and (limit is None or generated < limit):
                while pool.busy < 2 * self.opts.jobs and (limit is None or generated < limit):
                    program = generator.generate(seed, features)
                    self.programs[seed] = program
                    pool.submit(self.task(program))
                    seed, generated = seed + 1, generated + 1
            elif pool.busy == 0:
                break
            elif now >= stop_at:
                dropped = pool.abandon()
                return generated, len(dropped)
            for task, result in pool.poll(0.5):
                self.record(task, result)
            if self.elapsed() - last_note >= 20:
                last_note = self.elapsed()
                c = _counts(self.results, generated, 0)
                self.say(f"  [{last_note:5.0f} s] {c['finished']} programs done: "
                         f"{c['compiled']} compiled, {c['matched']} matched, "
                         f"{c['mismatched']} mismatched, "
                         f"{c['crashed']} crashed, {c['compile_errors']} compile errors")
        return generated, 0

    def record(self, task, result):
        """Keep a program's result and print its line (a mismatch: with the program)."""
        prog = task["program"]
        program = self.programs.get(prog["seed"])
        result = {"family": prog["family"], "cc": prog["cc"], "options": prog["options"],
                  **result, "seed": prog["seed"],
                  "tags": tags.tags(program) if program is not None else []}
        self.results.append(result)
        kind = result["outcome"]
        line = f"seed {result['seed']} {result['family']} cc {result['cc']}: {kind}"
        if kind not in PASSING + DOCUMENTED:
            self.failures.append(result)
            self.say(f"  FAIL {line}: {result.get('message', '')[:400]}")
            if kind == "mismatch" and program is not None:
                self.say("\n".join("    " + ln for ln in _program_text(
                    program.to_dict()).splitlines()))
        elif self.opts.verbose or kind in DOCUMENTED:
            self.say(f"  {line}" + (f": {result.get('message', '')[:200]}"
                                    if kind in DOCUMENTED else ""))

    def still_fails(self, pool, want):
        """Predicate for the minimizer: run the candidates in the pool in parallel."""
        def check(programs):
            tasks = [self.task(p) for p in programs]
            for t in tasks:
                pool.submit(t)
            got = {}
            while len(got) < len(tasks):
                if time.monotonic() > self.deadline + 5:
                    pool.abandon()
                    break
                for t, r in pool.poll(0.5):
                    got[t["id"]] = r
            return [t["id"] in got and signature(got[t["id"]]) == want for t in tasks]
        return check

    def minimize_phase(self, pool):
        from .minimize import minimize
        folder = self.work / "kernels"
        interp = Interp()

        def valid(p):
            return run_program(p, interp, folder)["outcome"] == "match"
        seen = set()
        for failure in self.failures:
            if time.monotonic() > self.deadline - 5 or len(seen) >= self.opts.max_minimize:
                break
            want = signature(failure)
            if want in seen or failure["outcome"] in ("interp_error", "analysis_error"):
                continue
            seen.add(want)
            program = self.programs[failure["seed"]]
            small, stats = minimize(program, self.still_fails(pool, want), valid=valid,
                                    deadline=self.deadline - 5, batch=self.opts.jobs)
            failure["minimized"] = small.to_dict()
            failure["minimize_stats"] = stats
            self.say(f"  minimized seed {failure['seed']} ({want[:60]}): size "
                     f"{stats['size_before']} -> {stats['size_after']} in {stats['tests']} "
                     f"runs, {stats['seconds']} s")

    def main(self):
        opts = self.opts
        features = self.features()
        self.say(f"fuzz_gpu: device {opts.device}, seed {opts.seed}, {opts.jobs} jobs, budget "
                 f"{opts.budget:.0f} s, timeout {opts.timeout:.0f} s per program, work dir "
                 f"{self.work}")
        self.say(f"  features: {', '.join(features) or 'none'}")
        pool = Pool(opts.jobs, opts.device, opts.timeout, self.work)
        try:
            generated, unfinished = self.generate_phase(pool, features)
            if opts.minimize and self.failures:
                self.minimize_phase(pool)
        finally:
            info = pool.info
            restarts = pool.restarts
            pool.close()
        counts = _counts(self.results, generated, unfinished)
        summary = {"command": " ".join(sys.argv), "device": opts.device, "device_info": info,
                   "seed": opts.seed, "jobs": opts.jobs, "budget_s": opts.budget,
                   "timeout_s": opts.timeout, "features": list(features),
                   "time_s": round(self.elapsed(), 1), "worker_restarts": restarts,
                   "counts": counts, "times": _times(self.results),
                   "by_family": _by(self.results, "family"),
                   "by_feature": tags.table(self.results),
                   "documented": _documented(self.results),
                   "failures": [_failure_entry(f, self.programs) for f in self.failures],
                   "programs": [_program_entry(r) for r in self.results]}
        self.print_summary(summary)
        if opts.json:
            pathlib.Path(opts.json).parent.mkdir(parents=True, exist_ok=True)
            with open(opts.json, "w") as f:
                json.dump(summary, f, indent=1, default=str)
            self.say(f"results: {opts.json}")
        return summary

    def print_summary(self, s):
        c = s["counts"]
        self.say(f"programs: generated {c['generated']}, compiled {c['compiled']}, ran "
                 f"{c['ran']}, matched {c['matched']}, mismatched {c['mismatched']}, crashed "
                 f"{c['crashed']} ({c['timeouts']} timeouts), compile errors "
                 f"{c['compile_errors']}, launch errors {c['launch_errors']}, unsupported "
                 f"(documented) {c['unsupported']}, "
                 f"resource {c['resource']}, sim findings {c['sim_findings']}, generator "
                 f"errors {c['generator_errors']}, unfinished {c['unfinished']}")
        self.say("by feature (a program counts under every feature it uses):\n"
                 + tags.format_table(s["by_feature"]))
        for d in s["documented"]:
            self.say(f"unsupported on the GPU ({d['count']}): {d['message']}\n"
                     f"  seeds {', '.join(map(str, d['seeds'][:12]))}; features "
                     f"{', '.join(d['features'])}")
        t = s["times"]
        self.say(f"time: {s['time_s']} s; per program (median) compile {t['compile_s']} s, "
                 f"run {t['run_s']} s, reference {t['reference_s']} s; device "
                 f"{(s['device_info'] or {}).get('device')}")
        groups = collections.OrderedDict()
        for f in s["failures"]:
            groups.setdefault(f["signature"], []).append(f)
        for sig, fs in groups.items():
            f = next((x for x in fs if x.get("minimized")), fs[0])
            others = [x["seed"] for x in fs if x is not f]
            self.say(f"FAILURE seed {f['seed']} ({f['family']}, cc {f['cc']}, "
                     f"{f['options']}): {f['outcome']}: {f['message']}")
            if others:
                self.say(f"  the same failure: {len(others)} more program(s), seeds "
                         f"{', '.join(map(str, others[:12]))}{' ...' if len(others) > 12 else ''}")
            self.say(f"  reproduce: python3 scripts/fuzz_gpu.py --seed {f['seed']} "
                     f"--device {shlex.quote(s['device'])} "
                     f"--features {','.join(s['features']) or 'none'}")
            m = f.get("minimized")
            if not m and f.get("program"):
                self.say("\n".join("    " + line for line in
                                   _program_text(f["program"]).splitlines()))
            if m:
                st = f.get("minimize_stats") or {}
                self.say(f"  minimized ({st.get('tests')} runs, {st.get('seconds')} s):\n"
                         + "\n".join("    " + line for line in _program_text(m).splitlines()))


def _documented(results):
    """The documented "not on the GPU yet" / resource messages: count, seeds and the op
    features those programs have in common."""
    groups = collections.OrderedDict()
    for r in results:
        if r["outcome"] in DOCUMENTED:
            groups.setdefault(r.get("message", "")[:160], []).append(r)
    out = []
    for msg, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        common = set.intersection(*(set(t for t in r.get("tags", ()) if ":" in t
                                        and not t.startswith(("cfg:buffers", "family:")))
                                    for r in rs))
        out.append({"message": msg, "count": len(rs), "seeds": [r["seed"] for r in rs],
                    "features": sorted(common)})
    return out


def _times(results):
    def med(key):
        xs = [r[key] for r in results if isinstance(r.get(key), (int, float))]
        return round(statistics.median(xs), 3) if xs else None
    return {"compile_s": med("compile_s"), "run_s": med("run_s"),
            "reference_s": med("reference_s")}


def _by(results, key):
    out = collections.defaultdict(collections.Counter)
    for r in results:
        out[r.get(key, "?")][r["outcome"]] += 1
    return {k: dict(v) for k, v in out.items()}


def _program_text(d):
    from .program import Program
    p = Program.from_dict(d)
    return p.describe() + "\n" + p.source


def _failure_entry(f, programs):
    p = programs.get(f["seed"])
    entry = {k: f.get(k) for k in ("seed", "outcome", "message", "family", "cc", "options",
                                   "compare", "warnings", "log_tail", "traceback",
                                   "minimize_stats")}
    entry["signature"] = signature(f)
    entry["program"] = p.to_dict() if p is not None else None
    entry["minimized"] = f.get("minimized")
    return entry


def _program_entry(r):
    worst = max((o.get("bound_rel", 0.0) for o in r.get("compare", [])), default=None)
    return {"seed": r["seed"], "family": r.get("family"), "cc": r.get("cc"),
            "options": r.get("options"), "outcome": r["outcome"],
            "compile_s": r.get("compile_s"), "run_s": r.get("run_s"),
            "max_bound_rel": worst,
            "exact_outputs": sum(bool(o.get("exact")) for o in r.get("compare", [])),
            "outputs": len(r.get("compare", []))}
