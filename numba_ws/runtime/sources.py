"""What a kernel's cache keys read of its Python source (Numba-free: the launch index of
:mod:`.warm` computes keys without importing numba-cuda).

- :func:`source_text`: the kernel's source, or None (exec, ``python -c``, a REPL);
- :func:`called_sources`: the helpers and device functions it may call, transitively;
- :func:`is_library`: library code (never a helper, never part of a key).
"""
import inspect
import sys
import types as pytypes

#: Top-level packages whose Python functions are never helpers (library code).
NOT_HELPERS = frozenset({"numba", "numba_cuda", "numba_ws", "numpy", "ml_dtypes"})
#: Modules of those packages whose functions are tile code, so helpers after all: the
#: reference tile programs (``examples.attention_tile``, called by two kernels).
TILE_CODE = frozenset({"numba_ws.examples"})


def is_library(fn):
    """Is ``fn`` library code (a function of :data:`NOT_HELPERS` outside
    :data:`TILE_CODE`), not a helper?"""
    module = getattr(fn, "__module__", None) or ""
    return module.partition(".")[0] in NOT_HELPERS and module not in TILE_CODE


def source_text(fn):
    """``fn``'s source text, or None for a function made by exec, ``python -c`` or a
    REPL (no source file)."""
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return None


def _python_function(value):
    """The Python function behind a ``@ws.jit`` kernel or a CUDA dispatcher, else value.
    A CUDA dispatcher exists only once numba-cuda is imported: no import here."""
    from .jit import Kernel
    if isinstance(value, Kernel):
        return value.fn
    dispatcher = sys.modules.get("numba.cuda.dispatcher")
    if dispatcher is not None and isinstance(value, dispatcher.CUDADispatcher):
        return value.py_func
    return value


def called_sources(fn):
    """[(qualified name, source)] of the helpers and device functions ``fn`` may call,
    transitively: globals it names (a module's attributes it names too) that are Python
    functions outside numba / numba_ws, ``@ws.jit`` kernels or CUDA dispatchers. Part of
    the on-disk cache key: editing a helper recompiles the kernels calling it. A superset
    is harmless (only the key changes)."""
    seen, out, todo = set(), [], [fn]
    while todo:
        f = todo.pop()
        names = set(f.__code__.co_names)
        values = [f.__globals__[n] for n in names if n in f.__globals__]
        values += [getattr(m, n) for m in values if isinstance(m, pytypes.ModuleType)
                   for n in names if hasattr(m, n)]
        for v in map(_python_function, values):
            if not isinstance(v, pytypes.FunctionType) or v in seen or is_library(v):
                continue
            seen.add(v)
            source = source_text(v)
            out.append((f"{v.__module__}.{v.__qualname__}",
                        v.__code__.co_code.hex() if source is None else source))
            todo.append(v)
    return sorted(out)
