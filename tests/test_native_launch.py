"""The native launch call (runtime/native_launch.py), built with this machine's C compiler
and called against a C-callable stub of cuLaunchKernel's exact prototype (no GPU)."""
import ctypes
import os
import struct
import threading

import pytest

from numba_ws import knobs
from numba_ws.runtime import launcher, native_launch

U = ctypes.c_uint
PROTO = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, U, U, U, U, U, U, U,
                         ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A clean build state and cache home; restores the process's state afterwards."""
    monkeypatch.setattr(native_launch, "_STATE", {})
    with knobs.scope(NUMBA_WS_HOME=str(tmp_path), NUMBA_WS_NATIVE_LAUNCH=None):
        yield tmp_path


_STUBS = []     # the ctypes callbacks the extensions hold (they must outlive the calls)


def stubbed(seen, result=0):
    """The built extension's launch, calling a stub that records its arguments."""
    stub = PROTO(lambda *a: seen.append(a) or result)
    _STUBS.append(stub)
    if native_launch.compiler() is None:
        pytest.fail("no C compiler on this machine: the native launch path is untested")
    launch = native_launch.entry(ctypes.cast(stub, ctypes.c_void_p).value, wait=120)
    assert launch is not None, native_launch.build_error()
    return launch


def test_every_argument_reaches_the_driver_intact(fresh):
    seen = []
    launch = stubbed(seen, result=719)
    handle, stream, params = 0x7F12_3456_7890, 0x5555_AAAA_0000_1230, 0x7FFF_0000_0008
    assert launch(handle, 2**32 - 1, 65535, 3, 384, 1, 1, 232448, stream, params, None) == 719
    assert launch(handle, 1, 1, 1, 128, 1, 1, 0, None, None, params) == 719
    assert seen == [(handle, 2**32 - 1, 65535, 3, 384, 1, 1, 232448, stream, params, None),
                    (handle, 1, 1, 1, 128, 1, 1, 0, None, None, params)]
    # the build is cached in the home: a new process state loads it without a compiler
    assert os.path.isfile(native_launch.library_path())
    assert native_launch.library_path().startswith(str(fresh))


@pytest.mark.parametrize("bad", [2**32, -1, 1.0, "1", None])
def test_a_dimension_it_cannot_take_launches_nothing_and_returns_minus_one(fresh, bad):
    seen = []
    launch = stubbed(seen)
    assert launch(0x10, bad, 1, 1, 128, 1, 1, 0, 0, 0, None) == -1
    assert launch(0x10, 1, 1, 1, 128, 1, 1, bad, 0, 0, None) == -1
    assert seen == []


@pytest.mark.parametrize("bad", [2**64, -1, 1.5, ctypes.c_void_p(5)])
def test_a_pointer_it_cannot_take_launches_nothing_and_returns_minus_one(fresh, bad):
    seen = []
    launch = stubbed(seen)
    assert launch(bad, 1, 1, 1, 128, 1, 1, 0, 0, 0, None) == -1
    assert launch(0x10, 1, 1, 1, 128, 1, 1, 0, 0, 0, bad) == -1
    assert seen == []


def test_the_wrong_number_of_arguments_is_a_type_error(fresh):
    launch = stubbed([])
    with pytest.raises(TypeError, match="11 arguments"):
        launch(1, 1, 1, 1, 128, 1, 1, 0, 0, 0)


def test_a_cached_build_loads_in_a_new_state_and_a_missing_compiler_means_ctypes(
        fresh, monkeypatch):
    stubbed([])
    monkeypatch.setattr(native_launch, "_STATE", {})
    with knobs.scope(NUMBA_WS_NATIVE_LAUNCH="no-such-cc-numba-ws"):
        assert native_launch.compiler() is None
        assert native_launch.module() is not None        # cached: no compiler needed
    monkeypatch.setattr(native_launch, "_STATE", {})
    with knobs.scope(NUMBA_WS_HOME=str(fresh / "empty"),
                     NUMBA_WS_NATIVE_LAUNCH="no-such-cc-numba-ws"):
        native_launch.start()
        assert native_launch.module(wait=60) is None


def test_the_knob_zero_means_ctypes_for_every_kernel(fresh, monkeypatch):
    """NUMBA_WS_NATIVE_LAUNCH=0: no build, and CudaFunction.raw_launch is ctypes' call."""
    with knobs.scope(NUMBA_WS_NATIVE_LAUNCH="0"):
        native_launch.start()
        assert native_launch.module(wait=1) is None and native_launch._STATE == {}
        fn = launcher.CudaFunction.__new__(launcher.CudaFunction)
        fn._debug, fn._raw, fn._handle = None, None, 0x1234
        monkeypatch.setattr(launcher.cudriver, "address_of", lambda name: 0x5678)
        monkeypatch.setattr(launcher, "_RAW_LAUNCH", [])     # not kept past this test
        call, handle, pointer = fn.raw_launch()
        assert call is launcher._raw_cu_launch()
        assert handle.value == 0x1234 and pointer is launcher._pointer_arg


def test_raw_launch_takes_the_native_call_when_built_and_keeps_it(fresh, monkeypatch):
    seen = []
    stub = PROTO(lambda *a: seen.append(a) or 0)
    monkeypatch.setattr(launcher.cudriver, "address_of",
                        lambda name: ctypes.cast(stub, ctypes.c_void_p).value)
    assert native_launch.module(wait=120) is not None, native_launch.build_error()
    fn = launcher.CudaFunction.__new__(launcher.CudaFunction)
    fn._debug, fn._raw, fn._handle = None, None, 0xABCD
    call, handle, pointer = fn.raw_launch()
    assert fn.raw_launch() is fn.raw_launch()
    extra = launcher.buffer_extra((ctypes.c_char * 16)(), 16)
    assert handle == 0xABCD and pointer(7) == 7 and pointer(None) is None
    assert call(handle, 2, 1, 1, 256, 1, 1, 0, pointer(99), None, pointer(extra)) == 0
    assert seen == [(0xABCD, 2, 1, 1, 256, 1, 1, 0, 99, None, ctypes.addressof(extra))]


def bound_entry(seen, result=0, env=None, keys=(), fmt="=qqd"):
    """A bound entry of the built extension over a recording stub; its packer a real
    ``struct.Struct.pack_into`` into a ctypes buffer (read back by the stub's caller)."""
    stubbed(seen, result)
    bind, launch_bound = native_launch.binder(native_launch.module().launch)
    pack = struct.Struct(fmt)
    buf = (ctypes.c_char * pack.size)()
    errors = (struct.error, TypeError, ValueError, OverflowError)
    return launch_bound, bind(0x77, 384, 4096, 0x1000, None, pack.pack_into, buf, errors,
                              env, keys), buf, pack


def test_a_bound_entry_packs_then_launches_with_its_constants(fresh):
    seen = []
    launch_bound, bound, buf, pack = bound_entry(seen, result=3)
    assert launch_bound(bound, 5, 6, 7, 0xBEEF, -2, 2**40, 0.25) == 3
    assert seen == [(0x77, 5, 6, 7, 384, 1, 1, 4096, 0xBEEF, 0x1000, None)]
    assert bytes(buf) == pack.pack(-2, 2**40, 0.25)
    # more values than the C stack array holds
    long_fmt = "=" + "q" * 70
    seen.clear()
    launch_bound, bound, buf, pack = bound_entry(seen, fmt=long_fmt)
    assert launch_bound(bound, 1, 1, 1, 0, *range(70)) == 0
    assert bytes(buf) == pack.pack(*range(70)) and len(seen) == 1


@pytest.mark.parametrize("bad", [("1", 2, 0.5), (1, 2**63, 0.5), (1, 2, "x"), (1, 2)])
def test_a_value_the_packer_refuses_launches_nothing(fresh, bad):
    seen = []
    launch_bound, bound, buf, _ = bound_entry(seen)
    assert launch_bound(bound, 1, 1, 1, 0, *bad) == -1
    assert seen == []


def test_other_exceptions_of_a_value_propagate(fresh):
    class Odd:
        def __index__(self):
            raise KeyError("not a packing error")
    seen = []
    launch_bound, bound, _, _ = bound_entry(seen)
    with pytest.raises(KeyError):
        launch_bound(bound, 1, 1, 1, 0, Odd(), 2, 0.5)
    assert seen == []


@pytest.mark.parametrize("dims", [(0, 1, 2**32), (1.0, 1, 1), (1, None, 1)])
def test_a_bound_launch_with_a_bad_dimension_or_stream_launches_nothing(fresh, dims):
    seen = []
    launch_bound, bound, _, _ = bound_entry(seen)
    assert launch_bound(bound, *dims, 0, 1, 2, 0.5) == -1
    assert launch_bound(bound, 1, 1, 1, -5, 1, 2, 0.5) == -1
    assert seen == []


def test_a_bound_entry_refuses_while_a_guarded_key_is_set_and_in_another_thread(fresh):
    env = {b"A": b"1"}
    seen = []
    launch_bound, bound, _, _ = bound_entry(seen, env=env, keys=(b"K1", b"K2"))
    assert launch_bound(bound, 1, 1, 1, 0, 1, 2, 0.5) == 0
    env[b"K2"] = b""
    assert launch_bound(bound, 1, 1, 1, 0, 1, 2, 0.5) == -1
    del env[b"K2"]
    assert launch_bound(bound, 1, 1, 1, 0, 1, 2, 0.5) == 0
    result = []
    t = threading.Thread(target=lambda: result.append(launch_bound(bound, 1, 1, 1, 0, 1, 2,
                                                                   0.5)))
    t.start()
    t.join()
    assert result == [-1] and len(seen) == 2


def test_bind_checks_what_it_is_given(fresh):
    stubbed([])
    bind, launch_bound = native_launch.binder(native_launch.module().launch)
    buf = (ctypes.c_char * 8)()
    with pytest.raises(TypeError):
        bind(1, 1, 1, None, None, struct.Struct("q").pack_into, buf, [], None, ())
    with pytest.raises((ValueError, OverflowError)):
        bind(1, 2**32, 1, None, None, struct.Struct("q").pack_into, buf, (), None, ())
    with pytest.raises((TypeError, ValueError), match="PyCapsule"):
        launch_bound(object(), 1, 1, 1, 0)       # not a bound entry
    assert native_launch.binder(lambda *a: 0) is None              # a ctypes-like call
