#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck, initcheck; --report-api-errors no)
# over one small launch of every kernel family, one process per (tool, family), in
# parallel; prints the tool x family table; exit status 0 only with 0 errors everywhere.
# All of it is scripts/sanitize.py (its docstring: options, cells, timing); this wrapper
# is what scripts/gpu_check.py's "sanitize" step runs.
set -euo pipefail
exec "${PYTHON:-python3}" "$(dirname "$0")/sanitize.py" "$@"
