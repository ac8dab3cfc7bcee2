"""The generated launcher (runtime/fastcode.py) on the CPU: with a fake driver that
records every ``cuLaunchKernel`` (grid, block, shared memory, stream and the packed
parameter bytes), a launch through the generated code sends exactly what the slow path
sends for the same arguments, and hands anything it cannot prove the same back to it."""
import ctypes
import sys
import types as pytypes

import numpy as np
import pytest

import numba_ws as ws
from numba_ws import knobs
from numba_ws.runtime import jit as jit_mod
from numba_ws.runtime import launcher, native_launch
from numba_ws.runtime.launcher import ParamPacker
from test_interop import CAI


def rows(x, y, n, alpha: ws.constexpr, BM: ws.constexpr):
    pass


#: cuLaunchKernel's prototype, for the C stub the native extension calls
_PROTO = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7,
                          ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class FakeFunction:
    """``raw_launch``: a Python call, or (``native``) the built extension's launch calling a
    C stub; either records what it was given."""

    def __init__(self, log, packer, native=False):
        self.log, self.packer, self.fail, self.native = log, packer, 0, native

    def _record(self, grid, block, smem, stream, params):
        self.log.append((tuple(grid), tuple(block), smem, stream,
                         b"".join(self.packer.read_back())))

    def raw_launch(self):
        def call(handle, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            assert handle == 0xF00 and extra is None
            if self.fail:
                return self.fail
            self._record((gx, gy, gz), (bx, by, bz), smem, stream or 0, params)
            return 0
        if not self.native:
            return call, 0xF00, int
        self._stub = _PROTO(call)          # kept alive while the kernel is
        if native_launch.compiler() is None:
            pytest.fail("no C compiler on this machine: the native launch path is untested")
        native = native_launch.entry(ctypes.cast(self._stub, ctypes.c_void_p).value, wait=120)
        assert native is not None, native_launch.build_error()
        return native, 0xF00, launcher._native_pointer

    def launch(self, grid, block, smem, stream, params):
        if self.fail:
            raise RuntimeError(f"launch failed: {self.fail}")
        self._record(grid, block, smem, stream, params)


def fake_loaded(log, tma, native=False):
    """A jit._Loaded without a GPU: its packer is real; its tensor maps are the pointers'
    sum (what a real one keys them by); ``native``: launched through the C extension."""
    loaded = jit_mod._Loaded.__new__(jit_mod._Loaded)
    specs = [("array", "float16", 2, "A", "x"), ("array", "float16", 2, "A", "y"),
             ("scalar", "q", "int64"), ("scalar", "q", "int64"), ("scalar", "Q", "uint64")]
    loaded.packer = ParamPacker(specs, ["x", "y", "n", "BM", "<tensor maps>"])
    loaded.function = FakeFunction(log, loaded.packer, native)
    loaded.art = pytypes.SimpleNamespace(num_threads=384, smem_bytes=1024, tmaps=[])
    loaded.omitted = frozenset({3})                         # alpha: a float constexpr
    loaded.tmap_slots = [0, 1] if tma else []
    loaded.tmap_buffers = {}
    loaded.buffer_extra = None
    loaded.tmap_pointer = lambda values: (sum(values[j].ptr for j in (0, 1)) + 7) if tma else 0
    return loaded


@pytest.fixture(params=[(False, False), (True, False), (False, True), (True, True)],
                ids=["no-tma", "tma", "no-tma-native", "tma-native"])
def kernel(request, monkeypatch):
    """A kernel whose specialization is a fake (tensor maps or not) launched through a
    Python call or the native extension's bound entries; slow_reference is the first."""
    k = ws.jit(rows)
    k.log, k.slow = [], 0
    tma, native = request.param
    loaded = fake_loaded(k.log, tma, native)

    def specialize(bound, described, cc):
        k.slow += 1
        return loaded
    monkeypatch.setattr(k, "specialize", specialize)
    monkeypatch.setattr(jit_mod, "_device_cc", lambda: (9, 0, "a"))
    k.loaded = loaded
    return k


def arr(ptr, shape=(64, 8), strides=None):
    return CAI(shape, "<f2", ptr=ptr, strides=strides)


def slow_reference(args, meta, tma, grid=(4, 2)):
    """What the slow path alone sends for one launch (a fresh kernel: no plan yet)."""
    k = ws.jit(rows)
    log = []
    loaded = fake_loaded(log, tma)
    k.specialize = lambda bound, described, cc: loaded
    k[grid](*args, **meta)
    return log[-1]


def test_fast_launch_sends_what_the_slow_path_sends(kernel):
    tma = bool(kernel.loaded.tmap_slots)
    y = arr(0x20000)
    kernel[(4, 2)](arr(0x10000), y, 7, alpha=0.5, BM=64)
    assert kernel.slow == 1 and kernel._plans
    plan = next(iter(kernel._plans.values()))
    assert plan.fast is not None
    native = kernel.loaded.function.native     # one C call: no knob line, no pack line
    assert ("_bound(" in plan.fast.source) is native
    assert ("_knobs_hold" in plan.fast.source) is not native
    kernel[(4, 2)](arr(0x10000), y, 9, alpha=0.5, BM=64)      # same pointers: fast
    assert kernel.slow == 1
    assert kernel.log[-1] == slow_reference((arr(0x10000), y, 9), dict(alpha=0.5, BM=64), tma)
    # a new pointer: the generated code launches it unless a tensor map must be made
    assert plan.fast((arr(0x30000), y, 3)) is not tma
    if tma:
        kernel[(4, 2)](arr(0x30000), y, 3, alpha=0.5, BM=64)   # makes it (no compile)
    assert kernel.log[-1] == slow_reference((arr(0x30000), y, 3), dict(alpha=0.5, BM=64), tma)
    assert plan.fast((arr(0x30000), y, 4))
    assert kernel.log[-1] == slow_reference((arr(0x30000), y, 4), dict(alpha=0.5, BM=64), tma)
    assert kernel.slow == 1 and len(kernel.log) == 4


@pytest.mark.parametrize("dims", [(4,), (4, 2), (4, 2, 3)])
def test_callable_grids_of_every_rank_take_the_fast_path(kernel, dims):
    """A grid function returning 1, 2 or 3 dims: the generated launcher pads it to three
    (a 2-D one raised "too many values to unpack" there until 2026-12-07)."""
    tma = bool(kernel.loaded.tmap_slots)
    y = arr(0x20000)

    def grid(meta):
        return dims
    kernel[grid](arr(0x10000), y, 7, alpha=0.5, BM=64)
    kernel[grid](arr(0x10000), y, 9, alpha=0.5, BM=64)      # the generated launcher
    assert kernel.slow == 1 and len(kernel.log) == 2
    assert kernel.log[-1] == slow_reference((arr(0x10000), y, 9), dict(alpha=0.5, BM=64),
                                            tma, grid)


def test_new_shape_strides_or_alignment_go_to_the_slow_path_first(kernel):
    y = arr(0x20000)
    kernel[(4, 2)](arr(0x10000), y, 1, alpha=0.5, BM=64)
    plan = next(iter(kernel._plans.values()))
    for x in [arr(0x10000, (32, 8)), arr(0x10000, strides=(32, 2)), arr(0x10002)]:
        assert not plan.fast((x, y, 1))
        kernel[(4, 2)](x, y, 1, alpha=0.5, BM=64)
        assert plan.fast((x, y, 2))                          # now it has an entry
        assert kernel.log[-1] == slow_reference((x, y, 2), dict(alpha=0.5, BM=64),
                                                bool(kernel.loaded.tmap_slots))


def test_knobs_dtypes_and_bad_values_are_not_taken_by_the_fast_path(kernel):
    y = arr(0x20000)
    kernel[(4, 2)](arr(0x10000), y, 1, alpha=0.5, BM=64)
    plan = next(iter(kernel._plans.values()))
    assert plan.fast((arr(0x10000), y, 2))
    with knobs.scope(NUMBA_WS_DISABLE="1"):
        assert not plan.fast((arr(0x10000), y, 2))
    assert not plan.fast((CAI((64, 8), "<f4", ptr=0x10000), y, 2))      # another dtype
    assert not plan.fast((arr(0x10000), y, 1 << 70))                   # int64 overflow
    with pytest.raises(ws.WSUsageError, match="'n'"):
        kernel[(4, 2)](arr(0x10000), y, 1 << 70, alpha=0.5, BM=64)


def test_a_failed_driver_call_raises(kernel):
    y = arr(0x20000)
    kernel[(4, 2)](arr(0x10000), y, 1, alpha=0.5, BM=64)
    kernel.loaded.function.fail = 700
    with pytest.raises(RuntimeError, match="700"):
        kernel[(4, 2)](arr(0x10000), y, 1, alpha=0.5, BM=64)


def test_other_threads_take_the_slow_path(kernel):
    import threading
    y = arr(0x20000)
    kernel[(4, 2)](arr(0x10000), y, 1, alpha=0.5, BM=64)
    plan = next(iter(kernel._plans.values()))
    seen = []
    t = threading.Thread(target=lambda: seen.append(plan.fast((arr(0x10000), y, 2))))
    t.start()
    t.join()
    assert seen == [False]


class _Data:
    def __init__(self, ptr):
        self.ptr = ptr


def _fake_cupy(monkeypatch):
    """A module named cupy with an ndarray class and a current stream (handle 0x5)."""
    mod = pytypes.ModuleType("cupy")
    mod.cuda = pytypes.SimpleNamespace(get_current_stream=lambda: pytypes.SimpleNamespace(
        ptr=0x5))

    class ndarray:
        def __init__(self, ptr, shape=(64, 8)):
            self.data, self.shape, self.dtype = _Data(ptr), shape, np.dtype(np.float16)
            self.strides = (shape[1] * 2, 2)
            self.size, self._c_contiguous = shape[0] * shape[1], True

        @property
        def __cuda_array_interface__(self):
            return dict(shape=self.shape, typestr="<f2", data=(self.data.ptr, False),
                        strides=None, version=3)
    ndarray.__module__ = "cupy"
    mod.ndarray = ndarray
    monkeypatch.setitem(sys.modules, "cupy", mod)
    return mod


def test_cupy_arrays_are_read_through_their_attributes(kernel, monkeypatch):
    cp = _fake_cupy(monkeypatch)
    y = cp.ndarray(0x20000)
    kernel[(4, 2)](cp.ndarray(0x10000), y, 1, alpha=0.5, BM=64)
    plan = next(iter(kernel._plans.values()))
    assert "a0.data.ptr" in plan.fast.source
    kernel[(4, 2)](cp.ndarray(0x10000), y, 5, alpha=0.5, BM=64)
    assert kernel.slow == 1 and kernel.log[-1][3] == 0x5             # CuPy's stream
    expect = slow_reference((cp.ndarray(0x10000), y, 5), dict(alpha=0.5, BM=64),
                            bool(kernel.loaded.tmap_slots))
    assert kernel.log[-1] == expect


@pytest.mark.parametrize("initial", [None, "1"])
def test_the_knob_guard_holds_exactly_while_the_fingerprint_is_unchanged(initial):
    with knobs.scope(NUMBA_WS_DISABLE=initial):
        test, argument = knobs.launch_guard(knobs.launch_fingerprint())
        guard = lambda: test(argument)       # noqa: E731
        assert guard()
        for name, value in [("NUMBA_WS_INTERPRET", "1"), ("NUMBA_WS_CC", "90"),
                            ("NUMBA_WS_DISABLE", "0"), ("NUMBA_WS_DISABLE", "")]:
            with knobs.scope(**{name: value}):
                assert not guard(), (name, value)
            assert guard()


def test_the_raw_driver_call_passes_every_argument_intact():
    """CudaFunction.raw_launch's ctypes call (no declared argument types) through a C
    callback of cuLaunchKernel's exact prototype: 64-bit handles, the dimensions as
    unsigned ints, NULL extra, and the CUresult back as an int."""
    import ctypes
    from numba_ws.runtime import launcher
    seen = []
    u = ctypes.c_uint
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, u, u, u, u, u, u, u,
                             ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
    stub = proto(lambda *a: seen.append(a) or 719)
    call = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.cast(stub, ctypes.c_void_p).value)
    handle, stream, params = 0x7F12_3456_7890, 0x5555_AAAA_0000_1230, 0x7FFF_0000_0008
    err = call(ctypes.c_void_p(handle), 2**31 - 1, 65535, 3, 384, 1, 1, 232448,
               launcher._pointer_arg(stream), launcher._pointer_arg(params), None)
    assert err == 719
    assert seen == [(handle, 2**31 - 1, 65535, 3, 384, 1, 1, 232448, stream, params, None)]
    assert launcher._pointer_arg(stream) is launcher._pointer_arg(stream)


class BufferFunction(FakeFunction):
    """The ctypes driver path: pointer arguments, and a parameter layout the driver
    reports (``layout``); a launch with ``extra`` is recorded from the buffer it names."""
    def __init__(self, log, packer, layout):
        super().__init__(log, packer)
        self.layout, self.extras = layout, []

    def param_layout(self):
        return self.layout

    def raw_launch(self):
        import ctypes
        from numba_ws.runtime import launcher

        def call(handle, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            assert handle == 0xF00
            self.extras.append(extra is not None)
            if extra is None:
                return self.launch((gx, gy, gz), (bx, by, bz), smem, stream.value or 0,
                                   params.value) or 0
            assert params is None and (extra[0], extra[2], extra[4]) == (1, 2, None)
            size = ctypes.c_size_t.from_address(extra[3]).value
            data = ctypes.string_at(extra[1], size)
            assert size == self.packer.nbytes == self.layout[-1][0] + self.layout[-1][1]
            self.log.append(((gx, gy, gz), (bx, by, bz), smem, stream.value or 0,
                             b"".join(data[o:o + n] for o, n in self.layout)))
            return 0
        return call, 0xF00, launcher._pointer_arg


@pytest.mark.parametrize("same_layout", [True, False], ids=["buffer", "pointers"])
def test_a_buffer_launch_sends_the_packed_bytes_when_the_layouts_agree(same_layout,
                                                                       monkeypatch):
    """With the kernel's own parameter layout the generated launcher passes the one
    packed buffer (``extra``); with any other layout it passes a pointer per
    parameter. Both send the slow path's bytes, launch after launch."""
    k = ws.jit(rows)
    k.log = []
    loaded = fake_loaded(k.log, False)
    layout = loaded.packer.layout()
    if not same_layout:                    # one more parameter than the packer has
        layout = layout + [(layout[-1][0] + 8, 8)]
    loaded.function = BufferFunction(k.log, loaded.packer, layout)
    monkeypatch.setattr(k, "specialize", lambda bound, described, cc: loaded)
    monkeypatch.setattr(jit_mod, "_device_cc", lambda: (9, 0, "a"))
    y = arr(0x20000)
    for n in [1, 2, -3, 1 << 40]:
        k[(4, 2)](arr(0x10000), y, n, alpha=0.5, BM=64)
        assert k.log[-1] == slow_reference((arr(0x10000), y, n), dict(alpha=0.5, BM=64),
                                           False)
    assert loaded.function.extras == [same_layout] * 3      # the first: the slow path


def test_buffer_extra_names_the_buffer_and_keeps_its_size_alive():
    import ctypes
    import gc
    from numba_ws.runtime.launcher import buffer_extra
    buf = (ctypes.c_uint64 * 4)()
    extra = buffer_extra(buf, 28)
    gc.collect()
    assert [extra[0], extra[2], extra[4]] == [1, 2, None]
    assert extra[1] == ctypes.addressof(buf)
    assert ctypes.c_size_t.from_address(extra[3]).value == 28


@pytest.mark.parametrize("driver, expect", [
    ("layout", [(0, 8), (8, 8), (16, 4)]),       # INVALID_VALUE past the last parameter
    ("other error", None), ("no entry point", None), ("absent", None)])
def test_param_layout_reads_the_driver_until_the_last_parameter(driver, expect, monkeypatch):
    from numba_ws.runtime import launcher
    params = [(0, 8), (8, 8), (16, 4)]

    def query(handle, i):
        assert handle == 0xF00
        if driver == "no entry point":
            raise RuntimeError("Function \"cuFuncGetParamInfo\" not found")
        if i < len(params):
            return (0,) + params[i]
        return (1 if driver == "layout" else 801, 0, 0)
    fake = pytypes.SimpleNamespace() if driver == "absent" else \
        pytypes.SimpleNamespace(cuFuncGetParamInfo=query)
    monkeypatch.setattr(launcher, "_driver", lambda: fake)
    function = launcher.CudaFunction.__new__(launcher.CudaFunction)
    function.handle = 0xF00
    assert function.param_layout() == expect


def test_the_last_plan_launches_only_its_own_signature(kernel):
    """kernel[grid] tries the last fast-launched plan first; its launcher checks the grid,
    every argument's type and the meta, so another launch never takes it."""
    tma = bool(kernel.loaded.tmap_slots)
    x, y = arr(0x10000), arr(0x20000)
    kernel[(4, 2)](x, y, 1, alpha=0.5, BM=64)
    assert kernel._last_fast[0] is None                  # the slow path launched it
    kernel[(4, 2)](x, y, 2, alpha=0.5, BM=64)
    plan = next(iter(kernel._plans.values()))
    assert kernel._last_fast[0] is plan.fast
    assert not plan.fast((x, y, 2), (4, 1), dict(alpha=0.5, BM=64))     # another grid
    assert not plan.fast((x, y, 2), (4, 2), dict(alpha=0.5, BM=128))    # another meta
    assert not plan.fast((x, y, 2), (4, 2), dict(alpha=0.5))
    assert not plan.fast((x, y), (4, 2), dict(alpha=0.5, BM=64))        # fewer arguments
    assert not plan.fast((x, y, True), (4, 2), dict(alpha=0.5, BM=64))  # another type
    assert not plan.fast((x, y, 2), (4, 2), dict(alpha=0.5, BM=np.arange(3)))
    assert plan.fast((x, y, 3), (4, 2), dict(BM=64, alpha=0.5))         # keyword order
    assert kernel.log[-1] == slow_reference((x, y, 3), dict(alpha=0.5, BM=64), tma)
    kernel[(4, 1)](x, y, 4, alpha=0.5, BM=64)
    assert kernel.log[-1][0] == (4, 1, 1) and kernel.slow == 2
    kernel[(4, 2)](x, y, 5, alpha=0.5, BM=128)
    assert kernel.log[-1] == slow_reference((x, y, 5), dict(alpha=0.5, BM=128), tma)


def test_an_unhashable_meta_value_gets_the_error_it_gets_without_a_last_plan(kernel):
    x, y = arr(0x10000), arr(0x20000)
    fresh = ws.jit(rows)
    with pytest.raises(Exception) as without:
        fresh[(4, 2)](x, y, 1, alpha=0.5, BM=np.arange(3))
    kernel[(4, 2)](x, y, 1, alpha=0.5, BM=64)
    kernel[(4, 2)](x, y, 1, alpha=0.5, BM=64)
    assert kernel._last_fast[0] is not None
    with pytest.raises(type(without.value)):
        kernel[(4, 2)](x, y, 1, alpha=0.5, BM=np.arange(3))


def test_kernel_grid_makes_one_launcher_per_grid(kernel, monkeypatch):
    """kernel[grid] is built once per hashable grid (a list grid gets a fresh one each
    time); launches through a kept launcher still send what the slow path sends, and the
    kept launchers are bounded."""
    tma = bool(kernel.loaded.tmap_slots)
    x, y = arr(0x10000), arr(0x20000)
    first = kernel[(4, 2)]
    assert kernel[(4, 2)] is first and kernel[(4, 1)] is not first
    assert kernel[[4, 2]] is not kernel[[4, 2]]
    for n in range(3):
        first(x, y, n, alpha=0.5, BM=64)
        assert kernel.log[-1] == slow_reference((x, y, n), dict(alpha=0.5, BM=64), tma)
    assert kernel.slow == 1
    kernel[[4, 2]](x, y, 7, alpha=0.5, BM=64)           # unhashable: the slow path
    assert kernel.log[-1] == slow_reference((x, y, 7), dict(alpha=0.5, BM=64), tma)
    kernel[(4, 1)](x, y, 8, alpha=0.5, BM=64)
    assert kernel.log[-1][0] == (4, 1, 1) and kernel.slow == 3
    monkeypatch.setattr(jit_mod.fastpath, "MAX_PLANS", 3)
    for g in range(1, 8):
        kernel[(g,)]
        assert len(kernel._grid_launchers) <= 3


def test_a_plan_made_with_a_launch_knob_set_keeps_the_python_guard(kernel):
    """Made while a launch knob is set, the launcher guards with the fingerprint itself
    (the bound entry then checks no environment keys): fast while the knob holds, the
    slow path once it changes."""
    tma = bool(kernel.loaded.tmap_slots)
    x, y = arr(0x10000), arr(0x20000)
    with knobs.scope(NUMBA_WS_DISABLE="1"):
        kernel[(4, 2)](x, y, 1, alpha=0.5, BM=64)
        plan = next(iter(kernel._plans.values()))
        assert "_knobs_hold" in plan.fast.source
        assert plan.fast((x, y, 2))
        assert kernel.log[-1] == slow_reference((x, y, 2), dict(alpha=0.5, BM=64), tma)
    assert not plan.fast((x, y, 3))
    with knobs.scope(NUMBA_WS_DISABLE="1"):
        assert plan.fast((x, y, 4)) and kernel.slow == 1
