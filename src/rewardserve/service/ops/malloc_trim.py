"""Giving freed memory back to the operating system.

Every batch allocates activations of a new shape; glibc keeps the freed blocks in its
heaps, fragmented, and the process's RSS creeps up for hours (bench/soak.py shows it).
``malloc_trim(0)`` after a batch, at most every ``malloc_trim_seconds``, with oneDNN's
primitive cache capped (cli/main.py), keeps it flat; each trim costs the next batch its
page faults again, hence not after every batch, and ``keep_activation_memory`` beside it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import threading
import time


def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None
    except OSError:  # glibc only; elsewhere these stay off
        return None


# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_activation_memory() -> bool:
    """Serve tensors below 32 MB from malloc's heaps and keep freed heap memory mapped.

    glibc maps each allocation above its mmap threshold fresh and unmaps it on free, and
    gives back heap tops over 128 KB; a forward pass allocates a new activation tensor
    for nearly every op, so each one page-faults its memory in again, and a large share
    of the CPU time goes to the kernel. The periodic ``malloc_trim`` below still hands
    back what stays free."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30))


class MallocTrim:
    def __init__(self, interval_s: float):
        self.interval_s = interval_s
        self._last = 0.0
        self._lock = threading.Lock()
        libc = _glibc() if interval_s > 0 else None
        self._trim = libc.malloc_trim if libc is not None else None

    def __call__(self) -> None:
        if self._trim is None:
            return
        now = time.monotonic()
        with self._lock:
            if now - self._last < self.interval_s:
                return
            self._last = now
        self._trim(0)


def freeze_loaded_objects() -> int:
    """Move every object alive now (the models' modules, compiled graphs, tokenizers)
    out of the garbage collector's reach, as vLLM does after its start-up.

    A full collection walks every tracked object; with compiled models loaded that stops
    the process for a long pause, several times a minute under load. Frozen objects are
    still freed by reference counting; only cycles among them stay.
    Returns how many objects are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
