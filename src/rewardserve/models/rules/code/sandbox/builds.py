"""Compiled completions kept by a rule worker, so that a program sent again (a GRPO
group's samples repeat; an RL run grades the same solution across epochs) is compiled
once: its build goes into the sandbox in place of the compiler's run.

A build is keyed by the language, the compiler (its file's identity: a package upgrade
changes it), the driver's text (the compilers' flags are there) and the hash of the
source. Only the compile step fills an entry: the driver reads the compiler's outputs
after the compiler exits and before any test of that completion runs, so a program
cannot write into its own build, and a source's build is found by that source's hash
alone, never another program's.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
from collections import OrderedDict

from rewardserve.models.rules.code.sandbox.command import driver_source

Build = dict[str, tuple[int, bytes]]  # a path under the working folder: its mode and bytes

# The compilers' files, whose identity is in each key (the driver names the paths).
COMPILER_FILES = {
    "cpp": "/usr/bin/g++",
    "java": "/usr/lib/jvm/default-java/bin/javac",
    "javascript": "/usr/bin/node",
    "go": "/usr/bin/go",
    "rust": "/usr/bin/rustc",
}


@functools.cache
def _driver_hash() -> str:
    return hashlib.sha256(driver_source().encode()).hexdigest()


def key(language: str, code: str) -> str | None:
    """The cache key of ``code``'s build, or None where the compiler is not here."""
    try:
        found = os.stat(os.path.realpath(COMPILER_FILES[language]))
    except (KeyError, OSError):
        return None
    compiler = f"{found.st_dev}:{found.st_ino}:{found.st_size}:{found.st_mtime_ns}"
    source = hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{language}\0{compiler}\0{_driver_hash()}\0{source}"


class Builds:
    """The builds of one process, least recently used dropped past ``max_bytes``."""

    def __init__(self, max_bytes: int = 256 << 20, max_build_bytes: int = 32 << 20):
        self.max_bytes = max_bytes
        self.max_build_bytes = max_build_bytes
        self._lock = threading.Lock()
        self._builds: OrderedDict[str, tuple[int, Build]] = OrderedDict()
        self._bytes = 0

    def get(self, build_key: str | None) -> Build | None:
        if build_key is None:
            return None
        with self._lock:
            found = self._builds.get(build_key)
            if found is None:
                return None
            self._builds.move_to_end(build_key)
            return found[1]

    def put(self, build_key: str | None, build: Build) -> None:
        size = sum(len(data) for _, data in build.values())
        if build_key is None or size > self.max_build_bytes:
            return
        with self._lock:
            if build_key in self._builds:
                return
            self._builds[build_key] = (size, build)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (dropped, _) = self._builds.popitem(last=False)
                self._bytes -= dropped


@functools.cache
def builds() -> Builds:
    """This process's builds (a rule worker's: made on its first compiled completion)."""
    return Builds()
