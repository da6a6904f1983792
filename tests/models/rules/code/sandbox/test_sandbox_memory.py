"""Memory cgroups per sandbox (models/rules/code/sandbox/cgroup.py), where this host has them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# In a fresh process (no cgroup folder made yet): stale folders of processes gone, as
# rule workers killed at their time limit leave them, and eight threads starting their
# first sandboxes at once. Each thread's first sandbox swept the stale folders, and one
# thread's glob met a folder another had just removed: FileNotFoundError for a request.
FIRST_SANDBOXES_AT_ONCE = textwrap.dedent(
    """
    import os, sys
    from concurrent.futures import ThreadPoolExecutor
    from rewardserve.models.rules.code import sandbox
    from rewardserve.models.rules.code.sandbox import cgroup as sandbox_memory

    root = sandbox_memory.own_memory_cgroup()
    gone = [n for n in range(4_000_000, 4_100_000) if not os.path.exists(f"/proc/{n}")][:60]
    for pid in gone:
        for k in range(3):
            (root / f"rewardserve-{pid}" / f"sandbox-{k}").mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(lambda _: sandbox.run("print(1)", [{"stdin": ""}], sandbox.Limits()), range(8)))
    assert all(o.results[0]["stdout"] == "1\\n" for o in outcomes), outcomes
    assert not [p for p in gone if (root / f"rewardserve-{p}").exists()]
    print("ok")
    """
)


def test_first_sandboxes_started_at_once_sweep_stale_cgroups_without_failing():
    from rewardserve.models.rules.code.sandbox import cgroup as sandbox_memory

    if not sandbox_memory.available():
        pytest.skip("no writable memory cgroup on this host")
    done = subprocess.run([sys.executable, "-c", FIRST_SANDBOXES_AT_ONCE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
