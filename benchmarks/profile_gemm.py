"""One persistent GEMM launch to profile with Nsight Compute (the warm-up launch compiles).

    ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
        -k regex:matmul -s 1 -c 1 python benchmarks/profile_gemm.py [M N K]
"""
import sys

import cupy as cp

import numba_ws as ws
from numba_ws import examples

M, N, K = (int(v) for v in (sys.argv[1:4] if len(sys.argv) >= 4 else (8192, 8192, 1024)))
a = cp.random.standard_normal((M, K), dtype=cp.float32).astype(cp.float16)
b = cp.random.standard_normal((K, N), dtype=cp.float32).astype(cp.float16)
c = cp.empty((M, N), cp.float16)
sms = cp.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
launch = ws.jit(examples.matmul_persistent)[(sms,)]
for _ in range(2):
    launch(a, b, c, BM=128, BN=256, BK=64, GROUP_M=8, num_consumer_groups=2,
           num_buffers_warp_spec=4)
cp.cuda.runtime.deviceSynchronize()
print("max |c - a@b| / max|a@b| =",
      float(cp.abs(c.astype(cp.float32) - a.astype(cp.float32) @ b.astype(cp.float32)).max()
            / cp.abs(a.astype(cp.float32) @ b.astype(cp.float32)).max()))
