"""The thread-block-cluster intrinsics (numba_ws.codegen.cluster) in the hand-written 2-CTA
GEMM of tests/gpu/test_hand_gemm_cluster.py: PTX for sm_90a, assembled by ptxas."""
import importlib.util
import os

import pytest

from ptx_tools import assemble, resources


def _hand_cluster_module():
    path = os.path.join(os.path.dirname(__file__), "gpu", "test_hand_gemm_cluster.py")
    spec = importlib.util.spec_from_file_location("hand_gemm_cluster", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("cluster_release", [True, False])
@pytest.mark.parametrize("multicast", [True, False])
def test_cluster_gemm_ptx_assembles(tmp_path, multicast, cluster_release):
    ptx = _hand_cluster_module().cluster_ptx(multicast, cluster_release)
    assert ".target sm_90a" in ptx and ".reqnctapercluster 2, 1, 1" in ptx
    assert ptx.count("barrier.cluster.arrive.release;") == 2
    assert ".aligned;\n\tbarrier.cluster" not in ptx
    assert "mapa.shared::cluster.u32" in ptx
    arrive = "mbarrier.arrive.release.cluster.shared::cluster.b64" if cluster_release \
        else "mbarrier.arrive.shared::cluster.b64"
    assert arrive in ptx
    assert ("bytes.multicast::cluster" in ptx) == multicast
    regs, spills, stack = resources(assemble(ptx, tmp_path))
    assert spills == [0, 0] and stack == 0 and regs <= 168
