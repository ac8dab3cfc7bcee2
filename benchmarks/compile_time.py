"""Compile time of the 128x256 GEMM specialization, no GPU needed.

    python benchmarks/compile_time.py [--rounds N] [--against DIR]

Each round is a new process that imports numba_ws, compiles ``gemm.matmul`` for
BM=128 BN=256 BK=64 to PTX (the first compile of the process: it also imports numba-cuda
and sets up its typing), then a second specialization (BK=128, 2 slots: what each
autotuning config costs), and runs ptxas on the first one's PTX (the cubin a GPU launch
loads). Printed per round: the two compiles, ptxas, the LLVM IR and PTX sizes; then the
medians. ``--against DIR``: a second checkout of numba_ws (an older commit, say) timed in
alternating rounds (A B A B ...) beside this one.

On a GPU machine ``benchmarks/overhead.py`` measures the cold first launch itself
(compile + ptxas + module load + launch); this script isolates the host-side compile.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = """
import json, subprocess, sys, tempfile, time, os
sys.path.insert(0, {bench!r})
import numpy as np
import numba_ws
from gemm import matmul
t0 = time.perf_counter()      # the first compile imports numba-cuda (specialize)
from numba_ws.runtime import ptxas, specialize
libraries = []
stage = specialize.run_stage
def kept(*args, **kwargs):
    cres = stage(*args, **kwargs)
    libraries.append(cres.library)     # its IR is read after the compile, not during it
    return cres
specialize.run_stage = kept
a = np.zeros((512, 512), np.float16)
ptx = matmul.inspect_ptx(a, a, a, BM=128, BN=256, BK=64)
t1 = time.perf_counter()
ir_bytes = sum(len(s) for s in libraries[0].llvm_strs)
matmul.inspect_ptx(a, a, a, BM=128, BN=256, BK=128, num_buffers_warp_spec=2)
t2 = time.perf_counter()
exe = ptxas.find_ptxas()
seconds = None
if exe:
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        open(src, "w").write(ptx)
        t3 = time.perf_counter()
        subprocess.run(ptxas.command(exe, "sm_90a", src, os.path.join(tmp, "k.cubin")),
                       check=True)
        seconds = time.perf_counter() - t3
print(json.dumps(dict(first=t1 - t0, second=t2 - t1, ptxas=seconds, ir_bytes=ir_bytes,
                      ptx_bytes=len(ptx), where=os.path.dirname(numba_ws.__file__))))
"""


def one_round(root):
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("NUMBA_WS_TIMING", None)
    res = subprocess.run([sys.executable, "-c", CHILD.format(bench=HERE)], env=env, cwd=root,
                         capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"the compile in {root} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", help="another numba_ws checkout, timed alternately")
    opts = parser.parse_args()
    trees = [("this tree", ROOT)] + ([("against", os.path.abspath(opts.against))]
                                     if opts.against else [])
    results = {label: [] for label, _ in trees}
    for i in range(opts.rounds):
        for label, root in trees:
            r = one_round(root)
            results[label].append(r)
            ptx_s = f"{r['ptxas']:.2f} s" if r["ptxas"] is not None else "no ptxas"
            print(f"round {i + 1} {label:9s} first compile {r['first']:.2f} s, second "
                  f"{r['second']:.2f} s, ptxas {ptx_s}; LLVM IR {r['ir_bytes'] / 1e6:.2f} MB, "
                  f"PTX {r['ptx_bytes'] / 1e3:.0f} KB ({r['where']})")
    for label, rows in results.items():
        med = {k: statistics.median(r[k] for r in rows) for k in ("first", "second")}
        ptxas = [r["ptxas"] for r in rows if r["ptxas"] is not None]
        ptx_s = f", ptxas {statistics.median(ptxas):.2f} s" if ptxas else ""
        print(f"median of {len(rows)} ({label}): first compile {med['first']:.2f} s, second "
              f"specialization {med['second']:.2f} s{ptx_s}")


if __name__ == "__main__":
    main()
