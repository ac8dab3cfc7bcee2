"""Command line of the GPU differential fuzzer: ``python3 scripts/fuzz_gpu.py`` (or
``python3 -m numba_ws.fuzz``).

    python3 scripts/fuzz_gpu.py --jobs 8 --json out/fuzz.json --budget 240 [--first-seed S]
    python3 scripts/fuzz_gpu.py --seed SEED [--device gpu] [--minimize]   # one program
    python3 scripts/fuzz_gpu.py --device ptx --budget 600 --jobs 2   # CPU pre-check
    python3 scripts/fuzz_gpu.py --device sim --budget 600 --jobs 2   # CPU, compared

``--device``: gpu (default), sim, ptx, interp, noisy, noisy-bug, fault:... (see
numba_ws/fuzz/devices.py). ``--features``: auto (probe this checkout), none, or a comma
list of generator.OPTIONAL. The default seed is derived from the clock (printed, and in
the JSON) so that repeated runs cover new programs. Every finished program prints a line
naming its seed (passing ones with ``--verbose``); a mismatch prints the program and its
worst element; the summary counts programs compiled / run / mismatched / failing to
compile, overall and by feature (numba_ws/fuzz/tags.py).
"""
import argparse
import json
import sys
import time


def parser():
    p = argparse.ArgumentParser(prog="fuzz_gpu.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=float, default=240.0, help="seconds for the whole run")
    p.add_argument("--first-seed", type=int, default=None, dest="first_seed",
                   help="seed of the first program (the next ones: +1, +2, ...)")
    p.add_argument("--seed", "--replay", type=int, default=None, dest="replay",
                   metavar="SEED", help="run the program of this one seed, print it and "
                   "its result")
    p.add_argument("--verbose", action="store_true", help="a line for passing programs too")
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
    p.add_argument("--minimize", action="store_true", dest="replay_minimize",
                   help="with --seed: minimize it if it fails")
    return p


def replay(opts):
    """One seed through a pool of one worker (so a crash is reported, not suffered)."""
    from .runner import Run
    from . import generator
    opts.max_programs, opts.jobs, opts.verbose = 1, 1, True
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
    opts.seed = opts.first_seed
    if opts.seed is None:
        opts.seed = int(time.time()) % 100_000 * 1000
    from .pool import PoolError
    try:
        if opts.replay is not None:
            return replay(opts)
        from .runner import Run
        summary = Run(opts).main()
    except PoolError as e:      # no device here (CuPy or the GPU missing): say so, briefly
        print(f"fuzz_gpu: {e}", file=sys.stderr)
        return 2
    if summary["counts"]["generated"] and not summary["counts"]["finished"]:
        print("fuzz_gpu: no program finished (the workers' logs are in the work dir)",
              file=sys.stderr)
        return 2
    return 0 if not summary["failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
