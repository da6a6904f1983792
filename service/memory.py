"""Giving freed memory back to the operating system.

Every batch allocates activations of a new shape; glibc keeps the freed blocks in its
heaps, fragmented, and the process's RSS creeps up for hours. Measured with bench/soak.py
(10 minutes at 80% of capacity, RSS as the mean of the first and of the last minute):
+18.8% without trimming; with ``malloc_trim(0)`` at most once a second after a batch
(a few ms) and oneDNN's primitive cache capped (service/cli.py), -2.8%.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time


class MallocTrim:
    def __init__(self, interval_s: float):
        self.interval_s = interval_s
        self._last = 0.0
        self._lock = threading.Lock()
        self._trim = None
        if interval_s > 0:
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                self._trim = libc.malloc_trim  # glibc only; elsewhere this stays off
            except (OSError, AttributeError):
                self._trim = None

    def __call__(self) -> None:
        if self._trim is None:
            return
        now = time.monotonic()
        with self._lock:
            if now - self._last < self.interval_s:
                return
            self._last = now
        self._trim(0)
