"""The admin API against a real `rewardserve serve` process: a hot swap under closed-loop
load (a 10 s injected load delay, Triton's QA test), a broken version under the same load,
sleep at level 2 measured from outside (the process's RSS), and sleep / wake toggled
while callers score."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import httpx
import pytest

from rewardserve.client import RewardClient
from rewardserve.client.errors import APIStatusError
from tests.builders import build_sequence_classifier
from tests.harness import serve_process

ADMIN_KEY = "admin-key"
TOGGLE_S = 60  # the race: sleep and wake toggled for a minute while callers score
ITEMS = [{"prompt": "What is 2+2?", "response": r} for r in ("4", "five", "It is 4.", "22")]


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


class Callers:
    """``n`` closed-loop callers scoring ITEMS until stopped: every answer's start, end,
    status, model_version and error type."""

    def __init__(self, url: str, n: int, model: str = "rm"):
        self.url, self.model, self.records, self._stop = url, model, [], threading.Event()
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(n)]

    def _loop(self) -> None:
        with httpx.Client(timeout=120) as http:
            while not self._stop.is_set():
                start = time.monotonic()
                answer = http.post(self.url + "/v1/score", json={"model": self.model, "items": ITEMS})
                body = answer.json()
                error = body.get("error", {}).get("type") if answer.status_code != 200 else None
                self.records.append((start, time.monotonic(), answer.status_code, body.get("model_version"), error))

    def __enter__(self) -> Callers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=130)


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    root = tmp_path_factory.mktemp("live_versions")
    first = build_sequence_classifier(root / "v1", seed=0)
    second = build_sequence_classifier(root / "v2", seed=1)
    broken = root / "broken"
    shutil.copytree(first, broken)
    (broken / "model.safetensors").write_bytes(b"\x00" * 64)
    return first, second, broken


@pytest.mark.long(40)
@pytest.mark.timeout(600)
def test_a_swap_under_load_loses_nothing_and_versions_never_mix(versions, tmp_path):
    first, second, broken = versions
    env = {"REWARDSERVE_ADMIN_KEYS": ADMIN_KEY, "REWARDSERVE_FAULT_LOAD_DELAY_S": "10"}
    config = tmp_path / "models.yaml"
    config.write_text(f"models:\n  - {{name: rm, source: {first}, version: v1}}\n")
    with (
        serve_process("--config", str(config), "--no-builtin-rules", env=env, log_path=tmp_path / "log") as (url, proc),
        RewardClient(url, api_key=ADMIN_KEY) as admin,
    ):
        with Callers(url, 8) as callers:
            time.sleep(2)
            rss_before = rss_bytes(proc.pid)
            began = time.monotonic()
            with pytest.raises(APIStatusError) as failed:  # the broken version, under the same load
                admin.admin.load("rm", str(broken), "v-broken")
            assert failed.value.status_code == 422 and "'v1' serves on" in str(failed.value)
            assert rss_bytes(proc.pid) < rss_before + 50 * 2**20  # what it loaded is handed back
            long_result: list[tuple[int, str | None]] = []

            def long_request() -> None:  # in flight while the new version flips in
                time.sleep(9.5)
                with httpx.Client(timeout=120) as http:
                    answer = http.post(url + "/v1/score", json={"model": "rm", "items": ITEMS * 200})
                    long_result.append((answer.status_code, answer.json().get("model_version")))

            side = threading.Thread(target=long_request)
            side.start()
            swap_start = time.monotonic()
            state = admin.admin.load("rm", str(second), "v2")
            swap_end = time.monotonic()
            side.join(timeout=120)
            assert state.version == "v2" and state.state == "awake"
            assert swap_end - swap_start >= 10  # the injected delay
            time.sleep(2)
        records = callers.records
    assert long_result == [(200, "v1")]  # started on v1, finished on v1 while v2 came in
    assert records and all(status == 200 for _, _, status, _, _ in records), [r for r in records if r[2] != 200][:3]
    during = sorted(end - start for start, end, _, _, _ in records if end > swap_start and start < swap_end)
    assert len(during) >= 8
    assert during[int(0.99 * (len(during) - 1))] < 5.0, during[-5:]  # p99 while the new version loaded
    assert {v for _, _, _, v, _ in records} <= {"v1", "v2"}
    assert all(v == "v1" for start, _, _, v, _ in records if start < began)
    assert all(v == "v2" for start, _, _, v, _ in records if start > swap_end)
    assert any(v == "v2" for _, _, _, v, _ in records)


@pytest.mark.long(30)
@pytest.mark.timeout(600)
def test_level_2_sleep_frees_the_weights_and_wakes_to_the_same_scores(tmp_path):
    # About 224 MB of float32 weights: large enough to see in the process's RSS.
    big = build_sequence_classifier(tmp_path / "big", hidden=1024, layers=6, heads=16, head_dim=64)
    weights = (big / "model.safetensors").stat().st_size
    assert weights >= 200 * 2**20
    env = {"REWARDSERVE_ADMIN_KEYS": ADMIN_KEY}
    with (
        serve_process("--model", f"rm={big}", "--no-builtin-rules", env=env) as (url, proc),
        RewardClient(url) as scorer,
        RewardClient(url, api_key=ADMIN_KEY) as admin,
    ):
        before = [r.score for r in scorer.score("rm", ITEMS).results]
        awake_rss = rss_bytes(proc.pid)
        asleep = admin.admin.sleep("rm", level=2)
        asleep_rss = rss_bytes(proc.pid)
        assert asleep.memory_bytes == 0
        assert awake_rss - asleep_rss >= 0.9 * weights, (awake_rss, asleep_rss, weights)
        woken = admin.admin.wake_up("rm")
        assert woken.state == "awake" and woken.memory_bytes >= weights * 0.95
        assert [r.score for r in scorer.score("rm", ITEMS).results] == before  # bitwise
        print(
            f"level 2: sleep {asleep.last_operation_s:.2f}s, wake {woken.last_operation_s:.2f}s, "
            f"RSS {awake_rss / 2**20:.0f} -> {asleep_rss / 2**20:.0f} MiB for {weights / 2**20:.0f} MiB of weights"
        )


@pytest.mark.long(90)
@pytest.mark.timeout(600)
def test_sleep_and_wake_toggled_while_callers_score(versions, tmp_path):
    """Two models of one checkpoint in one process: ``rm`` answers a sleeping model with the
    typed 503, ``lazy`` wakes on a request; each has two callers while a third toggles it."""
    first, _, _ = versions
    config = tmp_path / "models.yaml"
    config.write_text(
        f"models:\n  - {{name: rm, source: {first}}}\n  - {{name: lazy, source: {first}, wake_on_request: true}}\n"
    )
    env = {"REWARDSERVE_ADMIN_KEYS": ADMIN_KEY}
    with (
        serve_process("--config", str(config), "--no-builtin-rules", env=env) as (url, _),
        RewardClient(url, api_key=ADMIN_KEY) as admin,
    ):

        def toggle(model: str) -> None:
            end, level = time.monotonic() + TOGGLE_S, 1
            while time.monotonic() < end:
                admin.admin.sleep(model, level=level)
                time.sleep(0.2)
                admin.admin.wake_up(model)
                time.sleep(0.2)
                level = 3 - level

        with Callers(url, 2, "rm") as strict, Callers(url, 2, "lazy") as lazy:
            togglers = [threading.Thread(target=toggle, args=(m,)) for m in ("rm", "lazy")]
            for thread in togglers:
                thread.start()
            for thread in togglers:
                thread.join(timeout=120)
    for callers, allowed in ((strict, {(503, "model_asleep")}), (lazy, set())):
        errors = {(status, error) for _, _, status, _, error in callers.records if status != 200}
        assert callers.records and errors <= allowed, errors
        assert any(status == 200 for _, _, status, _, _ in callers.records)


def test_the_admin_api_on_a_listener_of_its_own(tmp_path):
    """``--admin-port``: /v1/admin/ answers there and nowhere else, and that listener
    answers nothing but the admin API and the probes."""
    from tests.harness import free_port, serve_subprocess

    admin_port = free_port()
    env = {"REWARDSERVE_ADMIN_KEYS": ADMIN_KEY}
    with serve_subprocess("--admin-port", str(admin_port), env=env) as url:
        admin = f"http://127.0.0.1:{admin_port}"
        key = {"authorization": f"Bearer {ADMIN_KEY}"}
        there = httpx.get(f"{admin}/v1/admin/models/math", headers=key, timeout=10)
        assert there.status_code == 200 and there.json()["name"] == "math", there.text
        here = httpx.get(f"{url}/v1/admin/models/math", headers=key, timeout=10)
        assert here.status_code == 404 and "its own port" in here.json()["error"]["message"]
        body = {"model": "math", "items": [{"response": "4", "reference": "4"}]}
        assert httpx.post(f"{url}/v1/score", json=body, timeout=10).status_code == 200
        scored_there = httpx.post(f"{admin}/v1/score", json=body, timeout=10)
        assert scored_there.status_code == 404 and "only the admin API" in scored_there.json()["error"]["message"]
        assert httpx.get(f"{admin}/health", timeout=10).status_code == 200
