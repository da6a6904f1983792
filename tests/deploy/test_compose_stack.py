"""docker-compose.yml brought up by podman-compose (`make test-images`): two replicas of
the built image behind nginx, Prometheus scraping both; a replica SIGKILLed mid-run loses
no request (the checks of test_load_balancer.py, on containers instead of processes).

No registry is reachable here: the images the file pulls (nginx, prometheus) get local
stand-ins under the same names, built from Debian's packages of the same programs
(tests/deploy/standins/). Debian has no Grafana package, so the `grafana` profile stays
off, as it is by default. Debian's nginx (1.22) lacks `resolve` in an upstream (1.27.3),
so the stack runs deploy/nginx.conf less `resolve` and its zone, as test_files.py checks
it with an older nginx; and the copy of the compose file publishes on free ports."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.deploy import podman
from tests.deploy.test_files import for_installed_nginx
from tests.deploy.test_load_balancer import REQUESTS, drive

pytestmark = [pytest.mark.images, pytest.mark.alone]

ROOT = Path(__file__).resolve().parents[2]
ITEMS = [{"response": f"\\boxed{{{k}}}", "reference": str(k if k % 3 else k + 1)} for k in range(20)]


@dataclass
class Stack:
    project: str
    workdir: Path
    nginx: str
    prometheus: str

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "CONTAINERS_CONF": str(podman.conf_file()), "COMPOSE_PROJECT_NAME": self.project}
        return subprocess.run(
            [str(ROOT / ".venv" / "bin" / "podman-compose"), "-p", self.project, *args],
            cwd=self.workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def replicas(self) -> list[str]:
        """The service's containers, running or not."""
        out = podman.podman(
            "ps",
            "--all",
            "--filter",
            f"label=io.podman.compose.project={self.project}",
            "--filter",
            "label=com.docker.compose.service=rewardserve",
            "--format",
            "{{.Names}}",
        )
        return sorted(out.split())


def project_copy(workdir: Path, nginx_port: int, prometheus_port: int) -> None:
    """docker-compose.yml and deploy/ into workdir, as shipped but for the published
    ports and, for Debian's nginx, `resolve`."""
    text = (ROOT / "docker-compose.yml").read_text()
    for port, new in ((8080, nginx_port), (9090, prometheus_port)):
        published = f":{port}:{port}"
        assert text.count(published) == 1, f"the compose file's {port} mapping changed shape"
        text = text.replace(published, f":{new}:{port}")
    (workdir / "docker-compose.yml").write_text(text)
    shutil.copytree(ROOT / "deploy", workdir / "deploy", ignore=shutil.ignore_patterns("__pycache__"))
    conf = workdir / "deploy" / "nginx.conf"
    conf.write_text(for_installed_nginx(conf.read_text()))


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    assert shutil.which("podman"), "make test-images installs podman"
    podman.compose_images()
    workdir = tmp_path_factory.mktemp("compose")
    nginx_port, prometheus_port = podman.free_port(), podman.free_port()
    project_copy(workdir, nginx_port, prometheus_port)
    stack = Stack(
        f"{podman.PREFIX}-{os.getpid()}",
        workdir,
        f"http://127.0.0.1:{nginx_port}",
        f"http://127.0.0.1:{prometheus_port}",
    )
    try:
        up = stack.compose("up", "-d", "--no-build", timeout=600)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        deadline = time.monotonic() + 240
        ready = 0
        while time.monotonic() < deadline and ready < 5:
            try:
                ok = httpx.get(stack.nginx + "/ready", timeout=5).status_code == 200
            except httpx.TransportError:
                ok = False
            ready = ready + 1 if ok else 0
            time.sleep(0.5)
        assert ready >= 5, stack.compose("logs").stdout[-4000:]
        yield stack
    finally:
        down = stack.compose("down", "-v", "-t", "10", timeout=300)
        for name in stack.replicas():
            podman.remove(name)
        assert down.returncode == 0, down.stderr[-3000:]
        project = f"label=io.podman.compose.project={stack.project}"
        assert podman.podman("volume", "ls", "--quiet", "--filter", project).strip() == ""
        assert podman.podman("ps", "--all", "--quiet", "--filter", project).strip() == ""


def test_two_replicas_behind_nginx_and_prometheus_scrapes_both(stack):
    replicas = stack.replicas()
    assert len(replicas) == 2, replicas
    score = httpx.post(stack.nginx + "/v1/score", json={"model": "math", "items": ITEMS[:3]}, timeout=60)
    assert score.status_code == 200, score.text
    assert [r["score"] for r in score.json()["results"]] == [0.0, 1.0, 1.0]
    # The code model loaded in the replicas: compose gave them the sandbox's profile.
    add = {"inputs": ["1 2\n"], "outputs": ["3\n"]}
    program = "a, b = map(int, input().split())\nprint(a + b)"
    code = {"model": "code", "items": [{"response": program, "reference": add}]}
    scored = httpx.post(stack.nginx + "/v1/score", json=code, timeout=60)
    assert scored.status_code == 200 and scored.json()["results"][0]["score"] == 1.0, scored.text
    deadline = time.monotonic() + 90
    up: list[str] = []
    while time.monotonic() < deadline:
        try:
            targets = httpx.get(stack.prometheus + "/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
        except (httpx.TransportError, ValueError, KeyError):
            targets = []
        up = [t["scrapeUrl"] for t in targets if t["labels"].get("job") == "rewardserve" and t["health"] == "up"]
        if len(up) == 2:
            break
        time.sleep(2)
    assert len(up) == 2, up


def test_a_replica_killed_mid_run_loses_nothing(stack):
    first = httpx.post(stack.nginx + "/v1/score", json={"model": "math", "items": ITEMS}, timeout=60)
    expected = [r["score"] for r in first.json()["results"]]
    victim = stack.replicas()[0]
    before = podman.state(victim)

    def on_progress(n: int) -> None:
        if n == REQUESTS // 3:
            podman.podman("kill", "--signal", "KILL", victim)

    statuses, scores = drive(stack.nginx, on_progress, model="math", items=ITEMS)
    after = podman.state(victim)
    # It really died mid-run (compose's restart policy may have started it again since).
    assert after.get("Status") != "running" or after.get("StartedAt") != before.get("StartedAt"), after
    assert statuses.count(200) == REQUESTS, {s: statuses.count(s) for s in set(statuses)}
    for k, score in enumerate(scores):
        assert score == expected[k % len(ITEMS)]
