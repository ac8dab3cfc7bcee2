"""Three launches of one attention forward for Nsight Compute: numba_ws's
``examples.attention_fwd`` or torch SDPA with the cuDNN backend. The first two launches
warm up (and compile); profile the third:

    ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
        -k regex:'attention|sdpa|fmha|cudnn' -s 2 -c 1 \
        python benchmarks/profile_attention.py ws|cudnn D CAUSAL(0|1)
"""
import math
import sys

import torch
import torch.nn.functional as F

import numba_ws as ws
from numba_ws import examples

WHICH = sys.argv[1] if len(sys.argv) > 1 else "ws"
D = int(sys.argv[2]) if len(sys.argv) > 2 else 128
CAUSAL = len(sys.argv) > 3 and sys.argv[3] == "1"
B, H, S = 4, 32, 4096
#: the best configuration of the 2026-12-03 benchmark runs for D=128 and D=256
META = dict(BM=128, BN=128 if D <= 128 else 64, num_buffers_warp_spec=2)

q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) for _ in range(3))
o = torch.empty_like(q)
lse = torch.empty(B * H * S, device="cuda", dtype=torch.float32)
if WHICH == "cudnn":
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def run():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o.copy_(F.scaled_dot_product_attention(q, k, v, is_causal=CAUSAL))
else:
    flat = [x.view(B * H * S, D) for x in (q, k, v, o)]
    launch = ws.jit(examples.attention_fwd)[(S // META["BM"], B * H)]

    def run():
        launch(*flat, lse, S, 1, 1 / math.sqrt(D), D=D, CAUSAL=CAUSAL, **META)
for _ in range(3):
    run()
torch.cuda.synchronize()
ref = F.scaled_dot_product_attention(q[:1, :2].float(), k[:1, :2].float(), v[:1, :2].float(),
                                     is_causal=CAUSAL)
print(WHICH, D, CAUSAL, "max rel. error",
      float((o[:1, :2].float() - ref).abs().max() / ref.abs().max()))
