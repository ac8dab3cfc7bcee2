"""Three launches of one GEMM for Nsight Compute to compare: numba_ws cooperative
(persistent, BK=128, 2 slots), numba_ws ping-pong (128x128 tiles, BK=128, 3 slots) or
cuBLAS (torch.matmul). The first two launches warm up (and compile); profile the third:

    ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis \
        -k regex:'matmul|gemm|xmma' -s 2 -c 1 python benchmarks/profile_compare.py ws 4096 4096 4096
"""
import sys

import torch

import numba_ws as ws
from numba_ws import examples

WHICH = sys.argv[1] if len(sys.argv) > 1 else "ws"
M, N, K = (int(v) for v in (sys.argv[2:5] if len(sys.argv) >= 5 else (4096, 4096, 4096)))
META = {"ws": dict(BM=128, BN=256, BK=128, GROUP_M=8, num_consumer_groups=2,
                   num_buffers_warp_spec=2),
        "pp": dict(BM=128, BN=128, BK=128, GROUP_M=8, num_consumer_groups=2,
                   num_buffers_warp_spec=3, dot_in_flight=1, ping_pong=1)}

a = torch.randn(M, K, device="cuda", dtype=torch.float16)
b = torch.randn(K, N, device="cuda", dtype=torch.float16)
c = torch.empty(M, N, device="cuda", dtype=torch.float16)
if WHICH == "cublas":
    run = lambda: torch.matmul(a, b, out=c)  # noqa: E731
else:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    launch = ws.jit(examples.matmul_persistent)[(sms,)]
    run = lambda: launch(a, b, c, **META[WHICH])  # noqa: E731
for _ in range(3):
    run()
torch.cuda.synchronize()
ref = a.float() @ b.float()
print(WHICH, M, N, K, "max rel. error",
      float((c.float() - ref).abs().max() / ref.abs().max()))
