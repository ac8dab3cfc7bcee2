"""``cuLaunchKernel`` called from a tiny C extension instead of ctypes (issue 17 item 1).

The generated launcher (runtime/fastcode.py) ends in one driver call; through ctypes that
call converts eleven Python objects and builds a libffi call frame every time. This module
compiles (once per machine and Python, cached under ``NUMBA_WS_HOME/native``) a Python
extension with one function of the same eleven arguments::

    launch(handle, gx, gy, gz, bx, by, bz, smem, stream, params, extra) -> CUresult

handles and pointers as ints (None is NULL), the dimensions and ``smem`` as ints below
2**32. It calls the ``cuLaunchKernel`` whose address :func:`entry` set, releasing the GIL
around the call as ctypes does, and returns the CUresult as an int. An argument that is
not such an int launches nothing and returns -1 (no exception), so the fast path's checked
fallback (``CudaFunction.launch``) raises the error a user sees, as for a failed call.

A *bound entry* (``bind``, kept in a capsule) holds one specialization's handle, block,
shared memory, parameter arguments and packer (``struct.Struct.pack_into`` and its buffer),
the thread that made it and, optionally, the environment dict and the launch knobs' keys;
``launch_bound(bound, gx, gy, gz, stream, *values)`` then does in one call what the
generated launcher did in four: returns -1 having launched nothing when another thread
calls, a key is in the environment, or a value is refused (a dimension or the stream not
such an int, or ``pack_into`` raising one of ``errors``; any other exception propagates);
else packs ``values`` into the buffer, launches, and returns the CUresult.

Triton builds its launchers the same way (a C compiler and Python's headers at run time).
Without either, or with ``NUMBA_WS_NATIVE_LAUNCH=0``, :func:`entry` is None and launches
go through ctypes (``launcher._raw_cu_launch``). The build runs in the background: a
compile starts it (:func:`start`), so the C compiler works while numba-cuda and NVVM do.
"""
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading

from .. import knobs

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef int (*cu_launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, void *, void **, void **);
static cu_launch_t cu_launch = NULL;
static PyObject *zero = NULL;

static int as_pointer(PyObject *o, void **out) {
    if (o == Py_None) { *out = NULL; return 0; }
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    *out = (void *)(uintptr_t)v;
    return 0;
}

static int as_uint(PyObject *o, unsigned *out) {
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    if (v > 0xFFFFFFFFull) return -1;
    *out = (unsigned)v;
    return 0;
}

static PyObject *launch(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    void *handle, *stream, *params, *extra;
    unsigned d[7];
    int i, err;
    if (n != 11) {
        PyErr_SetString(PyExc_TypeError, "launch() takes 11 arguments");
        return NULL;
    }
    if (cu_launch == NULL || as_pointer(a[0], &handle) || as_pointer(a[8], &stream)
            || as_pointer(a[9], &params) || as_pointer(a[10], &extra))
        goto refuse;
    for (i = 0; i < 7; i++)
        if (as_uint(a[1 + i], &d[i])) goto refuse;
    Py_BEGIN_ALLOW_THREADS
    err = cu_launch(handle, d[0], d[1], d[2], d[3], d[4], d[5], d[6], stream,
                    (void **)params, (void **)extra);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(err);
refuse:
    PyErr_Clear();
    return PyLong_FromLong(-1);
}

static PyObject *set_entry(PyObject *self, PyObject *address) {
    void *p;
    if (as_pointer(address, &p)) return NULL;
    cu_launch = (cu_launch_t)p;
    Py_RETURN_NONE;
}

/* A bound entry: one specialization's launch constants, its packer and the launch
   knobs to guard, kept in a capsule (bind) and launched by launch_bound. */
typedef struct {
    void *handle, *params, *extra;
    unsigned threads, smem;
    unsigned long owner;
    PyObject *pack, *buf, *errors, *env, *keys;
} bound_t;

static const char BOUND[] = "numba_ws.bound_launch";

static void bound_free(PyObject *capsule) {
    bound_t *b = (bound_t *)PyCapsule_GetPointer(capsule, BOUND);
    if (b == NULL) { PyErr_Clear(); return; }
    Py_XDECREF(b->pack); Py_XDECREF(b->buf); Py_XDECREF(b->errors);
    Py_XDECREF(b->env); Py_XDECREF(b->keys);
    PyMem_Free(b);
}

static PyObject *bind(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    bound_t *b;
    PyObject *capsule;
    if (n != 10) {
        PyErr_SetString(PyExc_TypeError, "bind() takes 10 arguments");
        return NULL;
    }
    if (!PyTuple_Check(a[9]) || (a[8] != Py_None && !PyDict_Check(a[8]))
            || !PyTuple_Check(a[7])) {
        PyErr_SetString(PyExc_TypeError, "bind(): errors and keys are tuples, env a dict or None");
        return NULL;
    }
    b = (bound_t *)PyMem_Calloc(1, sizeof(bound_t));
    if (b == NULL) return PyErr_NoMemory();
    if (as_pointer(a[0], &b->handle) || as_uint(a[1], &b->threads) || as_uint(a[2], &b->smem)
            || as_pointer(a[3], &b->params) || as_pointer(a[4], &b->extra)) {
        PyMem_Free(b);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bind(): a value out of range");
        return NULL;
    }
    b->owner = PyThread_get_thread_ident();
    b->pack = a[5]; b->buf = a[6]; b->errors = a[7];
    b->env = a[8] == Py_None ? NULL : a[8]; b->keys = a[9];
    Py_INCREF(b->pack); Py_INCREF(b->buf); Py_INCREF(b->errors);
    Py_XINCREF(b->env); Py_INCREF(b->keys);
    capsule = PyCapsule_New(b, BOUND, bound_free);
    if (capsule == NULL) {
        Py_DECREF(b->pack); Py_DECREF(b->buf); Py_DECREF(b->errors);
        Py_XDECREF(b->env); Py_DECREF(b->keys);
        PyMem_Free(b);
    }
    return capsule;
}

#define STACK_VALUES 64

static PyObject *launch_bound(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    PyObject *stack[STACK_VALUES + 2], **args = stack, *packed;
    Py_ssize_t i, nv = n - 5;
    bound_t *b;
    unsigned d[3];
    void *stream;
    int err;
    if (n < 5) {
        PyErr_SetString(PyExc_TypeError, "launch_bound() takes a bound entry, 3 dimensions, "
                        "a stream and the values to pack");
        return NULL;
    }
    b = (bound_t *)PyCapsule_GetPointer(a[0], BOUND);
    if (b == NULL) return NULL;
    if (cu_launch == NULL || b->owner != PyThread_get_thread_ident()) goto refuse;
    if (b->env != NULL)
        for (i = 0; i < PyTuple_GET_SIZE(b->keys); i++) {
            int held = PyDict_Contains(b->env, PyTuple_GET_ITEM(b->keys, i));
            if (held != 0) goto refuse;       /* a knob is set (or the lookup failed) */
        }
    for (i = 0; i < 3; i++)
        if (as_uint(a[1 + i], &d[i])) goto refuse;
    if (as_pointer(a[4], &stream)) goto refuse;
    if (nv > STACK_VALUES) {
        args = (PyObject **)PyMem_Malloc((nv + 2) * sizeof(PyObject *));
        if (args == NULL) return PyErr_NoMemory();
    }
    args[0] = b->buf;
    args[1] = zero;
    for (i = 0; i < nv; i++) args[2 + i] = a[5 + i];
    packed = PyObject_Vectorcall(b->pack, args, nv + 2, NULL);
    if (args != stack) PyMem_Free(args);
    if (packed == NULL) {
        if (PyErr_ExceptionMatches(b->errors)) goto refuse;
        return NULL;                          /* not a value error: raise it */
    }
    Py_DECREF(packed);
    Py_BEGIN_ALLOW_THREADS
    err = cu_launch(b->handle, d[0], d[1], d[2], b->threads, 1, 1, b->smem, stream,
                    (void **)b->params, (void **)b->extra);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(err);
refuse:
    PyErr_Clear();
    return PyLong_FromLong(-1);
}

static PyMethodDef methods[] = {
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL,
     "launch(handle, gx, gy, gz, bx, by, bz, smem, stream, params, extra) -> CUresult"},
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(handle, threads, smem, params, extra, pack_into, buffer, errors, env, keys)"},
    {"launch_bound", (PyCFunction)(void (*)(void))launch_bound, METH_FASTCALL,
     "launch_bound(bound, gx, gy, gz, stream, *values) -> CUresult, -1: refused"},
    {"set_entry", set_entry, METH_O, "set_entry(address of cuLaunchKernel)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ws_launch", NULL, -1, methods};

PyMODINIT_FUNC PyInit__ws_launch(void) {
    zero = PyLong_FromLong(0);
    if (zero == NULL) return NULL;
    return PyModule_Create(&module);
}
"""

_EXT = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
#: the build and its outcome: "thread" while it runs, then "module" or "error"
_STATE = {}
_LOCK = threading.Lock()


def compiler():
    """The C compiler to build with (a command name or path), or None."""
    chosen = knobs.native_launch()
    if chosen == "0":
        return None
    if chosen:
        return chosen if shutil.which(chosen) else None
    configured = (sysconfig.get_config_var("CC") or "").split()
    for name in configured[:1] + ["cc", "gcc", "clang"]:
        if shutil.which(name):
            return name
    return None


def library_path():
    """Where the built extension is cached: keyed by the source, the Python build and the
    platform, so another interpreter never loads it."""
    key = hashlib.sha256("\0".join([SOURCE, sys.version, _EXT, sys.platform]).encode())
    return os.path.join(knobs.home(), "native", f"_ws_launch-{key.hexdigest()[:16]}{_EXT}")


def _build(path):
    """Compile SOURCE into ``path`` (atomically); the error text, or "" on success."""
    cc = compiler()
    include = sysconfig.get_paths().get("include", "")
    if cc is None:
        return "no C compiler"
    if not os.path.isfile(os.path.join(include, "Python.h")):
        return f"no Python.h in {include!r}"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(path)) as tmp:
        src, out = os.path.join(tmp, "ws_launch.c"), os.path.join(tmp, "out" + _EXT)
        with open(src, "w") as f:
            f.write(SOURCE)
        run = subprocess.run([cc, "-O2", "-shared", "-fPIC", f"-I{include}", src, "-o", out],
                             capture_output=True, text=True)
        if run.returncode:
            return (run.stderr or run.stdout).strip()[-2000:] or f"{cc} failed"
        os.replace(out, path)
    return ""


def _load(path):
    loader = importlib.machinery.ExtensionFileLoader("_ws_launch", path)
    spec = importlib.util.spec_from_file_location("_ws_launch", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _build_and_load(path):
    try:
        error = "" if os.path.isfile(path) else _build(path)
        _STATE["module" if not error else "error"] = _load(path) if not error else error
    except Exception as exc:   # a broken compiler or cache file: the ctypes call instead
        _STATE["error"] = f"{type(exc).__name__}: {exc}"


def start():
    """Begin building (or loading) the extension on a background thread, once per
    process; a no-op when it is loaded, failed, or switched off."""
    with _LOCK:
        if _STATE or knobs.native_launch() == "0" or (
                compiler() is None and not os.path.isfile(library_path())):
            return
        thread = _STATE["thread"] = threading.Thread(
            target=_build_and_load, args=(library_path(),), daemon=True,
            name="numba_ws native launcher build")
        thread.start()


def module(wait=0.0):
    """The loaded extension, or None (no compiler, the knob is "0", or its build failed
    or is still running after ``wait`` seconds). A cached build loads at once; a launch
    never waits for a build (a kernel loaded meanwhile launches through ctypes)."""
    if knobs.native_launch() == "0":
        return None
    if "module" in _STATE:
        return _STATE["module"]
    if not _STATE and os.path.isfile(library_path()):
        _build_and_load(library_path())
    start()
    thread = _STATE.get("thread")
    if thread is not None:
        thread.join(wait)
    return _STATE.get("module")


def build_error():
    """Why there is no extension ("" when there is one or its build has not finished)."""
    return _STATE.get("error", "")


def binder(call):
    """``(bind, launch_bound)`` of the extension when ``call`` is its ``launch``, else None
    (a ctypes call): ``bind(handle, threads, smem, params, extra, pack_into, buffer,
    errors, env, keys)`` makes a bound entry for the calling thread;
    ``launch_bound(bound, gx, gy, gz, stream, *values)`` launches it."""
    mod = _STATE.get("module")
    if mod is None or call is not mod.launch:
        return None
    return mod.bind, mod.launch_bound


def entry(address, wait=0.0):
    """The extension's ``launch`` calling the ``cuLaunchKernel`` at ``address``, or None.
    One process has one driver, so the address is set once and never changes."""
    mod = module(wait)
    if mod is None:
        return None
    if _STATE.get("entry") != address:
        mod.set_entry(address)
        _STATE["entry"] = address
    return mod.launch
