"""Hostile completions against the code model's sandbox (models/rules/code/sandbox/__init__.py): each
attack gets its expected verdict, ends within its time limit, and sees nothing of the
service (its files, its environment, its port, its processes)."""

from __future__ import annotations

import glob
import os
import socket
import time
from pathlib import Path

import pytest

from rewardserve.models.rules.code import code_tests
from rewardserve.models.rules.code.sandbox.command import python

ROOT = Path(__file__).resolve().parents[2]
ONE = {"inputs": [""], "outputs": ["ok"]}


def run(code: str, reference=ONE, **args):
    start = time.monotonic()
    # 256 MiB: a memory bomb reaches it well within its second (filling 1 GiB took ~1 s here).
    result = code_tests(code, reference, timeout_s=1.0, memory_mb=256, **args)
    return result, time.monotonic() - start


# Each attack's program and its expected verdict, on ONE's single test.
ATTACKS = {
    "fork bomb": ("import os\nwhile True:\n    os.fork()", "RE"),
    "sleep": ("import time\ntime.sleep(60)", "TLE"),
    "endless loop": ("while True:\n    pass", "TLE"),
    "memory bomb": ("x = []\nwhile True:\n    x.append(bytearray(1 << 26))", "MLE"),
    "disk fill": ("f = open('/tmp/fill', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))", "RE"),
    "1 GB of stdout": ("import sys\nwhile True:\n    sys.stdout.write('x' * (1 << 20))", "OLE"),
    "1 GB of stderr": ("import sys\nwhile True:\n    sys.stderr.write('x' * (1 << 20))", "OLE"),
    "blocks on stdin": ("import sys\nsys.stdin.read()\nimport time\ntime.sleep(60)", "TLE"),
    "closes its stdout": ("import os\nos.close(1)\nprint('ok')", "WA"),  # nothing came out
    "kills its parent": ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('ok')", "RE"),
    "kills everything": ("import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('ok')", "RE"),
    "raises its rlimits": ("import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))", "RE"),
    "a child left running": ("import os, time\nif os.fork() == 0:\n    time.sleep(60)\nprint('ok')", "AC"),
}


@pytest.mark.parametrize(("name", "code", "verdict"), [(name, *attack) for name, attack in ATTACKS.items()])
def test_each_attack_gets_its_verdict_within_its_time(name, code, verdict):
    result, took = run(code)
    assert [t["verdict"] for t in result.tests] == [verdict], (name, result.tests)
    assert took < 15, (name, took)


def test_a_child_left_running_does_not_survive_into_the_next_test():
    """The first test leaves a process writing a file; the second test, in the same
    sandbox, finds the file unchanged since (the process was killed with the test)."""
    code = (
        "import os, sys, time\n"
        "if sys.stdin.readline().strip() == 'first':\n"
        "    if os.fork() == 0:\n"
        "        while True:\n"
        "            open('/tmp/beat', 'w').write(str(time.monotonic()))\n"
        "            time.sleep(0.01)\n"
        "    time.sleep(0.1)\n"
        "    print('ok')\n"
        "else:\n"
        "    a = open('/tmp/beat').read(); time.sleep(0.2); b = open('/tmp/beat').read()\n"
        "    print('ok' if a == b else 'alive')\n"
    )
    result, _ = run(code, {"inputs": ["first\n", "second\n"], "outputs": ["ok", "ok"]})
    assert [t["verdict"] for t in result.tests] == ["AC", "AC"], result.tests


def test_nothing_of_the_service_is_visible_from_the_sandbox(monkeypatch):
    from rewardserve.models.rules.code import sandbox

    monkeypatch.setenv("REWARDSERVE_API_KEYS", "secret-key-of-the-service")
    paths = (str(ROOT), str(ROOT / "pyproject.toml"), "/root", "/proc/1/environ", "/proc/self/fd", os.sys.executable)
    probe = (
        "import os\n"
        "print(sorted(os.listdir('/')))\n"
        "print(sorted(os.environ))\n"
        "print(sorted(os.listdir('/etc')) if os.path.isdir('/etc') else [])\n"
        "print(os.listdir('/proc'), os.listdir('/proc/self'), os.readlink('/proc/self/exe'))\n"
        f"for path in {paths!r}:\n"
        "    try:\n"
        "        print(open(path).read()[:100])\n"
        "    except OSError as exc:\n"
        "        print(type(exc).__name__)\n"
    )
    outcome = sandbox.run(probe, [{"stdin": ""}], sandbox.Limits(timeout_s=5))
    roots, names, etc, proc, *opened = outcome.results[0]["stdout"].splitlines()
    # /etc: the JDK's configuration only, where a JDK is installed; /proc: the one link
    # rustc reads (to the sandbox's Python), no process of it.
    expected_etc = sorted(os.path.basename(path) for path in glob.glob("/etc/java-*"))
    assert eval(roots) == sorted(
        ["bin", "dev", "lib", "lib64", "proc", "sbin", "tmp", "usr"] + ["etc"] * bool(expected_etc)
    ), roots
    assert eval(etc) == expected_etc, etc
    assert proc == f"['self'] ['exe'] {python()}", proc
    assert eval(names) == sorted(sandbox.ENV) + ["PWD"] or eval(names) == sorted([*sandbox.ENV, "PWD"]), names
    assert opened == ["FileNotFoundError"] * len(paths), opened


def test_the_service_s_port_and_the_outside_are_unreachable():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        code = (
            "import socket\n"
            "out = []\n"
            f"for host, port in (('127.0.0.1', {port}), ('1.1.1.1', 53), ('::1', {port})):\n"
            "    try:\n"
            "        socket.create_connection((host, port), timeout=0.5).close()\n"
            "        out.append('open')\n"
            "    except OSError as exc:\n"
            "        out.append(type(exc).__name__)\n"
            "print(out)\n"
        )
        from rewardserve.models.rules.code import sandbox

        outcome = sandbox.run(code, [{"stdin": ""}], sandbox.Limits(timeout_s=5))
        listener.settimeout(0.2)
        with pytest.raises(TimeoutError):
            listener.accept()
    assert "open" not in outcome.results[0]["stdout"], outcome.results[0]


# What tenant a sends the served code model at once.
SERVED_ATTACKS = ("fork bomb", "endless loop", "sleep", "memory bomb", "1 GB of stdout", "kills its parent")


def test_hostile_code_leaves_the_service_and_the_other_tenant_alone(attacked):
    """Tenant a sends four requests of every attack at once to the built-in code model;
    tenant b's probes keep their p99 under a second, the server's RSS stays bounded, the
    service stays healthy, and each attack gets its verdict (scored 0, never invalid)."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.adversarial.conftest import AS_A, AS_B

    reference = {"inputs": ["1 2\n"] * 2, "outputs": ["3\n"] * 2}
    body = {
        "model": "code",
        "items": [{"response": ATTACKS[name][0], "reference": reference} for name in SERVED_ATTACKS],
        "options": {"code": {"timeout_s": 1.0, "memory_mb": 256}},
    }
    with attacked.watch(headers=AS_B), ThreadPoolExecutor(4) as pool:
        responses = list(pool.map(lambda _: attacked.post("/v1/score", body, timeout=120, headers=AS_A), range(4)))
    for response in responses:
        assert response.status_code == 200, response.text
        for name, result in zip(SERVED_ATTACKS, response.json()["results"], strict=True):
            verdict = ATTACKS[name][1]
            assert result["valid"] and result["score"] == 0.0, (name, result)
            assert {t["verdict"] for t in result["tests"]} == {verdict}, (name, result["tests"])


def test_system_v_ipc_message_queues_and_ptrace_are_refused():
    """Objects that would outlive their processes (System V IPC, POSIX message queues),
    and reaching the test runner's memory (ptrace, process_vm_writev), are refused by the
    sandbox's filter."""
    from rewardserve.models.rules.code import sandbox

    probe = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.shmget(0, 1 << 20, 0o1600), libc.semget(0, 1, 0o1600), libc.msgget(0, 0o1600))\n"
        "print(libc.ptrace(16, os.getppid(), 0, 0), ctypes.get_errno())\n"
        "print(libc.mq_open(b'/left', os.O_CREAT | os.O_RDWR, 0o600, None), ctypes.get_errno())\n"
    )
    result = sandbox.run(probe, [{"stdin": ""}], sandbox.Limits(timeout_s=5)).results[0]
    assert result["stdout"] == "-1 -1 -1\n-1 1\n-1 1\n", result


def test_pseudo_terminals_cannot_be_opened():
    """Every pty a sandbox opened counted against the host's pty limit (kernel.pty.max),
    which its other containers and logins share: a test could take them all. The
    sandbox's /dev/ptmx opens nothing."""
    probe = (
        "import os\n"
        "try:\n"
        "    os.openpty()\n"
        "    print('opened')\n"
        "except OSError as exc:\n"
        "    print(exc.errno)\n"
        "print(os.path.exists('/dev/pts/0'))\n"
    )
    result, _ = run(probe, {"inputs": [""], "outputs": ["13\nFalse"]}, outputs=True)
    assert float(result) == 1.0, result.tests


@pytest.mark.parametrize("path", ["../escape", "/etc/passwd", "a/../../b", "./a", "a//b", "", "x\x00y", "a" * 300])
def test_files_paths_out_of_the_working_directory_are_refused(path):
    from rewardserve.models.rules import RuleError

    with pytest.raises(RuleError, match="path"):
        run("print('ok')", {**ONE, "files": {path: "b2s="}})
    with pytest.raises(RuleError, match="path"):
        run("print('ok')", {**ONE, "fetch_files": [path]})


def test_links_a_test_leaves_are_not_followed_by_files_or_fetch_files():
    """A test swaps the request's folder for a link to /usr and plants a link and a pipe
    where the service will read: the next test's files are not written through the link
    (that test fails, the program's doing), and nothing is fetched through a link or
    from a pipe (which would block the test runner)."""
    plant = (
        "import os, shutil, sys\n"
        "if sys.stdin.read() == 'first':\n"
        "    shutil.rmtree('data')\n"
        "    os.symlink('/usr/bin', 'data')\n"
        "    os.symlink('/usr/bin/python3', 'out')\n"
        "    os.mkfifo('pipe')\n"
        "print('ok')\n"
    )
    reference = {
        "inputs": ["first", "second"],
        "outputs": ["ok", "ok"],
        "files": {"data/in.txt": "b2s="},
        "fetch_files": ["out", "pipe", "data/in.txt"],
    }
    result, took = run(plant, reference)
    first, second = result.tests
    assert first["verdict"] == "AC" and first["files"] == {}, first
    assert second["verdict"] == "RE", second
    assert took < 15
    assert not Path("/usr/bin/in.txt").exists()


# A completion that copies the driver's result pipe (its stdout, to the service) with
# pidfd_getfd, which needs no ptrace, writes "AC" records of its own and kills the driver.
FORGED_RESULTS = """
import ctypes, marshal, os
def forge(n):
    libc = ctypes.CDLL(None, use_errno=True)
    pipe = libc.syscall(438, os.pidfd_open(2), 1, 0)  # pidfd_getfd(the driver, its fd 1)
    passed = {"verdict": None, "exit_code": 0, "signal": None, "stdout": "ok\\n", "stderr": "",
              "time_s": 0.0, "cpu_s": 0.0, "memory_kb": 0}
    for record in [passed] * n + [{"done": True}]:
        data = marshal.dumps(record)
        os.write(pipe, len(data).to_bytes(4, "little") + data)
    os.kill(2, 9)
def add(a, b):
    forge(1)
    return 0
if __name__ == "__main__" and not globals().get("check"):
    forge(2)
"""


def test_the_driver_s_descriptors_cannot_be_copied_to_forge_results():
    """pidfd_open and pidfd_getfd are refused in the sandbox, so the forged records never
    reach the service: the human-eval test and the stdin/stdout tests fail."""
    probe, _ = run(
        "import os\ntry:\n    os.pidfd_open(2)\n    print('ok')\nexcept OSError as e:\n    print(e.errno)", outputs=True
    )
    assert probe.tests[0]["stdout"] == "1\n", probe.tests  # EPERM
    human_eval = {"test": "def check(candidate):\n    assert candidate(2, 3) == 5\n", "entry_point": "add"}
    for reference in (human_eval, {"inputs": ["", ""], "outputs": ["ok", "ok"]}):
        result, took = run(FORGED_RESULTS, reference)
        assert float(result) == 0.0 and "AC" not in [t["verdict"] for t in result.tests], (reference, result.tests)
        assert took < 15


def test_a_module_name_cannot_make_the_test_s_side_run_code():
    """The completion sets its modules' names: one named unittest.__main__ would make the
    test's process run unittest's discovery in the shared working directory, importing
    the completion's test_*.py, which exits 0 before the asserts. Only plain modules are
    imported on the test's side."""
    code = (
        "import types\n"
        "open('test_zz.py', 'w').write('import os\\nos._exit(0)\\n')\n"
        "m = types.ModuleType('unittest.__main__')\n"
        "def add(a, b):\n    return 0\n"
    )
    human_eval = {"test": "def check(candidate):\n    assert candidate(2, 3) == 5\n", "entry_point": "add"}
    mbpp = {"test_list": ["assert add(2, 3) == 5", "assert add(1, 1) == 2"]}
    for reference in (human_eval, mbpp):
        result, _ = run(code, reference)
        assert float(result) == 0.0, (reference, result.tests)
