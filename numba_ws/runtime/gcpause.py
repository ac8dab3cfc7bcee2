"""Python's cyclic garbage collector paused over a compile.

A GEMM compile allocates ~2 million short-lived objects (Numba IR, llvmlite IR of
128-float accumulators) on top of a heap of a few hundred thousand long-lived ones
(numba-cuda's registries), so generation-2 collections triggered by those allocations
walk the whole heap again and again: on the 2-core CPU VM (2026-12-04) a second GEMM
specialization compiled to PTX in 0.92-1.10 s with the collector and 0.70-0.76 s
without. Nothing a compile allocates needs collecting before it ends; what became cyclic
garbage is collected by the next automatic collection after it.
"""
import contextlib
import gc


@contextlib.contextmanager
def collector_paused():
    """Disable the cyclic collector inside the block (nesting and threads: it is enabled
    again only by the block that disabled it, and only if it was enabled before)."""
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
