"""numba_ws: warp-specialized Hopper tile kernels for Numba users.

Public names only; see README.md.
"""
from .defer_ml_dtypes import install as _defer_ml_dtypes
_defer_ml_dtypes()
from .language.core import (  # noqa: F401
    constexpr, program_id, num_programs, cdiv, zeros, full, load, store, dot, astype,
    exp, exp2, log, maximum, where, max, sum, trans, map, OP_NAMES,
)
from .language.dtypes import float16, bfloat16, float32, float64, int32, int64  # noqa: F401
from .language.dtypes import int8, uint8, int16, bool_  # noqa: F401  (issue 15 item 7)
from .language.core import static_range  # noqa: F401  (issue 15 item 5)
from .language.core import (  # noqa: F401  (issue 15 item 3)
    sqrt, rsqrt, abs, minimum, sigmoid, tanh, gelu, fma, min, argmax, argmin,
)
from .language.core import arange, expand_dims, broadcast_to, squeeze  # noqa: F401  (issue 15)
from .language.core import atomic_add  # noqa: F401  (issue 16)
from .runtime.jit import jit, Kernel  # noqa: F401
from .runtime.autotune import Config, autotune  # noqa: F401
from .errors import WSError, WSUsageError, WSCompileError, WSResourceError, WSScheduleError  # noqa: F401

__version__ = "0.1.0"

#: Public names whose modules load on first use: ``verify`` needs the interpreter and
#: the simulator, which ``import numba_ws`` does not pay for (issue 17).
_LAZY = {"verify": "verify_api"}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'numba_ws' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
