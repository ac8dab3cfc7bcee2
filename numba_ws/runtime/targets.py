"""What a launch compiles for, decided without numba-cuda (the launch index of
:mod:`.warm` keys on it): the target compute capability (:func:`target_cc`,
:func:`device_cc`) and what the GPU may do with each array argument (:func:`array_info`).
"""
import functools

from .. import knobs
from ..errors import WSUsageError


def array_info(bound, described):
    """Per array parameter: may TMA read it, and in what pieces may the producer copy it?

    The GPU loads 1-D and 2-D arrays (a 1-D array is read as one row, (1, N)); strides of
    dimensions of extent 1 do not matter. ``tma_ok``: one dimension contiguous, a 16-byte
    aligned base and the other dimension's stride a positive multiple of 16 bytes (a
    negative stride never passes: TMA strides are unsigned). ``vec``: the widest piece
    (16, 8, 4, 2 or 1 bytes) dividing the base and that stride when a dimension is
    contiguous (cp.async needs 4 or more), 0 when none is (the ld.global path then reads
    element by element with the array's strides, any sign). ``transposed``: a
    column-major 2-D array (first dimension contiguous, e.g. ``b.T`` of a row-major
    array); the copies then read its transposed (row-major) view and the tile lands
    K-major in shared memory, as ``ws.trans`` of a row-major load would. ``why``: what
    keeps TMA away, or why it may read the array. A base that is not a multiple of the
    element size is a :class:`WSUsageError` (no load or store can address it).
    """
    info = {}
    for name, arr in described.items():
        item = arr.dtype.itemsize
        if arr.ptr % item:
            raise WSUsageError(
                f"argument {name!r}: base address {arr.ptr:#x} is not a multiple of the "
                f"{arr.dtype.name} element size ({item} bytes); the GPU cannot address "
                "its elements (copy it into an aligned array)")
        transposed = (arr.ndim == 2 and arr.strides[-1] != item and arr.strides[0] == item
                      and arr.shape[0] > 1)
        inner = 0 if transposed else arr.ndim - 1
        outer = [s for d, s in enumerate(arr.strides) if d != inner and arr.shape[d] > 1]
        contiguous = arr.ndim > 0 and (transposed or arr.strides[-1] == item
                                       or arr.shape[-1] == 1)
        why = []
        if arr.ndim not in (1, 2):
            why.append(f"{arr.ndim}-D (the GPU loads 1-D and 2-D arrays)")
        if any(s < 0 for d, s in enumerate(arr.strides) if arr.shape[d] > 1):
            why.append("negative stride")
        if not contiguous:
            why.append("neither dimension contiguous" if arr.ndim == 2 else "not contiguous")
        if arr.ptr % 16:
            why.append(f"base {arr.ptr % 16} bytes past a 16-byte boundary")
        pitch = [s for s in outer if s % 16]
        if pitch:
            why.append(f"{'column' if transposed else 'row'} stride {pitch[0]} bytes not a "
                       "multiple of 16")
        vec = 0   # piece size along the contiguous dimension
        if contiguous and arr.ndim in (1, 2):
            vec = next(v for v in (16, 8, 4, 2, 1) if arr.ptr % v == 0
                       and all(s % v == 0 for s in outer))
        ok_why = "column-major: TMA reads the transposed view" if transposed else \
            "contiguous, aligned"
        info[name] = {"tma_ok": not why, "why": "; ".join(why) or ok_why, "vec": vec,
                      "transposed": transposed}
    return info


def target_cc(cc):
    """The compute capability a compile targets, as a tuple numba-cuda takes.

    (9, 0) means sm_90a: numba_ws's sm_90 code is wgmma, setmaxnreg and TMA, which
    ptxas accepts only for the "a" target, so (9, 0) and (9, 0, "a") compile the same
    PTX (``.target sm_90a``). sm_8x stays as given (mma.sync and cp.async); a newer major
    has neither sm_90a's instructions nor a path of its own here, so it is refused.
    """
    given, cc = cc, tuple(cc) if isinstance(cc, (tuple, list)) else ()
    if len(cc) not in (2, 3) or not all(isinstance(x, int) for x in cc[:2]) \
            or cc[2:] not in ((), ("a",)):
        raise WSUsageError(f"cc={given!r}: expected (major, minor) or (major, minor, 'a'), "
                           "e.g. (8, 0) or (9, 0)")
    if cc[:2] == (9, 0):
        return (9, 0, "a")
    if cc[2:]:
        raise WSUsageError(f"cc={cc!r}: only sm_90 has the 'a' target numba_ws uses; "
                           f"pass cc={cc[:2]}")
    if cc[0] >= 9:
        raise WSUsageError(
            f"cc={cc}: numba_ws compiles for sm_90a (wgmma, setmaxnreg, TMA) and sm_80 to "
            f"sm_89 (mma.sync, cp.async); sm_{cc[0]}{cc[1]} has no sm_90a instructions. "
            "Compile for (8, 0), which runs on newer GPUs (NUMBA_WS_CC=8.0 for launches)")
    return cc


@functools.lru_cache(maxsize=None)
def _cc_with_suffix(cc):
    return cc + ("a",) if cc == (9, 0) else cc


def device_cc():
    """The cc launches compile for: the current device's (sm_90 as ``(9, 0, "a")``), or
    NUMBA_WS_CC (e.g. "8.0" runs the sm_80 path on an sm_90 device; a cc above the
    device's cannot load). Asks the driver, not numba-cuda."""
    from .launcher import compute_capability
    device = _cc_with_suffix(compute_capability())
    forced = knobs.target_cc()
    if forced is None:
        return device
    if forced[:2] > device[:2]:
        raise WSUsageError(f"NUMBA_WS_CC={'.'.join(map(str, forced[:2]))} is above the "
                           f"device's compute capability {device[0]}.{device[1]}")
    return forced
