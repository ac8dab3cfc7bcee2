"""runtime/cudriver.py on the CPU: its enum values against cuda.bindings', and its
argument and output marshalling through C callbacks of each entry point's prototype
(tests/gpu/test_launcher.py resolves every symbol in the real driver)."""
import ctypes

import pytest

from numba_ws import errors as ws_errors
from numba_ws.runtime import cudriver

ENUMS = ["CUresult", "CUdevice_attribute", "CUfunction_attribute", "CUjit_option",
         "CUtensorMapDataType", "CUtensorMapInterleave", "CUtensorMapSwizzle",
         "CUtensorMapL2promotion", "CUtensorMapFloatOOBfill"]


@pytest.mark.parametrize("enum", ENUMS)
def test_enum_values_are_the_drivers(enum):
    bindings = pytest.importorskip("cuda.bindings.driver")
    ours = getattr(cudriver, enum)
    names = [n for n in vars(ours) if n.startswith("CU")]
    assert names
    for name in names:
        assert getattr(ours, name) == int(getattr(getattr(bindings, enum), name)), name


def test_every_function_has_a_prototype_and_the_bindings_name():
    wrappers = [n for n, v in vars(cudriver).items() if n.startswith("cu") and callable(v)]
    assert sorted(wrappers) == sorted(set(cudriver.PROTOTYPES) - {"cuGetErrorName"})
    bindings = pytest.importorskip("cuda.bindings.driver")
    for name in wrappers:
        assert hasattr(bindings, name), name


@pytest.fixture
def stub(monkeypatch):
    """stub(name, fn): entry point ``name`` becomes a C callback of its prototype."""
    def install(name, fn):
        callback = ctypes.CFUNCTYPE(ctypes.c_int, *cudriver.PROTOTYPES[name][1])(fn)
        monkeypatch.setitem(cudriver._FUNCTIONS, name, callback)
        return callback
    return install


def test_outputs_come_back_as_ints(stub):
    def get_global(ptr, size, module, name):
        assert (module, name) == (0x1234_5678_9ABC, b"__ws_debug_record")
        ptr[0], size[0] = 0x7F00_0000_1000, 96
        return 0
    stub("cuModuleGetGlobal", get_global)
    assert cudriver.cuModuleGetGlobal(0x1234_5678_9ABC, b"__ws_debug_record") == \
        (0, 0x7F00_0000_1000, 96)

    def retain(ctx, device):
        ctx[0] = 0xCAFE_0000 + device
        return 0
    stub("cuDevicePrimaryCtxRetain", retain)
    assert cudriver.cuDevicePrimaryCtxRetain(3) == (0, 0xCAFE_0003)
    stub("cuCtxGetCurrent", lambda ctx: 0)              # no context: NULL stays 0
    assert cudriver.cuCtxGetCurrent() == (0, 0)

    def param_info(fn, index, offset, size):
        if index > 1:
            return 1
        offset[0], size[0] = 8 * index, 8
        return 0
    stub("cuFuncGetParamInfo", param_info)
    assert cudriver.cuFuncGetParamInfo(0xF00, 1) == (0, 8, 8)
    assert cudriver.cuFuncGetParamInfo(0xF00, 2)[0] == 1


def test_launch_passes_null_for_the_default_stream_and_no_extra(stub):
    seen = []
    stub("cuLaunchKernel", lambda *a: seen.append(a) or 0)
    assert cudriver.cuLaunchKernel(0xF00, 2**31 - 1, 2, 3, 384, 1, 1, 232448, 0,
                                   0x7FFF_0000_0008, 0) == (0,)
    assert cudriver.cuLaunchKernel(0xF00, 1, 1, 1, 32, 1, 1, 0, 0x5555_0000, 0, 0x10) == (0,)
    assert seen == [(0xF00, 2**31 - 1, 2, 3, 384, 1, 1, 232448, None, 0x7FFF_0000_0008, None),
                    (0xF00, 1, 1, 1, 32, 1, 1, 0, 0x5555_0000, None, 0x10)]


def test_jit_options_pass_buffers_by_address(stub):
    log = bytearray(64)

    def load(module, image, count, options, values):
        assert ctypes.string_at(image, 5) == b"PTX!\0" and count == 2
        assert [ctypes.cast(options, ctypes.POINTER(ctypes.c_int))[i] for i in (0, 1)] == [5, 6]
        slots = ctypes.cast(values, ctypes.POINTER(ctypes.c_void_p))
        assert slots[1] == 64
        ctypes.memmove(slots[0], b"ptxas fatal", 11)
        module[0] = 0xABC
        return 218                                 # CUDA_ERROR_INVALID_PTX
    stub("cuModuleLoadDataEx", load)
    opts = [cudriver.CUjit_option.CU_JIT_ERROR_LOG_BUFFER,
            cudriver.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
    assert cudriver.cuModuleLoadDataEx(b"PTX!\0", 2, opts, [log, len(log)]) == (218, 0xABC)
    assert bytes(log[:11]) == b"ptxas fatal"


def test_error_names_come_from_the_driver(stub):
    names = {2: b"CUDA_ERROR_OUT_OF_MEMORY"}      # kept alive: the driver's static strings

    def get_name(code, out):
        if code not in names:
            return 1
        out[0] = names[code]
        return 0
    stub("cuGetErrorName", get_name)
    assert cudriver.error_name(2) == "CUDA_ERROR_OUT_OF_MEMORY"
    assert cudriver.error_name(4242) == "CUresult(4242)"


def test_no_driver_library_is_a_clear_error_at_the_first_call(monkeypatch):
    def no_library(name):
        raise OSError(f"{name}: cannot open shared object file")
    monkeypatch.setattr(cudriver, "_LIBRARY", [])
    monkeypatch.setattr(cudriver, "_FUNCTIONS", {})
    monkeypatch.setattr(cudriver.ctypes, "CDLL", no_library)
    with pytest.raises(cudriver.DriverUnavailable, match="CUDA driver library could not be "
                                                          "loaded") as err:
        cudriver.cuInit(0)
    assert isinstance(err.value, ws_errors.WSError) and isinstance(err.value, RuntimeError)
    assert cudriver.error_name(201) == "CUDA_ERROR_INVALID_CONTEXT"    # CUresult's own
    assert cudriver.error_name(222) == "CUresult(222)"


def test_a_missing_symbol_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(cudriver, "_LIBRARY", [object()])
    monkeypatch.setattr(cudriver, "_FUNCTIONS", {})
    with pytest.raises(cudriver.DriverUnavailable, match='"cuFuncGetParamInfo" not found'):
        cudriver.cuFuncGetParamInfo(0xF00, 0)
