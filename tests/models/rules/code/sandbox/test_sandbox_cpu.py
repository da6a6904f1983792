"""A sandbox's CPU (models/rules/code/sandbox/__init__.py, sandbox/cgroup.py, sandbox/seccomp.py): a test's
limit is its CPU time, the wall clock a backstop at WALL_BACKSTOP times it; its processes
share one CPU bound (a cpu cgroup) or, without one, an autogroup at nice 19 that setsid
cannot leave; without a memory cgroup, memfd_create is refused."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rewardserve.models.rules.code import sandbox
from rewardserve.models.rules.code.sandbox import cgroup as sandbox_memory


def one(code: str, limits: sandbox.Limits, started: sandbox.Sandbox | None = None) -> dict:
    """``code``'s one test, in ``started`` (closed after) or a sandbox of the pool."""
    if started is None:
        return sandbox.run(code, [{"stdin": ""}], limits).results[0]
    spec = sandbox._spec(code, [{"stdin": ""}], limits, asserts=False)
    try:
        return started.run(spec, time.monotonic() + 60.0, None).results[0]
    finally:
        started.close()


def test_a_test_that_waits_past_its_cpu_time_but_not_its_backstop_is_judged_not_tle():
    """2.4 s asleep under a 2 s limit: 0 s of CPU, within the 4 s backstop. It was a TLE
    when the limit was the wall clock, as a correct program on a loaded host was."""
    result = one("import time\ntime.sleep(2.4)\nprint('ok')", sandbox.Limits(timeout_s=2.0))
    assert result["verdict"] is None and result["stdout"] == "ok\n", result
    assert result["cpu_s"] < 2.0 <= result["time_s"], result


@pytest.mark.parametrize(
    ("code", "why"),
    [("while True:\n    pass", "its CPU time"), ("import time\ntime.sleep(60)", "the wall clock's backstop")],
)
def test_spinning_or_sleeping_for_ever_is_still_a_tle(code, why):
    result = one(code, sandbox.Limits(timeout_s=1.0))
    assert result["verdict"] == "TLE", (why, result)
    assert result["time_s"] < 1.0 * sandbox.WALL_BACKSTOP + 1.0, (why, result)


def test_setsid_is_refused_in_the_sandbox():
    """A session of its own would be an autogroup of its own (nice 0, whatever the worker's).
    A forked child asks (the test's own process may lead its group, where setsid fails)."""
    code = (
        "import os\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    try:\n"
        "        os.setsid()\n"
        "        os._exit(0)\n"
        "    except PermissionError:\n"
        "        os._exit(1)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print('refused' if os.waitstatus_to_exitcode(status) == 1 else 'own session')\n"
    )
    assert one(code, sandbox.Limits())["stdout"] == "refused\n"


def test_a_sandbox_s_processes_are_in_one_cpu_cgroup_of_one_cpu_below_the_service():
    if not Path("/sys/fs/cgroup/cpu/cpu.shares").exists() or not sandbox_memory.MemoryCgroup.any():
        pytest.skip("no writable v1 cpu hierarchy here")
    if sandbox_memory._folders().cpu is None:
        pytest.skip("no writable v1 cpu hierarchy here")
    started = sandbox.Sandbox(sandbox.Limits().workdir_bytes)
    try:
        assert started.cgroup is not None
        (cpu,) = [path for path in started.cgroup.paths if str(path).startswith("/sys/fs/cgroup/cpu/")]
        period = int((cpu / "cpu.cfs_period_us").read_text())
        assert int((cpu / "cpu.cfs_quota_us").read_text()) == period  # one CPU, its processes together
        assert int((cpu.parent / "cpu.shares").read_text()) == sandbox_memory.LEAST_SHARES
        assert cpu.parent.parent.name.startswith("rewardserve-svc-")  # the service's own group
        assert [int(pid) for pid in (cpu / "cgroup.procs").read_text().split()]  # the sandbox is in it
    finally:
        started.close()


def test_without_cgroups_a_sandbox_s_autogroup_is_at_nice_19_and_memfd_create_is_refused(monkeypatch):
    monkeypatch.setattr(sandbox.MemoryCgroup, "any", staticmethod(lambda: False))
    monkeypatch.setattr(sandbox, "memory_cgroups", lambda: False)
    started = sandbox.Sandbox(sandbox.Limits().workdir_bytes)
    assert started.cgroup is None
    if not Path(f"/proc/{started.proc.pid}/autogroup").exists():
        started.close()
        pytest.skip("this kernel has no autogroups")
    seen, todo = [], [started.proc.pid]
    while todo:
        pid = todo.pop()
        seen.append(Path(f"/proc/{pid}/autogroup").read_text())
        for children in Path(f"/proc/{pid}/task").glob("*/children"):
            todo += [int(child) for child in children.read_text().split()]
    assert len(seen) >= 2 and all(line.strip().endswith("nice 19") for line in seen), seen  # bwrap, the driver
    code = "import os\ntry:\n    os.memfd_create('m')\n    print('made')\nexcept PermissionError:\n    print('refused')"
    assert one(code, sandbox.Limits(), started)["stdout"] == "refused\n"


def test_with_a_memory_cgroup_memfd_create_works_as_on_any_linux():
    if not sandbox_memory.available():
        pytest.skip("no memory cgroup here")
    code = "import os\nfd = os.memfd_create('m')\nos.write(fd, b'x' * 4096)\nprint(os.fstat(fd).st_size)"
    assert one(code, sandbox.Limits())["stdout"] == "4096\n"
