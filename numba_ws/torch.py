"""numba_ws kernels as PyTorch operators, for ``torch.compile`` (needs PyTorch >= 2.4).

``custom_op(name, launch_fn, mutates_args=..., fake=...)`` registers a *launch wrapper* —
a Python function taking and returning torch tensors that launches numba_ws kernels
(``kernel[grid](...)``) — as the ``torch.library.custom_op`` ``name``, with a fake
(meta) implementation. Dynamo then records one opaque call instead of tracing into
numba_ws (which it cannot: the launch reads raw pointers), so a module calling the op
compiles with ``torch.compile(fullgraph=True)`` without a graph break; Inductor and
AOTAutograd compute the outputs' shapes, dtypes and devices with the fake.

Invariants:

- the wrapper's parameters and return value carry type annotations (``torch.Tensor``,
  ``int``, ``float``, ``bool``, ``Optional[...]``, ``list[torch.Tensor]``; ``-> None``
  for a wrapper that only writes into arguments): torch reads the operator's schema
  from them;
- ``mutates_args`` names every tensor argument the wrapper writes (``()`` when it only
  returns new tensors), as torch requires;
- ``fake(*args)`` takes the wrapper's arguments and returns tensors of the outputs'
  shapes, dtypes and devices, made with ``new_empty`` / ``empty_like`` and never reading
  their values. A wrapper annotated ``-> None`` needs none: its fake does nothing;
- launches follow torch's current stream: numba_ws launches on
  ``torch.cuda.current_stream(tensor.device)`` of the first CUDA tensor argument, on every
  launch (the fast path included), so the op runs where Inductor and
  ``torch.cuda.stream(...)`` contexts put the surrounding work; CPU tensors run in the
  interpreter.

This module imports torch: import it as ``numba_ws.torch`` only where torch is
installed (``pip install "numba_ws[torch]"``); ``import numba_ws`` never imports it.
"""
import functools
import inspect
import keyword

try:
    import torch
except ImportError as e:   # pragma: no cover - exercised only without torch
    raise ImportError("numba_ws.torch needs PyTorch: pip install 'numba_ws[torch]' "
                      "(or any torch >= 2.4)") from e

from .errors import WSUsageError

__all__ = ["custom_op"]


def _check_name(name):
    """``"namespace::op"`` with two identifiers, as torch.library requires."""
    parts = name.split("::") if isinstance(name, str) else []
    if len(parts) != 2 or not all(p.isidentifier() and not keyword.iskeyword(p)
                                  for p in parts):
        raise WSUsageError(f"custom_op(name={name!r}): the name must be 'namespace::op' "
                           "with two Python identifiers, e.g. 'mylib::gemm_bias_relu'")


def _check_signature(name, launch_fn, mutates_args):
    """Every parameter and the return value annotated; ``mutates_args`` names parameters."""
    if not callable(launch_fn):
        raise WSUsageError(f"custom_op({name!r}): launch_fn must be a function, got "
                           f"{launch_fn!r}")
    try:   # string annotations (``from __future__ import annotations``) evaluated
        sig = inspect.signature(launch_fn, eval_str=True)
    except NameError:
        sig = inspect.signature(launch_fn)
    where = f"custom_op({name!r}): {getattr(launch_fn, '__qualname__', launch_fn)}"
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise WSUsageError(f"{where}: parameter {p.name!r} is variadic; a torch operator "
                               "has a fixed list of parameters")
        if p.annotation is p.empty:
            raise WSUsageError(f"{where}: parameter {p.name!r} has no type annotation (write "
                               f"'{p.name}: torch.Tensor', 'int', 'float', ...): torch reads "
                               "the operator's schema from the annotations")
    if sig.return_annotation is sig.empty:
        raise WSUsageError(f"{where}: no return annotation (write '-> torch.Tensor', "
                           "'-> tuple[torch.Tensor, torch.Tensor]', or '-> None' for a "
                           "wrapper that writes into its arguments)")
    if mutates_args != "unknown":
        if isinstance(mutates_args, str):
            raise WSUsageError(f"{where}: mutates_args={mutates_args!r} must be a tuple of "
                               f"parameter names, e.g. ({mutates_args!r},)")
        unknown = [m for m in mutates_args if m not in sig.parameters]
        if unknown:
            raise WSUsageError(f"{where}: mutates_args names {unknown}, which are not "
                               f"parameters (parameters: {list(sig.parameters)})")
    return sig


def _nothing(*args, **kwargs):
    """Fake of a wrapper that only writes into its arguments: no outputs to describe."""
    return None


def custom_op(name, launch_fn=None, *, mutates_args, fake=None, device_types=None):
    """Register ``launch_fn`` as the torch operator ``name`` (see the module docstring).

    ``name``: ``"namespace::op"``; ``mutates_args``: the tensor parameters the wrapper
    writes (``()`` if none); ``fake``: the outputs' shapes/dtypes from the arguments
    (optional when ``launch_fn`` is annotated ``-> None``); ``device_types``: restrict the
    implementation to ``"cuda"`` / ``"cpu"`` (default: both; CPU tensors run in the
    interpreter). Returns torch's ``CustomOpDef``: call it like ``launch_fn``; it also has
    ``register_fake`` and ``register_autograd``. Without ``launch_fn``, returns a decorator.
    """
    if launch_fn is None:
        return functools.partial(custom_op, name, mutates_args=mutates_args, fake=fake,
                                 device_types=device_types)
    _check_name(name)
    sig = _check_signature(name, launch_fn, mutates_args)
    if fake is None:
        if sig.return_annotation not in (None, type(None), "None"):
            raise WSUsageError(
                f"custom_op({name!r}): {launch_fn.__qualname__} returns "
                f"{getattr(sig.return_annotation, '__name__', sig.return_annotation)}, so "
                "torch.compile needs the outputs' shapes and dtypes without running it: "
                "pass fake=<function of the same arguments returning empty tensors>, e.g. "
                "fake=lambda a, b: a.new_empty((a.shape[0], b.shape[1]))")
        fake = _nothing
    elif not callable(fake):
        raise WSUsageError(f"custom_op({name!r}): fake must be a function, got {fake!r}")
    op = torch.library.custom_op(name, launch_fn, mutates_args=mutates_args,
                                 device_types=device_types)
    op.register_fake(fake)
    return op
