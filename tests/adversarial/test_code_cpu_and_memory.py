"""A completion's processes share one bound on CPU and memory with the rest of its sandbox,
against a real service process (the built-in ``code`` model; issue 57, items 4 and 5).

Before: 60 forked children each calling setsid() were 60 nice-0 autogroups, so nice 19 and
SCHED_IDLE protected nothing: another request's correct program became a TLE, that TLE was
cached, and /health slowed twentyfold. Where no memory cgroup could be written (every
cgroup-v2 host), memfds held 640 MB under a 128 MB memory_mb."""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.harness import metric, serve_process, serve_subprocess

# Forks 60 children that each leave its session for one of their own and spin, and spins.
SETSID_HOG = (
    "import os\n"
    "for _ in range(60):\n"
    "    try:\n"
    "        if os.fork() == 0:\n"
    "            try:\n"
    "                os.setsid()\n"
    "            except OSError:\n"
    "                pass\n"
    "            while True:\n"
    "                pass\n"
    "    except OSError:\n"
    "        break\n"
    "while True:\n"
    "    pass\n"
)
# A correct program of 0.2 to 0.4 s of CPU here: an AC under its 2 s, however loaded the
# host. Beside two setsid hogs it took 2 s of wall clock (a TLE) before.
VICTIM = "print(sum(i * i for i in range(4_000_000)))"
VICTIM_ANSWER = str(sum(i * i for i in range(4_000_000)))


def score(url: str, code: str, expected: str, tests: int, **options) -> dict:
    reference = {"inputs": [""] * tests, "outputs": [expected] * tests}
    body = {"model": "code", "items": [{"response": code, "reference": reference}], "options": {"code": options}}
    answer = httpx.post(url + "/v1/score", json=body, timeout=240)
    assert answer.status_code == 200, answer.text[:2000]
    return answer.json()["results"][0]


def health_p50(url: str, probes: int = 30) -> float:
    took = []
    with httpx.Client(timeout=30) as http:
        for _ in range(probes):
            start = time.monotonic()
            assert http.get(url + "/health").status_code == 200
            took.append(time.monotonic() - start)
            time.sleep(0.02)
    return statistics.median(took)


@pytest.fixture(scope="module")
def service():
    with serve_process(env={"REWARDSERVE_LOG_LEVEL": "warning"}) as (url, proc):
        yield url, proc


def test_a_setsid_hog_leaves_another_request_s_correct_program_ac_and_nothing_of_it_is_cached(service):
    url, _ = service
    assert score(url, VICTIM, VICTIM_ANSWER, 1, timeout_s=2)["score"] == 1.0  # the sandboxes are up
    idle = health_p50(url)
    hogs: list[dict] = []
    attack = [
        threading.Thread(target=lambda: hogs.append(score(url, SETSID_HOG, "never", 3, timeout_s=4))) for _ in range(2)
    ]
    for thread in attack:
        thread.start()
    time.sleep(2.0)  # the hogs' children are forked and spinning
    attacked = health_p50(url)
    # A different program each time: no answer of the victim can come from the cache.
    victims = [score(url, VICTIM + f"  # {k}", VICTIM_ANSWER, 3, timeout_s=2) for k in range(2)]
    for thread in attack:
        thread.join(timeout=240)
    for victim in victims:
        assert victim["valid"] and victim["score"] == 1.0, victim
        assert [t["verdict"] for t in victim["tests"]] == ["AC"] * 3, victim
    assert [t["verdict"] for hog in hogs for t in hog["tests"]] == ["TLE"] * 6, hogs
    assert attacked <= 3 * max(idle, 0.005), (idle, attacked)
    # A TLE is the load's verdict as much as the program's: asked again, the hog is run
    # again (a cache miss, never a hit), and so is nothing else.
    hits = metric(httpx.get(url + "/metrics").text, "rewardserve_cache_hits_total", model="code")
    again = score(url, SETSID_HOG, "never", 3, timeout_s=4)
    assert [t["verdict"] for t in again["tests"]] == ["TLE"] * 3, again
    assert metric(httpx.get(url + "/metrics").text, "rewardserve_cache_hits_total", model="code") == hits
    # An AC is not: the same victim again is the cache's answer.
    assert score(url, VICTIM + "  # 0", VICTIM_ANSWER, 3, timeout_s=2)["score"] == 1.0
    assert metric(httpx.get(url + "/metrics").text, "rewardserve_cache_hits_total", model="code") == hits + 1


# Holds 40 memfds of 16 MiB each (its file size limit), 640 MiB no address space counts,
# and says how many MiB it held.
MEMFDS = (
    "import os\n"
    "held = []\n"
    "for k in range(40):\n"
    "    fd = os.memfd_create(f'm{k}')\n"
    "    for _ in range(16):\n"
    "        os.write(fd, b'x' * (1 << 20))\n"
    "    held.append(fd)\n"
    "print(16 * len(held))\n"
)


def _without_memory_cgroup(folder: Path) -> str:
    """A Python for the service that sees no memory cgroup hierarchy (an empty tmpfs over
    /sys/fs/cgroup/memory, in a mount namespace of its own), as on a host where none is
    writable: sandbox_memory.available() is False there."""
    wrapper = folder / "python-without-memory-cgroup"
    hide = 'mount -t tmpfs none /sys/fs/cgroup/memory && exec "$0" "$@"'
    unshare = "unshare --mount --propagation private"
    wrapper.write_text(f"#!/bin/sh\nexec {unshare} sh -c '{hide}' {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def test_memfds_under_a_128_mb_limit_without_a_memory_cgroup_are_refused(tmp_path):
    from rewardserve.models.rules.code.sandbox import cgroup as sandbox_memory

    if os.geteuid() != 0 or not Path("/sys/fs/cgroup/memory").is_dir():
        pytest.skip("hiding the memory cgroup needs root and a v1 memory hierarchy")
    if not sandbox_memory.available():
        pytest.skip("no memory cgroup here to begin with")
    python = _without_memory_cgroup(tmp_path)
    with serve_subprocess(env={"REWARDSERVE_LOG_LEVEL": "warning"}, python=python) as url:
        result = score(url, MEMFDS, "640", 1, memory_mb=128, timeout_s=10)
        isolation = httpx.get(url + "/health").json()["isolation"]["code"]
    assert result["valid"], result
    assert [t["verdict"] for t in result["tests"]] in (["RE"], ["MLE"]), result
    assert result["score"] == 0.0, result
    # /health (and the start-up line) say what holds memory here instead.
    assert "a memory cgroup" not in isolation and "memfd_create refused" in isolation, isolation
