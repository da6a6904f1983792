"""Hostile completions against a sandbox that serves one completion after another
(models/rules/code/sandbox/__init__.py, inside/driver.py): nothing one completion leaves (files,
processes, links, memory, the driver's limits and priority, the working folders
themselves) reaches the next, or makes it invalid."""

from __future__ import annotations

import pytest

from tests.adversarial.test_code_sandbox import run


def test_nothing_of_one_completion_is_left_for_the_next():
    """Completions run one after another in one sandbox (sandbox.py): the first leaves a
    file, a file in /dev/shm, a listening socket held by a child it forked, and tries a
    System V shared-memory segment; the next finds none of them."""
    from rewardserve.models.rules.code import sandbox

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
    from rewardserve.models.rules.code import sandbox

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
    from rewardserve.models.rules.code import sandbox
    from rewardserve.models.rules.code.sandbox import cgroup as sandbox_memory

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


ESCAPE = (
    "import os\n"
    "before = (os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0))\n"
    "for way in (lambda: os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0)),\n"
    "            lambda: os.setpriority(os.PRIO_PROCESS, 0, 0)):\n"
    "    try:\n        way()\n    except OSError:\n        pass\n"
    "print(before, (os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)))\n"
)


def _run_below(priority: str, code: str) -> str:
    """``code`` run by the sandbox from a process lowered as a rule worker is."""
    from rewardserve.models.rules.code import sandbox
    from rewardserve.models.rules.worker import lower_priority

    lower_priority(priority)  # type: ignore[arg-type]  # "nice" or "idle", as the settings allow
    return sandbox.run(code, [{"stdin": ""}], sandbox.Limits(timeout_s=5)).results[0]["stdout"]


@pytest.mark.parametrize("priority", ["nice", "idle"])
def test_a_completion_cannot_raise_its_own_priority_over_the_service(priority):
    """A rule worker lowered by ``rule_priority`` (SCHED_IDLE, or nice 19) starts the
    sandbox; its tests inherit that. A test asks for the normal policy and niceness 0 back
    for itself (pid 0: the filter lets a process set its own): the kernel refuses both,
    so its loops still yield to every forward."""
    import multiprocessing
    import os

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        out = pool.apply(_run_below, (priority, ESCAPE))
    lowered = (os.SCHED_IDLE, 0) if priority == "idle" else (os.SCHED_OTHER, 19)
    assert out == f"{lowered} {lowered}\n", out
