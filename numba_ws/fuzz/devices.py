"""Where a fuzzed program runs, and :func:`run_program`: one complete differential check.

Devices (``--device``):

- ``gpu``: compile for the program's cc (``NUMBA_WS_CC=8.0`` for '8.0') and launch on
  the current CUDA device with CuPy arrays (bfloat16 through torch when it is installed,
  else a CuPy uint16 buffer exposed as bfloat16 through ``__cuda_array_interface__``);
  outputs copied back after ``cudaDeviceSynchronize``. A CUDA error is fatal for the
  worker process (the context is gone): the result says so and the pool restarts it.
- ``sim``: the schedule simulator of ``ws.verify`` runs the partitioned IR (CPU); its
  findings are failures, its outputs are compared like a GPU's.
- ``ptx``: ``kernel.inspect_ptx`` with NumPy stand-ins, then ``ptxas`` for the target
  (CPU): compile errors only, nothing is compared.
- ``interp``: the interpreter itself (everything matches; for tests of the harness).
- ``noisy``: the interpreter with the GPU's legitimate deviations planted at the size the
  error model allows (approximate exp / log, another summation order, exact dots,
  perturbed fp32 products); ``noisy-bug`` also swaps two rows of every stored 2-D tile.
  Tests use them to show the bounds are wide enough and still catch wrong answers.
- ``fault:crash=S1,S2;hang=S3;error=S4``: the interpreter, except that the programs of
  those seeds kill the process, hang, or raise a compile error (tests of the pool).

Outcomes of :func:`run_program`: ``match`` / ``mismatch`` (compared), ``compiled``
(``ptx``), ``compile_error`` (a finding: the interpreter accepts the program),
``unsupported`` (a documented "not on the GPU yet" error, :data:`UNSUPPORTED`),
``resource`` (shared memory / registers over budget), ``interp_error`` /
``analysis_error`` (generator bugs: the interpreter or the error model refused it),
``sim_finding``, ``launch_error`` (the launch refused the compiled kernel's arguments),
``crash`` (a CUDA error, or -- reported by the pool -- a dead process)
and ``timeout`` (the pool killed it).
"""
import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time
import traceback
import warnings

import numpy as np

from .. import knobs
from ..errors import WSResourceError
from . import check
from .program import Program, cut

#: first-line patterns of the compile errors that say "not on the GPU yet" (README,
#: docs/layouts.md): the program is valid, the GPU backend does not take it yet.
UNSUPPORTED = (
    r"has no GPU lowering yet",
    r"has no GPU form yet",
    r"is not supported yet",
    r"cannot load array .* on the GPU",
    r"which only TMA writes for a ws\.dot operand",
    r"must span a multiple of \d+ bytes",
    r"need power-of-two shapes",
    r"needs rows % 64 == 0",
    r"on the GPU needs a floating-point register tile",
    r"tile needs its rows a multiple of 32 bytes",
)
CC = {"9.0a": (9, 0, "a"), "8.0": (8, 0)}


#: a compile that failed because the CUDA context is unusable (not a compile error)
_CONTEXT_GONE = re.compile(r"CUDA_ERROR_(ILLEGAL_ADDRESS|ILLEGAL_INSTRUCTION|LAUNCH_FAILED|"
                           r"ASSERT|CONTEXT_IS_DESTROYED)|cudaError(IllegalAddress|"
                           r"IllegalInstruction|LaunchFailure|Assert)")


def first_line(text):
    """The first line that says something: numba-cuda's wrapper line ("[numba-cuda: ...]
    Failed in ... pipeline (step: ...)") is skipped."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in lines:
        if not re.search(r"Failed in .* pipeline", ln):
            return ln[:300]
    return lines[0][:300] if lines else ""


def classify(exc):
    """(outcome, first informative line) of a compile-time exception."""
    text = str(exc).strip() or type(exc).__name__
    first = first_line(text)
    if isinstance(exc, WSResourceError):
        return "resource", first
    if any(re.search(p, text) for p in UNSUPPORTED):
        return "unsupported", first
    return "compile_error", f"{type(exc).__name__}: {first}"


def signature(result):
    """What must persist for a minimized program to show 'the same failure'."""
    kind = result["outcome"]
    if kind in ("crash", "timeout"):
        return "crash"
    if kind in ("compile_error", "sim_finding"):
        msg = re.sub(r"\b[a-z_]+\d+\b", "V", result.get("message", ""))
        msg = re.sub(r"\((\$?[\w.]+)\)", "(V)", msg)        # variable names in parentheses
        msg = re.sub(r"\d+", "N", msg)
        msg = re.sub(r"\S*\.py:N", "FILE", msg)
        return f"{kind}: {msg[:160]}"
    return kind


@contextlib.contextmanager
def target(program):
    """Launches inside compile for the program's cc (NUMBA_WS_CC for sm_80)."""
    with knobs.scope(NUMBA_WS_CC="8.0" if program.cc == "8.0" else None):
        yield


# -- the devices --------------------------------------------------------------------------

class Interp:
    """The interpreter as a device: outputs equal the reference."""
    name = "interp"

    def info(self):
        return {"device": "interpreter (CPU)"}

    def run(self, launch, ref):
        return {"outputs": {n: b.copy() for n, b in ref.items()}}


class Ptx(Interp):
    """inspect_ptx + ptxas: what compiles, with ptxas's resource report."""
    name = "ptx"

    def __init__(self):
        self.ptxas = shutil.which("ptxas")

    def info(self):
        return {"device": "inspect_ptx + " + (self.ptxas or "no ptxas")}

    def run(self, launch, ref):
        import numba_ws as ws
        p = launch.program
        t0 = time.perf_counter()
        views = launch.views()
        ptx = ws.jit(launch.fn).inspect_ptx(*launch.positional(views), cc=CC[p.cc], **p.meta)
        out = {"compile_s": time.perf_counter() - t0}
        if self.ptxas:
            arch = "sm_90a" if p.cc == "9.0a" else "sm_80"
            with tempfile.TemporaryDirectory() as tmp:
                src = os.path.join(tmp, "k.ptx")
                with open(src, "w") as f:
                    f.write(ptx)
                res = subprocess.run([self.ptxas, f"-arch={arch}", "-v", src, "-o",
                                      os.path.join(tmp, "k.cubin")], capture_output=True,
                                     text=True)
            if res.returncode:
                raise PtxasError(res.stderr.strip().splitlines()[0] if res.stderr else "ptxas")
            m = re.search(r"Used (\d+) registers", res.stderr)
            spills = [int(x) for x in re.findall(r"(\d+) bytes spill", res.stderr)]
            out["ptxas"] = {"registers": int(m.group(1)) if m else None, "spills": spills}
        out["ptxas_s"] = time.perf_counter() - t0 - out["compile_s"]
        return out


class PtxasError(Exception):
    """ptxas rejected the PTX numba_ws produced (a compiler bug)."""


class Sim(Interp):
    """The CPU schedule simulator of ws.verify on the partitioned IR."""
    name = "sim"

    def info(self):
        return {"device": "schedule simulator (CPU)"}

    def run(self, launch, ref):
        import numba_ws as ws
        from ..interpreter.simulator import language_ops, simulate
        from ..runtime.binding import bind
        import itertools
        p = launch.program
        t0 = time.perf_counter()
        state = ws.jit(launch.fn).partition(*launch.positional(launch.views()), cc=CC[p.cc],
                                            **p.meta)
        t1 = time.perf_counter()
        bases = check.fresh_bases(launch)
        views = launch.views(bases)
        args = bind(launch.fn, launch.positional(views), p.meta).args
        pids = list(itertools.product(*(range(n) for n in p.grid)))
        findings, _ = simulate(state, p.grid, args, pids, p.seed, language_ops(exact=False))
        out = {"outputs": {n: bases[n] for n in launch.outputs()}, "compile_s": t1 - t0,
               "run_s": time.perf_counter() - t1}
        if findings:
            out["finding"] = str(list(findings)[0])
        return out


class Gpu(Interp):
    """CuPy (and torch for bfloat16, when installed) on the current CUDA device."""
    name = "gpu"

    def __init__(self):
        import cupy
        self.cp = cupy
        try:
            import torch
            self.torch = torch if torch.cuda.is_available() else None
        except ImportError:
            self.torch = None
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
        self.device = props["name"].decode() if isinstance(props["name"], bytes) \
            else str(props["name"])

    def info(self):
        return {"device": self.device, "bf16": "torch" if self.torch else "cupy uint16 + CAI"}

    def to_device(self, a):
        from .program import np_dtype
        if a.dtype == np_dtype("bfloat16"):
            if self.torch is not None:
                bits = np.ascontiguousarray(a).view(np.int16).copy()
                return self.torch.from_numpy(bits).view(self.torch.bfloat16).to("cuda")
            return Bf16Device(self.cp.asarray(a.view(np.uint16)))
        return self.cp.asarray(a)

    def to_host(self, d):
        from .program import np_dtype
        if isinstance(d, Bf16Device):
            return self.cp.asnumpy(d.u16).view(np_dtype("bfloat16"))
        if self.torch is not None and isinstance(d, self.torch.Tensor):
            return d.view(self.torch.int16).cpu().numpy().view(np_dtype("bfloat16"))
        return self.cp.asnumpy(d)

    def run(self, launch, ref):
        import numba_ws as ws
        p = launch.program
        dev = {n: self.to_device(b) for n, b in launch.bases.items()}
        views = {n: cut(dev[n], launch.recipes[n]) for n in dev}
        args = launch.positional(views)
        kernel = ws.jit(launch.fn)
        with target(p):
            t0 = time.perf_counter()
            try:
                compile_only(kernel, args, p.meta)
            except Exception as e:           # a CUDA context an earlier launch broke
                if _CONTEXT_GONE.search(str(e)):
                    raise DeviceFault(f"{type(e).__name__}: {first_line(str(e))}") from None
                raise
            t1 = time.perf_counter()
            from ..runtime.launcher import CudaDriverError
            try:
                kernel[p.grid](*args, **p.meta)
            except CudaDriverError as e:     # the CUDA context may be gone: fatal
                raise DeviceFault(f"{type(e).__name__}: {e}") from None
            except Exception as e:
                raise LaunchError(f"{type(e).__name__}: {first_line(str(e))}") from None
            try:
                self.cp.cuda.runtime.deviceSynchronize()
            except Exception as e:           # an illegal address / instruction, a trap
                raise DeviceFault(f"{type(e).__name__}: {e}") from None
            t2 = time.perf_counter()
        return {"outputs": {n: self.to_host(dev[n]) for n in launch.outputs()},
                "compile_s": t1 - t0, "run_s": t2 - t1}


class DeviceFault(Exception):
    """The launch failed on the device; the worker's CUDA context cannot be trusted."""


class LaunchError(Exception):
    """The compiled kernel could not be launched (a host-side error, not a CUDA one)."""


class Bf16Device:
    """A bfloat16 device array without torch: CuPy uint16 storage seen through
    ``__cuda_array_interface__`` with typestr '<V2' and ``.dtype`` bfloat16 (numba_ws's
    interop reads the dtype from ``.dtype`` for 2-byte void types)."""

    def __init__(self, u16):
        from .program import np_dtype
        self.u16, self.dtype, self.shape = u16, np_dtype("bfloat16"), u16.shape

    @property
    def __cuda_array_interface__(self):
        cai = dict(self.u16.__cuda_array_interface__)
        cai["typestr"] = "<V2"
        cai["descr"] = [("", "<V2")]
        return cai

    def __getitem__(self, index):
        return Bf16Device(self.u16[index])

    @property
    def T(self):
        return Bf16Device(self.u16.T)


def compile_only(kernel, args, meta):
    """Compile (or find) the launch's specialization without launching, so compile
    errors and compile time are told apart from launch failures. Falls back to nothing
    (the launch compiles) if the runtime's internals differ."""
    try:
        from ..runtime.binding import bind
        from ..runtime.jit import _device_cc
        bound = bind(kernel.fn, args, meta)
        described = kernel._describe(bound)
        specialize = kernel.specialize
    except (ImportError, AttributeError):
        return
    specialize(bound, described, _device_cc())


class Noisy(Interp):
    """The interpreter with deviations the error model allows planted (``bug``: and a
    wrong answer: two rows of every stored 2-D tile swapped)."""
    name = "noisy"

    def __init__(self, bug=False):
        self.bug = bug

    def info(self):
        return {"device": "noisy interpreter" + (" with a planted bug" if self.bug else "")}

    def run(self, launch, ref):
        from ..interpreter.run import with_device_functions_mapped
        from ..verify_api import _Reference
        import itertools
        p = launch.program
        rng = np.random.default_rng(p.seed)
        table = noisy_table(rng, self.bug)
        bases = check.fresh_bases(launch)
        views = launch.views(bases)
        interp = _Reference(p.grid, table)
        fn = with_device_functions_mapped(launch.fn)
        args = dict(zip([a.name for a in p.arrays] + list(p.scalars), launch.positional(views)))
        args.update(p.constexprs)
        for pid in itertools.product(*(range(n) for n in p.grid)):
            with interp.program(pid), np.errstate(all="ignore"):
                fn(**args)
        return {"outputs": {n: bases[n] for n in launch.outputs()}}


def noisy_table(rng, bug):
    """INTERPRET with planted legitimate deviations (see :class:`Noisy`)."""
    from ..interpreter import ops
    table = dict(ops.INTERPRET)
    f32 = np.float32

    def perturb(x, rel):
        x = np.asarray(x)
        return (x.astype(np.float64) * (1.0 + rng.uniform(-rel, rel, x.shape)))

    def approx(name, rel):
        def rule(x):
            name_dt = ops._dtype_name(np.asarray(x))
            if name_dt == "float64":
                return ops.INTERPRET[name](x)
            x32 = np.asarray(x).astype(f32)
            with np.errstate(all="ignore"):
                exact = getattr(np, {"exp": "exp", "exp2": "exp2", "log": "log"}[name])(
                    x32.astype(np.float64))
                r = rel if name != "log" else 2.0 ** -22 / np.maximum(np.abs(exact), 1e-30)
                out = perturb(exact, np.minimum(r, 2.0 ** -23 * 2)).astype(f32)
            return ops._cast(out, np.asarray(x).dtype)
        return rule

    table["exp"] = approx("exp", 2.0 ** -22)
    table["exp2"] = approx("exp2", 2.0 ** -22)
    table["log"] = approx("log", 2.0 ** -22)

    def exact_sum(x, axis, *rest, **kw):
        out = ops.INTERPRET["sum"](x, axis, *rest, **kw)
        if out.dtype.kind == "f":
            wide = np.sum(np.asarray(x).astype(np.float64), axis=axis,
                          keepdims=out.ndim == np.asarray(x).ndim)
            return ops._cast(wide.reshape(out.shape), out.dtype)
        return out
    table["sum"] = exact_sum

    def exact_dot(a, b, acc=None):
        out = np.asarray(a).astype(np.float64) @ np.asarray(b).astype(np.float64)
        if acc is not None:
            out = out + acc.astype(np.float64)
        return out.astype(f32)
    table["dot"] = exact_dot

    def mul(a, b):
        out = ops.INTERPRET["mul"](a, b)
        if isinstance(out, np.ndarray) and out.dtype in (np.float32,) and \
                isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
            return perturb(out, 2.0 ** -24).astype(out.dtype)
        return out
    table["mul"] = mul
    if bug:
        def store(array, offsets, tile, mask=None):
            if isinstance(tile, np.ndarray) and tile.ndim == 2 and tile.shape[0] > 1:
                tile = tile.copy()
                tile[[0, 1]] = tile[[1, 0]]
            return ops.INTERPRET["store"](array, offsets, tile, mask)
        table["store"] = store
    return table


class Fault(Interp):
    """The interpreter, except for planted faults by seed (tests of the pool)."""
    name = "fault"

    def __init__(self, spec):
        self.faults = {}
        for part in filter(None, spec.split(";")):
            kind, _, seeds = part.partition("=")
            for s in filter(None, seeds.split(",")):
                self.faults[int(s)] = kind

    def run(self, launch, ref):
        kind = self.faults.get(launch.program.seed)
        if kind == "crash":
            os._exit(3)
        if kind == "hang":
            time.sleep(10 ** 6)
        if kind == "error":
            raise RuntimeError("planted compile error")
        return super().run(launch, ref)


def make_device(spec):
    if spec == "gpu":
        return Gpu()
    if spec == "sim":
        return Sim()
    if spec == "ptx":
        return Ptx()
    if spec == "interp":
        return Interp()
    if spec in ("noisy", "noisy-bug"):
        return Noisy(bug=spec == "noisy-bug")
    if spec.startswith("fault:"):
        return Fault(spec[len("fault:"):])
    raise ValueError(f"unknown device {spec!r}: gpu, sim, ptx, interp, noisy, noisy-bug, "
                     "fault:crash=..;hang=..;error=..")


# -- one check ------------------------------------------------------------------------------

def run_program(program, device, folder, data_seed=None):
    """Reference, bounds, the device's run and the comparison of one program: a
    JSON-able dict with ``outcome``, ``message`` and details (see the module doc)."""
    if isinstance(program, dict):
        program = Program.from_dict(program)
    data_seed = program.seed if data_seed is None else data_seed
    out = {"seed": program.seed, "family": program.family, "cc": program.cc,
           "options": program.options, "notes": list(program.notes)}
    t0 = time.perf_counter()
    try:
        launch = check.prepare(program, data_seed, folder)
        ref = check.reference(launch)
    except Exception as e:
        return {**out, "outcome": "interp_error", "message": _exc_line(e),
                "traceback": _tail()}
    try:
        tol = check.error_bounds(launch)
    except Exception as e:
        return {**out, "outcome": "analysis_error", "message": _exc_line(e),
                "traceback": _tail()}
    out["reference_s"] = time.perf_counter() - t0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            res = device.run(launch, ref)
        except DeviceFault as e:
            return {**out, "outcome": "crash", "message": str(e)[:500], "fatal": True}
        except PtxasError as e:
            return {**out, "outcome": "compile_error", "message": f"ptxas: {e}"}
        except LaunchError as e:
            return {**out, "outcome": "launch_error", "message": str(e)[:500],
                    "traceback": _tail()}
        except Exception as e:
            kind, line = classify(e)
            return {**out, "outcome": kind, "message": line, "traceback": _tail(),
                    "warnings": _warned(caught)}
    out.update({k: v for k, v in res.items() if k != "outputs"})
    out["warnings"] = _warned(caught)
    if "finding" in res:
        return {**out, "outcome": "sim_finding", "message": res["finding"][:500]}
    if "outputs" not in res:
        return {**out, "outcome": "compiled"}
    cmp = check.compare(launch, ref, res["outputs"], tol)
    out["compare"] = cmp["outputs"]
    if cmp["ok"]:
        return {**out, "outcome": "match"}
    return {**out, "outcome": "mismatch", "message": "; ".join(check.describe_mismatch(cmp))}


def _exc_line(e):
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


def _tail():
    return traceback.format_exc()[-2000:]


def _warned(caught):
    return sorted({str(w.message).splitlines()[0][:200] for w in caught})
