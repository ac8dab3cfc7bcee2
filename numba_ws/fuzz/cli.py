"""Command line of the GPU differential fuzzer: ``python3 scripts/fuzz_gpu.py`` (or
``python3 -m numba_ws.fuzz``).

    python3 scripts/fuzz_gpu.py --budget 240 --seed S --jobs 8 --json out/fuzz.json
    python3 scripts/fuzz_gpu.py --replay SEED [--device gpu] [--minimize]
    python3 scripts/fuzz_gpu.py --device ptx --budget 600 --jobs 2   # CPU pre-check

``--device``: gpu (default), sim, ptx, interp, noisy, noisy-bug, fault:... (see
numba_ws/fuzz/devices.py). ``--features``: auto (probe this checkout), none, or a comma
list of generator.OPTIONAL. The default seed is derived from the clock (printed, and in
the JSON) so that repeated runs cover new programs.
"""
import argparse
import json
import sys
import time


def parser():
    p = argparse.ArgumentParser(prog="fuzz_gpu.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=float, default=240.0, help="seconds for the whole run")
    p.add_argument("--seed", type=int, default=None, help="first program seed")
    p.add_argument("--jobs", type=int, default=8, help="worker processes (one CUDA context each)")
    p.add_argument("--device", default="gpu")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds per program (compile + run) before it counts as a hang")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--features", default="auto")
    p.add_argument("--max-programs", type=int, default=None, dest="max_programs")
    p.add_argument("--no-minimize", action="store_false", dest="minimize")
    p.add_argument("--max-minimize", type=int, default=3, dest="max_minimize",
                   help="distinct failures to minimize")
    p.add_argument("--work-dir", default=None, dest="work_dir",
                   help="worker logs, kernels and the compile cache (default: a temp dir)")
    p.add_argument("--replay", type=int, default=None, metavar="SEED",
                   help="run the program of one seed and print it and its result")
    p.add_argument("--minimize", action="store_true", dest="replay_minimize",
                   help="with --replay: minimize it if it fails")
    return p


def replay(opts):
    """One seed through a pool of one worker (so a crash is reported, not suffered)."""
    from .runner import Run
    from . import generator
    opts.max_programs, opts.jobs = 1, 1
    opts.minimize = opts.replay_minimize
    opts.seed = opts.replay
    run = Run(opts)
    program = generator.generate(opts.seed, run.features())
    print(program.describe())
    print(program.source)
    summary = run.main()
    for r in summary["programs"]:
        print(json.dumps(r, default=str))
    return 0 if not summary["failures"] else 1


def main(argv=None):
    opts = parser().parse_args(argv)
    if opts.seed is None:
        opts.seed = int(time.time()) % 100_000 * 1000
    if opts.replay is not None:
        return replay(opts)
    from .runner import Run
    summary = Run(opts).main()
    return 0 if not summary["failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
