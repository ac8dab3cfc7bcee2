#!/usr/bin/env bash
# SASS of the GEMM's main loop (needs ptxas + cuobjdump): counts HGMMA and the
# WARPGROUP.DEPBAR waits; a serialised loop waits after every HGMMA.
# Usage: bash scripts/sass_check.sh [dot_in_flight]
set -eu
DIF=${1:-1}
T=$(mktemp -d)
python3 - "$T" "$DIF" <<'PY'
import sys, numpy as np, numba_ws as ws
from numba_ws import examples
a = np.zeros((4096, 4096), np.float16)
ptx = ws.jit(examples.matmul_persistent).inspect_ptx(
    a, a, a, BM=128, BN=256, BK=64, GROUP_M=8, num_consumer_groups=2,
    num_buffers_warp_spec=4, dot_in_flight=int(sys.argv[2]))
open(sys.argv[1] + "/k.ptx", "w").write(ptx)
PY
ptxas -arch=sm_90a -v "$T/k.ptx" -o "$T/k.cubin" 2>&1 | grep -E "C75|Used" | cut -c1-160
cuobjdump -sass "$T/k.cubin" > "$T/k.sass"
echo "dot_in_flight=$DIF: HGMMA $(grep -c HGMMA "$T/k.sass"), WARPGROUP.DEPBAR $(grep -c 'WARPGROUP.DEPBAR' "$T/k.sass"), WARPGROUP.ARRIVE $(grep -c 'WARPGROUP.ARRIVE' "$T/k.sass")"
grep -E "HGMMA|WARPGROUP" "$T/k.sass" | head -24 | sed 's/^ *//' | cut -c1-110
