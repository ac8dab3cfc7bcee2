"""Differential fuzzing of the GPU backend against the interpreter (issue 19 item 1).

    python3 scripts/fuzz_gpu.py --budget 240 --seed S --jobs 8 --json out/fuzz.json

Random valid tile programs (numba_ws/fuzz/generator.py) are compiled and run on the GPU
by a pool of worker processes and compared element by element with the NumPy
interpreter within documented error bounds (numba_ws/fuzz/bounds.py); failures are
minimized. ``--help`` lists the options; numba_ws/fuzz/cli.py has the details.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from numba_ws.fuzz.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
