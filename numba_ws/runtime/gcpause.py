"""Python's cyclic garbage collector paused over a compile.

A compile allocates container objects fast (Numba IR, llvmlite IR: a second 128x256 GEMM
specialization triggered 109 generation-0 and 9 generation-1 collections on the CPU VM,
2026-12-04, with ~346 000 tracked objects alive after the first compile), and each
collection traverses the young objects' references, large IR lists included. On that VM
the second specialization compiled to PTX in 0.92-1.03 s with the collector and
0.76-0.85 s without (a cProfile had charged 0.18 s of collector pauses to a trivial
llvmlite property). Nothing a compile allocates needs collecting before it ends; what
became cyclic garbage is collected by the next automatic collection after it.
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
