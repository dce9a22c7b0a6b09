"""Handing a finished stage's memory back to the system.

The pipeline runs SFT, GRPO (with one process) and the evaluations in its own process, one after
another. Freeing a model's tensors returns their memory to glibc's heap, not to the system, and
`gc.collect()` alone frees little more: kept, that heap is memory the seeds' child processes
beside it cannot have (the numbers: CHANGELOG.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def release_freed_memory() -> None:
    """Collects what only reference cycles still hold (a trainer and its callbacks hold each
    other), then hands the heap's free pages back to the system."""
    gc.collect()
    if _TRIM is not None:
        _TRIM(0)


def returns_memory(stage: Callable[P, R]) -> Callable[P, R]:
    """`stage`, releasing what it freed once it has returned (or raised): its frame, and the
    model its locals held, are gone by then."""

    @functools.wraps(stage)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return stage(*args, **kwargs)
        finally:
            release_freed_memory()

    return run
