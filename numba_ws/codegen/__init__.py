"""numba_ws.codegen: one Numba ``@intrinsic`` per PTX instruction family (inline PTX).

Every public intrinsic's docstring gives the PTX it emits, the minimum sm and who must
execute it. Shared-memory addresses are uint32 shared-window addresses; global pointers
and tensor-map addresses are uint64.
"""
from .smem import (  # noqa: F401
    smem_base, warp_group_id, thread_in_group, lane_id, warp_id, named_barrier_sync,
    fence_proxy_async_shared, DSMEM_ALIGN,
)
from .mbarrier import (  # noqa: F401
    mbarrier_init, fence_mbarrier_init, mbarrier_arrive, mbarrier_arrive_expect_tx,
    mbarrier_wait, mbarrier_try_wait, mbarrier_test_wait_loop,
)
from .elect import elect_one  # noqa: F401
from .tma import (  # noqa: F401
    tma_load_2d, tma_load_3d, tma_prefetch_descriptor, tma_store_2d, tma_store_commit,
    tma_store_wait_read0,
)
from .cp_async import (  # noqa: F401
    cp_async_16, cp_async_mbarrier_arrive_noinc, cp_async_commit, cp_async_wait_all,
)
from .wgmma import (  # noqa: F401
    wgmma_fence, wgmma_commit_group, wgmma_wait_group, wgmma_mma, wgmma_desc,
    wgmma_fence_operand, wgmma_zero_acc, desc_value, SWIZZLE_128B,
)
from .setmaxnreg import setmaxnreg_inc, setmaxnreg_dec  # noqa: F401
from .fragments import frag_row, frag_col, frag_store  # noqa: F401
