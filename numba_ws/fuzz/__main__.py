"""``python3 -m numba_ws.fuzz``: the GPU differential fuzzer (see numba_ws/fuzz/cli.py)."""
import sys

from .cli import main

sys.exit(main())
