"""Cgroups per code sandbox, where this host lets the service make them: every process of
the sandbox, and the tmpfs it writes, under one memory limit, and all of its processes
under one CPU bound. The address-space rlimit alone holds per process, and a test may
fork up to its process limit, each with its own allowance; nice and SCHED_IDLE hold per
process too, and a process that calls setsid() gets an autogroup of its own, weighed as a
nice-0 session beside everything else on the host.

cgroup v1 (a memory and a cpu hierarchy this process may write): a folder per rule worker
in each, with a cgroup per sandbox under it (its memory limit; one CPU of quota). For the
CPU the service's first process moves itself into a group of its own (``rewardserve-svc-``:
as much weight as the session it leaves), its rule workers' folders inside at the least
weight: the sandboxes run on what the service leaves of its share, and a task outside the
root cpu cgroup has no autogroup, so a sandbox's own sessions weigh nothing.
cgroup v2 (a delegated subtree: the container's own cgroup, or a systemd unit with
Delegate=yes): the same folders with memory.max, pids.max, cpu.max and cpu.weight, and
memory.events' oom_kill.

The sandbox's first process joins its cgroups before it starts anything (``enter``), so
nothing it forks is outside. A test the kernel's OOM killer ends there is an MLE.
"""

from __future__ import annotations

import errno
import functools
import itertools
import os
import threading
import time
from pathlib import Path

V1 = Path("/sys/fs/cgroup/memory")
CPU_V1 = Path("/sys/fs/cgroup/cpu")
V2 = Path("/sys/fs/cgroup")
V2_CONTROLLERS = ("memory", "pids", "cpu")
DRIVER_BYTES = 64 << 20  # the driver's own interpreter, beside a test's allowance
# A rule worker's sandboxes together, beside the service's own processes (v1 cpu.shares'
# minimum; v2 cpu.weight's): they run on what the service leaves of its share.
LEAST_SHARES = 2
LEAST_WEIGHT = 1
SANDBOX_PROCESSES = 256  # v2 pids.max of a whole sandbox: its driver, worker and tests
_numbers = itertools.count()
_making = threading.Lock()  # held while a process makes its folders of sandbox cgroups


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


def _own(controller: str) -> str | None:
    """This process's cgroup path for ``controller`` (v1), or its v2 path ("" names v2)."""
    for line in _lines(Path("/proc/self/cgroup")):
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path.lstrip("/")
    return None


def own_memory_cgroup() -> Path | None:
    """The v1 memory cgroup this process is in, where it may write there; else None."""
    return _own_v1(V1, "memory", "memory.limit_in_bytes")


def _own_v1(root: Path, controller: str, probe: str) -> Path | None:
    path = _own(controller)
    if path is None:
        return None
    own = root / path
    if not (own / probe).exists() or not os.access(own, os.W_OK):
        return None
    return own


def own_v2_cgroup() -> Path | None:
    """This process's cgroup on a cgroup-v2 host where its subtree is delegated to it:
    writable, with the memory, pids and cpu controllers given to the children it makes."""
    if not (V2 / "cgroup.controllers").exists():
        return None
    path = _own("")
    if path is None:
        return None
    own = V2 / path
    if own.name == "rewardserve-service":  # the leaf _enable_v2 moved the service into
        own = own.parent
    given = " ".join(_lines(own / "cgroup.controllers")).split()
    if not os.access(own, os.W_OK) or not set(V2_CONTROLLERS) <= set(given):
        return None
    return own


def _enable_v2(folder: Path) -> bool:
    """The controllers for ``folder``'s children. A cgroup with processes of its own gives
    none to its children (v2's no-internal-process rule): the service's own cgroup moves
    its processes into a leaf beside the sandboxes' folders first."""
    wanted = " ".join(f"+{name}" for name in V2_CONTROLLERS)
    try:
        (folder / "cgroup.subtree_control").write_text(wanted)
        return True
    except OSError as exc:
        if exc.errno != errno.EBUSY:
            return False
    leaf = folder / "rewardserve-service"
    try:
        leaf.mkdir(exist_ok=True)
        for pid in _lines(folder / "cgroup.procs"):
            try:
                (leaf / "cgroup.procs").write_text(pid)
            except OSError:  # ended since, or a kernel thread
                pass
        (folder / "cgroup.subtree_control").write_text(wanted)
    except OSError:
        return False
    return True


class _Folders:
    """This process's folders of sandbox cgroups, made on first use. Per process: a forked
    rule worker makes its own."""

    def __init__(self, pid: int):
        name = f"rewardserve-{pid}"
        self.v2: Path | None = None
        self.memory: Path | None = None
        self.cpu: Path | None = None
        own_v2 = own_v2_cgroup()
        if own_v2 is not None and _enable_v2(own_v2):
            _sweep(own_v2)
            folder = _made(own_v2 / name)
            if folder is not None and _enable_v2(folder) and _wrote(folder / "cpu.weight", LEAST_WEIGHT):
                self.v2 = folder
            return
        memory, cpu = own_memory_cgroup(), _own_v1(CPU_V1, "cpu", "cpu.shares")
        if memory is not None:
            _sweep(memory)
            self.memory = _made(memory / name)
        group = _service_group(cpu) if cpu is not None else None
        if group is not None:
            _sweep(group)
            folder = _made(group / name)
            self.cpu = folder if folder is not None and _wrote(folder / "cpu.shares", LEAST_SHARES) else None

    def mode(self) -> str:
        """The cgroups a sandbox gets here, in words (/health and the start-up line)."""
        if self.v2 is not None:
            return f"cgroup v2, a delegated subtree ({self.v2.parent}): memory.max, pids.max and cpu.max per sandbox"
        parts = [
            words
            for words, folder in (("a memory cgroup per sandbox", self.memory), ("one CPU per sandbox", self.cpu))
            if folder is not None
        ]
        if not parts:
            return "no writable cgroup: memory and CPU bounded per process, each sandbox's autogroup at nice 19"
        return f"cgroup v1: {' and '.join(parts)}" + ("" if self.cpu else ", its autogroup at nice 19")


def _service_group(own: Path) -> Path | None:
    """The service's cpu group: the one this process is in (a rule worker forked from the
    service), else one made for it, which this process moves into."""
    if own.name.startswith("rewardserve-svc-"):
        return own
    _sweep(own)
    group = _made(own / f"rewardserve-svc-{os.getpid()}")
    if group is None or not _wrote(group / "cgroup.procs", os.getpid()):
        return None
    return group


def _made(folder: Path) -> Path | None:
    try:
        folder.mkdir(exist_ok=True)
    except OSError:
        return None
    return folder


def _wrote(path: Path, value: object) -> bool:
    try:
        path.write_text(str(value))
    except OSError:
        return False
    return True


@functools.cache
def _folders_of(pid: int) -> _Folders:
    return _Folders(pid)


def _folders() -> _Folders:
    with _making:  # a process's threads start sandboxes at once: one of them makes them
        return _folders_of(os.getpid())


def _sweep(own: Path) -> None:
    """The empty cgroups of processes gone (a rule worker killed at its time limit)."""
    for folder in own.glob("rewardserve-*"):
        pid = folder.name.removeprefix("rewardserve-").removeprefix("svc-")
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            try:  # the deepest first: a service group holds its workers' folders
                inners = [*folder.glob("*/sandbox-*"), *folder.glob("*/"), *folder.glob("sandbox-*"), folder]
            except OSError:  # another process swept it first (each rule worker sweeps)
                continue
            for inner in inners:
                try:
                    inner.rmdir()
                except OSError:
                    pass


def available() -> bool:
    """Whether a sandbox's memory is bounded as a whole (a v1 memory cgroup or v2)."""
    folders = _folders()
    return folders.memory is not None or folders.v2 is not None


def mode() -> str:
    return _folders().mode()


class MemoryCgroup:
    """One sandbox's cgroups: its memory limit set before each completion, its OOM kills
    counted, its CPU bounded to one CPU (quota) at the least weight (its folder's)."""

    def __init__(self) -> None:
        folders = _folders()
        number = next(_numbers)
        self._limit: str | None = None
        self.paths: list[Path] = []
        self.memory: Path | None = None
        self.v2 = folders.v2 is not None
        if folders.v2 is not None:
            self.memory = folders.v2 / f"sandbox-{number}"
            self.memory.mkdir()
            self.paths = [self.memory]
            (self.memory / "pids.max").write_text(str(SANDBOX_PROCESSES))
            (self.memory / "cpu.max").write_text("100000 100000")
        else:
            if folders.memory is not None:
                self.memory = folders.memory / f"sandbox-{number}"
                self.memory.mkdir()
                self.paths.append(self.memory)
            if folders.cpu is not None:
                cpu = folders.cpu / f"sandbox-{number}"
                cpu.mkdir()
                self.paths.append(cpu)
                period = (cpu / "cpu.cfs_period_us").read_text().strip()
                (cpu / "cpu.cfs_quota_us").write_text(period)

    @staticmethod
    def any() -> bool:
        """Whether this host gives a sandbox any cgroup (memory or CPU)."""
        folders = _folders()
        return any(folder is not None for folder in (folders.v2, folders.memory, folders.cpu))

    def add(self, pid: int) -> None:
        """``pid`` into each of the sandbox's cgroups, moved by this process: on v2 only a
        writer of both cgroups' common ancestor may move it, which the sandbox's user is not."""
        for path in self.paths:
            (path / "cgroup.procs").write_text(str(pid))

    def limit(self, test_bytes: int, workdir_bytes: int) -> None:
        """The whole sandbox's memory: a test's allowance, its files' tmpfs and the driver;
        swap too, where the host accounts for it (never below the memory limit)."""
        if self.memory is None:
            return
        value = str(test_bytes + workdir_bytes + DRIVER_BYTES)
        if value == self._limit:  # as the last completion's: nothing to write
            return
        if self.v2:
            (self.memory / "memory.max").write_text(value)
            if (self.memory / "memory.swap.max").exists():
                (self.memory / "memory.swap.max").write_text("0")
            self._limit = value
            return
        names = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
        if not (self.memory / names[1]).exists():
            names.pop()
        try:
            for name in names:
                (self.memory / name).write_text(value)
        except OSError:  # raising it: the swap limit first
            for name in reversed(names):
                (self.memory / name).write_text(value)
        self._limit = value

    def oom_kills(self) -> int:
        if self.memory is None:
            return 0
        for line in _lines(self.memory / ("memory.events" if self.v2 else "memory.oom_control")):
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def remove(self) -> None:
        """Gone once its processes are (they die with the sandbox's init)."""
        for path in self.paths:
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


# Run by /bin/sh before anything else of the sandbox: it waits for a line on its stdin,
# which the service writes once it has moved it into its cgroups (``add``), then runs the
# rest. The shell's read takes no byte past that line from a pipe.
ENTER = 'read -r _ || exit 1; exec "$@"'


def enter(command: list[str]) -> list[str]:
    return ["/bin/sh", "-c", ENTER, "sh", *command]
