"""A memory cgroup per code sandbox, where this host lets the service make one (a cgroup
v1 memory hierarchy it may write; on cgroup v2 a delegated subtree is not looked for):
every process of the sandbox, and the tmpfs it writes, under one limit. The address-space
rlimit alone holds per process, and a test may fork up to its process limit, each with
its own allowance.

The sandbox's first process joins its cgroup before it starts anything (``enter``), so
nothing it forks is outside. A test the kernel's OOM killer ends there is an MLE.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
import time
from pathlib import Path

V1 = Path("/sys/fs/cgroup/memory")
DRIVER_BYTES = 64 << 20  # the driver's own interpreter, beside a test's allowance
_numbers = itertools.count()
_making = threading.Lock()  # held while a process makes its folder of sandbox cgroups


def _parent() -> Path | None:
    """This process's folder of sandbox cgroups (made on first use), or None where the
    host gives no writable memory cgroup. Per process: a forked rule worker makes its own."""
    with _making:  # a process's threads start sandboxes at once: one of them makes it
        return _parent_of(os.getpid())


@functools.cache
def _parent_of(pid: int) -> Path | None:
    own = own_memory_cgroup()
    if own is None:
        return None
    _sweep(own)
    folder = own / f"rewardserve-{pid}"
    try:
        folder.mkdir(exist_ok=True)
    except OSError:
        return None
    return folder


def own_memory_cgroup() -> Path | None:
    """The v1 memory cgroup this process is in, where it may write there; else None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            own = V1 / path.lstrip("/")
            if not (own / "memory.limit_in_bytes").exists() or not os.access(own, os.W_OK):
                return None
            return own
    return None


def _sweep(own: Path) -> None:
    """The empty cgroups of processes gone (a rule worker killed at its time limit)."""
    for folder in own.glob("rewardserve-*"):
        pid = folder.name.removeprefix("rewardserve-")
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            try:
                inners = [*folder.glob("sandbox-*"), folder]
            except OSError:  # another process swept it first (each rule worker sweeps)
                continue
            for inner in inners:
                try:
                    inner.rmdir()
                except OSError:
                    pass


def available() -> bool:
    return _parent() is not None


class MemoryCgroup:
    """One sandbox's cgroup: its limit set before each completion, its OOM kills counted."""

    def __init__(self, owner: int | None):
        parent = _parent()
        assert parent is not None, "check available() first"
        self.path = parent / f"sandbox-{next(_numbers)}"
        self.path.mkdir()
        self._limit: str | None = None
        if owner is not None:  # the sandbox runs as this user, and moves itself in
            os.chown(self.path / "cgroup.procs", owner, owner)

    @property
    def procs(self) -> str:
        return str(self.path / "cgroup.procs")

    def limit(self, test_bytes: int, workdir_bytes: int) -> None:
        """The whole sandbox's memory: a test's allowance, its files' tmpfs and the driver;
        swap too, where the host accounts for it (never below the memory limit)."""
        value = str(test_bytes + workdir_bytes + DRIVER_BYTES)
        if value == self._limit:  # as the last completion's: nothing to write
            return
        names = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
        if not (self.path / names[1]).exists():
            names.pop()
        try:
            for name in names:
                (self.path / name).write_text(value)
        except OSError:  # raising it: the swap limit first
            for name in reversed(names):
                (self.path / name).write_text(value)
        self._limit = value

    def oom_kills(self) -> int:
        for line in (self.path / "memory.oom_control").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def remove(self) -> None:
        """Gone once its processes are (they die with the sandbox's init)."""
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)


# Run by /bin/sh before anything else of the sandbox: it moves itself into the cgroup
# named by its first argument, then runs the rest.
ENTER = 'echo $$ > "$1" && shift && exec "$@"'


def enter(procs: str, command: list[str]) -> list[str]:
    return ["/bin/sh", "-c", ENTER, "sh", procs, *command]
