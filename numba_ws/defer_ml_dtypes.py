"""Keep numba-cuda's import from loading ml_dtypes until something else needs it (issue 17).

Two module bodies that ``import numba.cuda`` runs import ml_dtypes only to support
bfloat16 NumPy arrays: numba-cuda's ``numba.cuda.np.numpy_support`` (it adds
``np.dtype(ml_dtypes.bfloat16) -> types.bfloat16`` to ``FROM_DTYPE``) and cuda.core's
``cuda.core._memoryview`` (a module global ``bfloat16``, None without ml_dtypes). Loading
``ml_dtypes._ml_dtypes_ext`` takes 0.5 s on the CI-class VM (it registers casts among a
dozen dtypes with NumPy): a third of a cold first compile, and numba_ws's GPU path never
needs it (bf16 arguments are described by name, :func:`numba_ws.language.dtypes.from_numpy`).

:func:`install` puts a finder first on ``sys.meta_path`` that

- makes an ``import ml_dtypes`` raise ImportError while a module body of ``numba.cuda.*`` or
  ``cuda.core.*`` is executing, which both handle as "ml_dtypes not installed";
- lets every other ``import ml_dtypes`` (the interpreter's, the user's) load the real module
  and then gives both modules what their import skipped.

Invariant: once ml_dtypes is imported, by anyone, in either order with numba-cuda, numba-cuda
and cuda.core see it as without numba_ws. Until then cuda.core's ``StridedMemoryView`` of a
bfloat16 DLPack tensor raises its "needs ml_dtypes" NotImplementedError; ``import ml_dtypes``
first, or set NUMBA_WS_DEFER_ML_DTYPES=0. This file depends on numba-cuda 0.30's and
cuda.core 1.x's module internals named here.
"""
import sys

#: Packages whose import-time ``import ml_dtypes`` is deferred.
DEFERRING_PACKAGES = ("numba.cuda", "cuda.core")
NUMBA_SUPPORT, CORE_MEMORYVIEW = "numba.cuda.np.numpy_support", "cuda.core._memoryview"


def _give_skipped(ml_dtypes):
    """Give the modules that were loaded without ml_dtypes what they skipped."""
    support = sys.modules.get(NUMBA_SUPPORT)
    if support is not None and getattr(support, "ml_dtypes", None) is None:
        import numpy as np
        support.ml_dtypes = ml_dtypes
        support.FROM_DTYPE[np.dtype(ml_dtypes.bfloat16)] = support.types.bfloat16
    memoryview = sys.modules.get(CORE_MEMORYVIEW)
    if memoryview is not None and getattr(memoryview, "bfloat16", 0) is None:
        memoryview.bfloat16 = ml_dtypes.bfloat16


def _in_deferring_import():
    """Whether a module body of a DEFERRING_PACKAGES module is on the stack."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "<module>":
            name = frame.f_globals.get("__name__", "")
            if any(name == p or name.startswith(p + ".") for p in DEFERRING_PACKAGES):
                return True
        frame = frame.f_back
    return False


class _ThenRegister:
    """A loader that runs the real one, then :func:`_give_skipped`."""

    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):          # get_resource_reader, is_package, ...
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        _give_skipped(module)


class Deferral:
    """The ``sys.meta_path`` finder described in the module docstring."""

    def find_spec(self, name, path=None, target=None):
        if name != "ml_dtypes":
            return None
        if _in_deferring_import():
            raise ImportError("ml_dtypes is loaded on first use by numba_ws (issue 17)")
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _ThenRegister(spec.loader)
                return spec
        return None


def install():
    """Idempotent; does nothing when ml_dtypes or numba-cuda is already loaded, or with
    NUMBA_WS_DEFER_ML_DTYPES=0."""
    from . import knobs
    if not knobs.defer_ml_dtypes() or "ml_dtypes" in sys.modules or NUMBA_SUPPORT in sys.modules:
        return
    if not any(isinstance(f, Deferral) for f in sys.meta_path):
        sys.meta_path.insert(0, Deferral())
