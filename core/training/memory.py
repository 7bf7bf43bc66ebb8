"""Keeping a CPU run's resident memory from creeping up step after step.

Both measures are process-wide side effects, so the trainer calls them at its edges: the
cache cap once before the models load, the trim once at the end of every step.
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any


@functools.cache
def malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None where the C library has none (macOS, musl)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None


#: oneDNN primitives kept for reuse (its default is 1,024). See :func:`cap_onednn_cache`.
ONEDNN_CACHE_CAPACITY = 256


def cap_onednn_cache() -> None:
    """Keep fewer compiled oneDNN primitives than oneDNN's default, unless the user chose.

    On a CPU, bfloat16 matmuls run through oneDNN, which compiles a primitive per shape and
    caches 1,024 of them at about 0.4 MB each. A step's token count sets the shapes, so each
    step adds new ones and few are used again: a bfloat16 hour's resident memory grew by GBs
    until the cache was full. 256 still holds every shape a step reuses (its layers repeat
    the same few), so steps were no slower. oneDNN reads the variable when it builds its
    cache, at the first primitive, so this must run before the models load.
    """
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_CACHE_CAPACITY))


def return_freed_memory() -> None:
    """Hand the heap pages that a step freed back to the OS (glibc).

    A step allocates and frees activations whose sizes change with every batch; glibc keeps
    the freed pages and reuses few of them, so on a CPU the process's resident memory crept up
    step after step. One ``malloc_trim(0)`` per step returns them (a fraction of a
    millisecond). With :func:`cap_onednn_cache`, the SmolLM2 example's peak RSS at step 24
    in bfloat16 fell from 6,185 to 5,263 MiB, and its steps were not slower
    (docs/performance/how-a-step-stays-fast.md).
    """
    trim = malloc_trim()
    if trim is not None:
        trim(0)
