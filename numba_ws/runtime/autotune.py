"""``@numba_ws.autotune``: pick the fastest :class:`Config` per key, like ``triton.autotune``.

On a key miss the tuner (1) applies ``prune_configs_by``, (2) drops every config that
cannot fit, recording each reason: the register split (``register_split``), then for GPU
launches the whole compile (``Kernel.compile_ahead``: ptxas of each config starts in the
background while the next compiles), else the partitioned program's static checks
(``kernel.partition``: shared memory, tile shapes), (3) times the rest with CUDA events
(median of ``rep`` launches after ``warmup``) or with ``do_bench``. Timing runs the kernel on the caller's arrays, so
outputs are overwritten (as in Triton). In interpreter mode without ``do_bench`` nothing is
timed: the first config that fits wins. The winner is cached in memory per key and on disk
(``runtime/cache.py``), so another process with the same kernel, configs and key skips tuning.
"""
import inspect
import re
import statistics
import sys
import time

from .. import knobs
from ..errors import WSCompileError, WSError, WSUsageError
from . import cache, interop
from .binding import RESERVED, bind
from .interop import is_array
from .jit import Kernel, Launchable, _device_cc, jit
from .options import Options

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Config:
    """One candidate: constexpr ``kwargs`` plus warp-specialization ``options``."""

    def __init__(self, kwargs, *options, **named_options):
        """``options`` / ``named_options``: :class:`Options` fields, positionally in
        their declaration order (num_consumer_groups, num_buffers_warp_spec, ...) or by
        name; unset ones keep Options' defaults."""
        if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
            raise WSUsageError(f"Config(kwargs): expected a dict of constexpr names to "
                               f"values, got {kwargs!r}")
        clash = sorted(set(kwargs) & RESERVED)
        if clash:
            raise WSUsageError(f"Config kwargs {clash} are launch options: pass them as "
                               f"Config(..., {clash[0]}=...)")
        self.kwargs = dict(kwargs)
        if len(options) > len(Options.names()):
            raise WSUsageError(f"Config: {len(options)} positional options, Options has "
                               f"{len(Options.names())} ({', '.join(Options.names())})")
        unknown = sorted(set(named_options) - set(Options.names()))
        if unknown:
            raise WSUsageError(f"Config: unknown option {unknown[0]!r}; the options are "
                               f"{', '.join(Options.names())}")
        try:
            self.options = Options(*options, **named_options)
        except TypeError as exc:      # an option given both positionally and by name
            raise WSUsageError(f"Config: {exc}") from None

    def all_kwargs(self):
        """Constexprs and options together: what a launch receives."""
        return {**self.kwargs, **self.options.as_dict()}

    def _ident(self):
        return tuple(sorted((k, repr(v)) for k, v in self.kwargs.items())), self.options

    def __eq__(self, other):
        return isinstance(other, Config) and self._ident() == other._ident()

    def __hash__(self):
        return hash(self._ident())

    def __repr__(self):
        opts = ", ".join(f"{k}={v}" for k, v in self.options.as_dict().items())
        return f"Config({self.kwargs!r}, {opts})"

    def __str__(self):
        return " ".join(f"{k}={v}" for k, v in self.all_kwargs().items())


def _reason(exc):
    """First line of an error message, without terminal colours."""
    return _ANSI.sub("", str(exc)).strip().splitlines()[0]


def _key_value(name, v):
    """A hashable, cache-keyable stand-in: arrays by (shape, dtype, strides)."""
    if is_array(v):
        try:
            d = interop.describe(v, name)
            return ("array", tuple(d.shape), d.dtype.name, tuple(d.strides))
        except WSUsageError:
            return ("array", tuple(getattr(v, "shape", ())), str(getattr(v, "dtype", "?")))
    if hasattr(v, "item") and callable(v.item) and getattr(v, "ndim", None) == 0:
        v = v.item()                                     # NumPy scalars
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return repr(v)


class _Events:
    """CUDA events on the launch stream: CuPy's, else torch's, else Numba's."""

    def __init__(self, handle):
        try:
            import cupy as cp
            stream = cp.cuda.ExternalStream(handle)
            self.new = cp.cuda.Event
            self.elapsed = cp.cuda.get_elapsed_time
        except ImportError:
            try:
                import torch
                stream = (torch.cuda.ExternalStream(handle) if handle
                          else torch.cuda.default_stream())
                self.new = lambda: torch.cuda.Event(enable_timing=True)
                self.elapsed = lambda s, e: s.elapsed_time(e)
            except ImportError:
                from numba import cuda
                stream = cuda.external_stream(handle) if handle else cuda.default_stream()
                self.new = lambda: cuda.event(timing=True)
                self.elapsed = cuda.event_elapsed_time
        self.record = lambda e: e.record(stream)


def median_time(fn, warmup, rep, events):
    """Median ms of ``rep`` calls of ``fn`` after ``warmup`` calls, each between 2 events."""
    for _ in range(warmup):
        fn()
    pairs = []
    for _ in range(rep):
        start, end = events.new(), events.new()
        events.record(start)
        fn()
        events.record(end)
        pairs.append((start, end))
    pairs[-1][1].synchronize()
    return statistics.median(events.elapsed(s, e) for s, e in pairs)


class Autotuner(Launchable):
    """A tuned kernel: ``tuner[grid](*args, **meta)`` launches the best config for the key.

    ``best_config``: the config of the latest launch; ``configs_timings``: ms per config of
    the latest tuning; ``pruned``: why each dropped config of the latest tuning was dropped.
    """

    def __init__(self, kernel, configs, key, prune_configs_by=None, warmup=25, rep=100,
                 do_bench=None):
        self.kernel = kernel if isinstance(kernel, Kernel) else jit(kernel)
        self.fn = self.kernel.fn
        name = self.fn.__name__
        configs = list(configs or [])
        if not configs or not all(isinstance(c, Config) for c in configs):
            raise WSUsageError(f"autotune({name}): configs must be a non-empty list of "
                               f"numba_ws.Config, got {configs!r}")
        self.configs = list(dict.fromkeys(configs))      # drop duplicates, keep order
        self._params = list(inspect.signature(self.fn).parameters.values())
        names = [p.name for p in self._params]
        if isinstance(key, str):
            key = [key]
        unknown = [k for k in list(key) + [k for c in self.configs for k in c.kwargs]
                   if k not in names]
        if unknown:
            raise WSUsageError(f"autotune({name}): {sorted(set(unknown))} are not parameters "
                               f"of {name}({', '.join(names)})")
        self.key = list(key)
        prune = dict(prune_configs_by or {})
        bad = set(prune) - {"early_config_prune", "perf_model", "top_k"}
        if bad:
            raise WSUsageError(f"autotune({name}): prune_configs_by takes early_config_prune, "
                               f"perf_model and top_k, not {sorted(bad)}")
        self.early_config_prune = prune.get("early_config_prune")
        self.perf_model, self.top_k = prune.get("perf_model"), prune.get("top_k")
        for what, v in (("warmup", warmup), ("rep", rep)):
            if not isinstance(v, int) or isinstance(v, bool) or v < (what == "rep"):
                raise WSUsageError(f"autotune({name}): {what}={v!r}, expected an int >= "
                                   f"{int(what == 'rep')}")
        if do_bench is not None and not callable(do_bench):
            raise WSUsageError(f"autotune({name}): do_bench must be callable(fn) -> ms")
        self.warmup, self.rep, self.do_bench = warmup, rep, do_bench
        self.tuned_names = frozenset(k for c in self.configs for k in c.kwargs) | RESERVED
        self.tuned_names -= {"stream"}
        self.cache = {}
        self.best_config = None
        self.configs_timings = {}
        self.pruned = {}

    def __repr__(self):
        return f"<numba_ws autotuner {self.fn.__qualname__} ({len(self.configs)} configs)>"

    def run(self, grid, args, meta):
        clash = sorted(set(meta) & self.tuned_names)
        if clash:
            raise WSUsageError(f"{self.fn.__name__}: {clash} are set by the autotuner's "
                               "configs; do not pass them at launch (put them in ws.Config)")
        key = self.key_of(args, meta)
        config = self.cache.get(key)
        if config is None:
            config = self.cache[key] = self._tune(key, grid, args, meta)
        self.best_config = config
        return self.kernel[grid](*args, **meta, **config.all_kwargs())

    def key_of(self, args, meta):
        """The tuning key: the ``key`` arguments' values, then the non-tuned meta."""
        values = {p.name: p.default for p in self._params if p.default is not p.empty}
        values.update(zip((p.name for p in self._params), args))
        values.update(meta)
        tuned = tuple((k, _key_value(k, values.get(k))) for k in self.key)
        rest = tuple(sorted((k, _key_value(k, v)) for k, v in meta.items()
                            if k not in self.key and k != "stream"))
        return tuned, rest

    # --- tuning ---
    def _progress(self, i, n, config, what):
        sys.stderr.write(f"autotuning {self.fn.__name__} [{i}/{n}] {config} {what}\n")
        sys.stderr.flush()

    def _interpreted(self, args, meta):
        bound = bind(self.fn, args, {**meta, **self.configs[0].all_kwargs()})
        return self.kernel._runs_interpreted(bound)

    def _disk_key(self, key, target, timed):
        try:
            source = inspect.getsource(self.fn)
        except (OSError, TypeError):
            return None                                   # no source: memory cache only
        return cache.key_for(kind="autotune", name=self.fn.__qualname__, source=source,
                             key=key, configs=[repr(c) for c in self.configs],
                             target=target, timed=timed)

    def _load(self, disk_key):
        payload = cache.load(disk_key) if disk_key else None
        if payload is None or not 0 <= payload.get("best", -1) < len(self.configs):
            return None
        self.configs_timings = {self.configs[i]: ms for i, ms in payload["timings"].items()}
        self.pruned = {self.configs[i]: why for i, why in payload["pruned"].items()}
        best = self.configs[payload["best"]]
        if knobs.print_autotuning():
            print(f"autotuning {self.fn.__name__}: cached best config {best} (on disk)")
        return best

    def _candidates(self, args, meta):
        configs = list(self.configs)
        named = {p.name: v for p, v in zip(self._params, args)}
        named.update({k: v for k, v in meta.items() if k != "stream"})
        if self.early_config_prune is not None:
            configs = list(self.early_config_prune(configs, named))
        if self.perf_model is not None and self.top_k:
            top_k = self.top_k if self.top_k >= 1 else max(1, int(len(configs) * self.top_k))
            configs = sorted(configs, key=lambda c: self.perf_model(**named, **c.all_kwargs()))
            configs = configs[:int(top_k)]
        if not configs:
            raise WSUsageError(f"autotune({self.fn.__name__}): prune_configs_by left no config")
        return configs

    def _fits(self, config, args, meta, on_gpu):
        """None if ``config`` fits the hardware budgets, else the reason it does not.
        ``on_gpu``: the configs will be launched on the GPU, so the check is their whole
        compile (``Kernel.compile_ahead``, which also starts ptxas in the background);
        else the partitioned program's checks only."""
        from ..passes.registers import register_split
        try:
            register_split(config.options)
            if on_gpu:
                self.kernel.compile_ahead(args, {**meta, **config.all_kwargs()})
            else:
                self.kernel.partition(*args, **meta, **config.all_kwargs())
        except WSCompileError as e:                       # WSResourceError included
            return _reason(e)
        return None

    def _tune(self, key, grid, args, meta):
        start = time.perf_counter()
        interpreted = self._interpreted(args, meta)
        timed = self.do_bench is not None or not interpreted
        target = "interpreter" if interpreted else list(_device_cc())
        disk_key = self._disk_key(key, target, timed)
        best = self._load(disk_key)
        if best is not None:
            return best
        configs = self._candidates(args, meta)
        self.configs_timings, self.pruned = {}, {}
        n, fitting = len(configs), []
        # Configs are compiled one after another: every Numba compiler pass holds Numba's
        # global compiler lock (and the GIL), so a thread pool measured no faster here.
        # ptxas runs in the background meanwhile (Kernel.compile_ahead), so config i is
        # assembled while config i + 1 compiles, and the timing below compiles nothing.
        for i, config in enumerate(configs, 1):
            why = self._fits(config, args, meta, on_gpu=timed and not interpreted)
            if why is not None:
                self.pruned[config] = why
                self._progress(i, n, config, f"pruned: {why}")
                continue
            fitting.append((i, config))
            if not timed:
                self._progress(i, n, config, "interpreter mode, not timed: using the first "
                               "config that fits")
                break
        if timed:
            bench = self.do_bench or self._gpu_bench(meta, args)
            for i, config in fitting:
                launch = self.kernel[grid]
                kw = {**meta, **config.all_kwargs()}
                try:
                    ms = float(bench(lambda: launch(*args, **kw)))
                except WSCompileError as e:
                    self.pruned[config] = _reason(e)
                    self._progress(i, n, config, f"failed: {self.pruned[config]}")
                    continue
                self.configs_timings[config] = ms
                self._progress(i, n, config, f"{ms:.3f} ms")
        if not fitting or (timed and not self.configs_timings):
            lines = "\n".join(f"  {c}: {why}" for c, why in self.pruned.items())
            raise WSUsageError(f"autotune({self.fn.__name__}): no config fits:\n{lines}")
        if timed:
            best = min(self.configs_timings, key=self.configs_timings.get)
        else:
            best = fitting[0][1]
        total = time.perf_counter() - start
        if knobs.print_autotuning():
            ms = self.configs_timings.get(best)
            when = f"{ms:.3f} ms" if ms is not None else "not timed"
            print(f"autotuning {self.fn.__name__}: best config {best} ({when}); "
                  f"tuning took {total:.2f} s")
        if disk_key:
            index = {c: i for i, c in enumerate(self.configs)}
            cache.store(disk_key, {
                "best": index[best],
                "timings": {index[c]: ms for c, ms in self.configs_timings.items()},
                "pruned": {index[c]: why for c, why in self.pruned.items()}})
        return best

    def _gpu_bench(self, meta, args):
        arrays = [v for v in list(args) + list(meta.values()) if is_array(v)]
        events = _Events(interop.resolve_stream(meta.get("stream"), arrays))
        return lambda fn: median_time(fn, self.warmup, self.rep, events)

    # --- inspection, with the best config so far (else the first) ---
    def _chosen(self):
        return (self.best_config or self.configs[0]).all_kwargs()

    def explain(self, *args, **meta):
        return self.kernel.explain(*args, **meta, **self._chosen())

    def partition(self, *args, **meta):
        return self.kernel.partition(*args, **meta, **self._chosen())

    def inspect_ptx(self, *args, **meta):
        return self.kernel.inspect_ptx(*args, **meta, **self._chosen())


def autotune(configs, key, prune_configs_by=None, warmup=25, rep=100, do_bench=None):
    """Decorator: ``@ws.autotune(configs=[ws.Config(...)], key=["M", "N"])`` over a
    ``ws.jit`` kernel or a plain tile function. ``prune_configs_by``: a dict with
    ``early_config_prune(configs, named_args) -> configs`` and/or ``perf_model(**kwargs)
    -> estimated ms`` with ``top_k`` (a count, or a fraction of the configs).
    ``do_bench(fn) -> ms`` replaces the built-in CUDA-event timer."""
    def decorate(fn):
        if isinstance(fn, Autotuner):
            raise WSUsageError("autotune: the kernel is already autotuned")
        return Autotuner(fn, configs, key, prune_configs_by, warmup, rep, do_bench)
    return decorate
