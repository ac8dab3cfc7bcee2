#!/usr/bin/env python3
"""The one GPU check: named steps, a time budget, one summary table.

    python3 scripts/gpu_check.py [STEP ...] [--budget SECONDS] [--out DIR] [--jobs N]

Run from the repository root on the GPU machine with the numpy 2.4 wheel in ``.whl/``
(numba-cuda 0.30.4 needs numpy < 2.5; README). Steps run in the order given (default:
``tests bench attention``); each has its own time limit, cut to what is left of the
budget, and writes ``OUT/<step>.log``. The last lines printed are the summary: step,
exit code, seconds, and the lines that matter from its log. Exit status 1 when a step
failed, timed out or was skipped for the budget, else 0.

Steps:

- ``tests``: every file of tests/gpu as its own pytest process with two xdist workers
  (``--jobs`` files at a time), so a kernel that leaves the CUDA context unusable (an
  illegal address, a trap) fails its own file only; per file the pass / fail counts.
- ``tests:PATTERN[,PATTERN...]``: only the test files whose name contains a PATTERN.
- ``demo``: ``python -m numba_ws``. ``bench`` / ``bench-full``: benchmarks/gemm.py quick /
  all shapes. ``attention`` / ``attention-full``: benchmarks/attention.py. ``overhead``:
  benchmarks/overhead.py. ``sanitize``: scripts/sanitize.sh (compute-sanitizer over every
  kernel family). ``fuzz``: scripts/fuzz_gpu.py for the rest of the budget (at most 240 s).
  ``profile``: Nsight Compute (``--clock-control none``) of numba_ws and cuBLAS GEMMs;
  ``profile-attention``: of numba_ws and cuDNN attention (B4 H32 S4096, D128 and D256, fp16).
"""
import argparse
import concurrent.futures as cf
import glob
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
STEPS = {   # name -> (time limit s, command); OUT is substituted
    "demo": (120, [PY, "-m", "numba_ws"]),
    "bench": (150, [PY, "benchmarks/gemm.py", "--quick", "--json", "{OUT}/gemm.json"]),
    "bench-full": (420, [PY, "benchmarks/gemm.py", "--json", "{OUT}/gemm.json"]),
    "attention": (180, [PY, "benchmarks/attention.py", "--quick", "--json",
                        "{OUT}/attention.json"]),
    "attention-full": (300, [PY, "benchmarks/attention.py", "--json", "{OUT}/attention.json"]),
    "overhead": (120, [PY, "benchmarks/overhead.py"]),
    "sanitize": (420, ["bash", "scripts/sanitize.sh"]),
    "fuzz": (240, [PY, "scripts/fuzz_gpu.py", "--jobs", "{JOBS}", "--json", "{OUT}/fuzz.json",
                   "--budget", "{BUDGET}"]),
    "profile": (300, ["ncu", "--clock-control", "none", "--section", "SpeedOfLight",
                      "--section", "WarpStateStats", "-k", "regex:matmul|nvjet", "-s", "2",
                      "-c", "2", PY, "benchmarks/profile_compare.py", "ws", "4096", "4096",
                      "4096"]),
    "profile-attention": (300, ["bash", "-c", " ; ".join(
        f"ncu --clock-control none --section SpeedOfLight --section WarpStateStats "
        f"--section ComputeWorkloadAnalysis --section SchedulerStats "
        f"-k regex:'attention|sdpa|fmha|cudnn' -s 2 -c 1 {PY} "
        f"benchmarks/profile_attention.py {which}" for which in ("ws 128 0", "cudnn 128 0",
                                                                 "ws 256 0", "cudnn 256 0"))]),
}
#: What the summary keeps from a step's log.
KEEP = re.compile(r"TFLOP|ratio|geomean|passed|failed|error|launch|cold|mismatch|programs|"
                  r"ERROR SUMMARY|hazard", re.I)


def install_numpy():
    """Put the carried numpy wheel first on the path of this process and its children."""
    wheels = sorted(glob.glob(os.path.join(ROOT, ".whl", "numpy-*.whl")))
    if not wheels:
        sys.exit("no numpy 2.4 wheel in .whl/ (numba-cuda 0.30.4 needs numpy < 2.5): "
                 "see README")
    site = "/tmp/site"
    subprocess.run([PY, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--upgrade", "--target", site] + wheels, check=True)
    os.environ["PYTHONPATH"] = os.pathsep.join([site, ROOT, os.environ.get("PYTHONPATH", "")])
    os.environ["PYTHONUNBUFFERED"] = "1"


def run(cmd, limit, log):
    """(exit code, seconds); 124 on timeout. Output to ``log``."""
    start = time.time()
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                timeout=max(1, limit)).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    return rc, time.time() - start


def test_files(pattern):
    """tests/gpu files whose name contains one of the comma-separated ``pattern``s."""
    files = sorted(glob.glob(os.path.join(ROOT, "tests", "gpu", "test_*.py")))
    return [os.path.relpath(f, ROOT) for f in files
            if any(p in os.path.basename(f) for p in pattern.split(","))]


def tests_step(pattern, limit, out, jobs):
    """One pytest process per file, ``jobs`` at a time; returns summary lines."""
    files = test_files(pattern)
    deadline = time.time() + limit

    def one(path):
        name = os.path.basename(path)[:-3]
        cmd = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "--timeout=150",
               "-n", "2", path]         # pytest-xdist: two workers per file
        rc, secs = run(cmd, deadline - time.time(), os.path.join(out, f"{name}.log"))
        text = open(os.path.join(out, f"{name}.log")).read()
        counts = re.findall(r"(\d+) (passed|failed|error|errors|skipped)", text)
        fails = re.findall(r"^(?:FAILED|ERROR) (\S+)", text, re.M)
        return name, rc, secs, " ".join(f"{n} {w}" for n, w in counts) or "no summary", fails

    lines, rcs = [], []
    with cf.ThreadPoolExecutor(max_workers=jobs) as pool:
        for name, rc, secs, counts, fails in pool.map(one, files):
            rcs.append(rc)
            lines.append(f"  {name:<36} rc={rc:<3} {secs:6.1f}s  {counts}")
            lines.extend(f"      FAILED {f}" for f in fails[:12])
    return (max(rcs) if rcs else 5), lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("steps", nargs="*", default=["tests", "bench", "attention"])
    p.add_argument("--budget", type=float, default=560, help="seconds for all steps")
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/numba_ws_out"))
    p.add_argument("--jobs", type=int, default=7, help="parallel test files / fuzz workers")
    opts = p.parse_args()
    os.makedirs(opts.out, exist_ok=True)
    install_numpy()
    end = time.time() + opts.budget
    subprocess.run([PY, "-c", "import numpy, numba, numba.cuda as c; print('numpy', "
                    "numpy.__version__, 'numba', numba.__version__, 'gpu', "
                    "c.get_current_device().name)"])
    summary = []
    for step in opts.steps:
        left = end - time.time()
        if left < 5:
            summary.append((step, "skipped (budget)", 0.0, []))
            continue
        if step == "tests" or step.startswith("tests:"):
            start = time.time()
            rc, lines = tests_step(step.partition(":")[2], min(left, 420), opts.out,
                                   opts.jobs)
            summary.append((step, rc, time.time() - start, lines))
            continue
        if step not in STEPS:
            summary.append((step, "unknown step", 0.0, []))
            continue
        limit, cmd = STEPS[step]
        limit = min(limit, left)
        cmd = [c.format(OUT=opts.out, JOBS=opts.jobs, BUDGET=int(limit) - 20) for c in cmd]
        log = os.path.join(opts.out, f"{step}.log")
        rc, secs = run(cmd, limit, log)
        kept = [line.rstrip() for line in open(log) if KEEP.search(line)]
        summary.append((step, rc, secs, ["  " + k for k in kept[-14:]]))
    print("==== summary ====")
    for step, rc, secs, lines in summary:
        print(f"{step:<16} rc={rc}  {secs:6.1f}s")
        for line in lines:
            print(line)
    failed = [step for step, rc, _, _ in summary if rc != 0]
    if failed:
        print(f"FAILED or not run: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
