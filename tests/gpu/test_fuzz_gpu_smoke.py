"""The GPU differential fuzzer (numba_ws/fuzz, issue 19 item 1) on the GPU, quickly.

One program per generator family for sm_90a and three compiled for sm_80 (``NUMBA_WS_CC``),
each compiled and launched on CuPy arrays (bf16 through torch, or the CuPy uint16 +
``__cuda_array_interface__`` wrapper) with NaN-poisoned outputs and guard rows, and
compared element by element with the interpreter within the error bounds of
numba_ws/fuzz/bounds.py. Then 20 consecutive seeds with every optional feature this
checkout has (masks, where, min, argmax ...) through the pool (two workers, one CUDA
context each), as ``python3 scripts/fuzz_gpu.py`` runs them: no mismatch, no crash. The
seeds are fixed and their programs compiled on the CPU (``--device ptx``: inspect_ptx +
ptxas) when this test was written, so a failure here is the GPU disagreeing with the
interpreter (or crashing), not a known compile limitation.
"""
import json

import numpy as np
import pytest

cp = pytest.importorskip("cupy")

from numba_ws.fuzz import devices, generator  # noqa: E402

CASES = [("ew", "9.0a", 20), ("ew_loop", "9.0a", 20), ("vec", "9.0a", 20),
         ("gemm", "9.0a", 20), ("attn", "9.0a", 20), ("gemm", "8.0", 21),
         ("ew_loop", "8.0", 20), ("attn", "8.0", 20)]
#: the first of the 20 seeds the pool runs
FIRST_SEED = 1000


@pytest.fixture(scope="module")
def gpu():
    return devices.Gpu()


@pytest.mark.parametrize("family,cc,seed", CASES, ids=[f"{f}-{c}-{s}" for f, c, s in CASES])
def test_fuzzed_program_matches_the_interpreter(family, cc, seed, gpu, tmp_path):
    program = generator.generate(seed, family=family, cc=cc)
    result = devices.run_program(program, gpu, tmp_path)
    assert result["outcome"] == "match", (
        f"{program.describe()}\n{program.source}\n{result.get('message')}\n"
        f"{json.dumps(result.get('compare'), default=str)}")


def test_bf16_without_torch_round_trips_and_launches(gpu, tmp_path):
    plain = devices.Gpu()
    plain.torch = None
    program = generator.generate(20, family="vec", cc="9.0a")
    assert any(a.dtype == "bfloat16" for a in program.arrays)
    result = devices.run_program(program, plain, tmp_path)
    assert result["outcome"] == "match", result.get("message")
    from numba_ws.fuzz.program import np_dtype
    host = np.arange(-8, 8, dtype=np.float32).reshape(4, 4).astype(np_dtype("bfloat16"))
    back = plain.to_host(plain.to_device(host))
    assert back.dtype == host.dtype and np.array_equal(back.view(np.uint16),
                                                        host.view(np.uint16))


def test_twenty_seeds_through_the_pool_match(tmp_path):
    from numba_ws.fuzz.cli import main
    out = tmp_path / "fuzz.json"
    main(["--device", "gpu", "--budget", "400", "--jobs", "2", "--first-seed",
          str(FIRST_SEED), "--max-programs", "20", "--no-minimize", "--json", str(out),
          "--work-dir", str(tmp_path / "work")])
    summary = json.loads(out.read_text())
    c = summary["counts"]
    assert c["finished"] == 20 and c["generator_errors"] == 0
    assert c["mismatched"] == 0 and c["crashed"] == 0, summary["failures"]
    assert c["ran"] >= 15, summary["failures"]
