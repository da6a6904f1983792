"""deploy/Dockerfile built with podman and run as users run it (`make test-images`):
/ready, `math` and `code` scored through it, its health check; the code model's attacks
inside the container, under deploy/seccomp-bwrap.json; and without that profile (Docker's
default one) the code model refuses to load, naming the setting, rather than running code
unsandboxed."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.deploy import podman

pytestmark = [pytest.mark.images, pytest.mark.alone]

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "deploy" / "seccomp-bwrap.json"
# Docker's default seccomp profile as Docker 28.5.2 ships it (moby v28.5.2,
# vendor/github.com/moby/profiles/seccomp/default.json): what a container gets without ours.
DOCKER_DEFAULT = Path(__file__).resolve().parent / "data" / "docker-v28.5.2-seccomp-default.json"
# What compose and the k8s manifest give the service container (docker-compose.yml).
SANDBOX_OPTIONS = ("--security-opt", f"seccomp={PROFILE}", "--security-opt", "apparmor=unconfined")
ADD = {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]}
ADD_CODE = "a, b = map(int, input().split())\nprint(a + b)"


@pytest.fixture(scope="module")
def image() -> str:
    return podman.service_image()


@pytest.fixture(scope="module")
def served(image):
    with podman.container(image, *SANDBOX_OPTIONS) as box:
        podman.wait_ready(box)
        yield box


def score(box: podman.Container, body: dict) -> list[dict]:
    response = httpx.post(box.url + "/v1/score", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()["results"]


def run_code(box: podman.Container, code: str) -> str:
    """stdout of code run once by the container's code model (/run_code)."""
    response = httpx.post(box.url + "/run_code", json={"code": code, "language": "python"}, timeout=120)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["status"] == "Success", answer
    return answer["run_result"]["stdout"]


def test_the_image_serves_math_and_code_and_reports_healthy(served):
    math = score(served, {"model": "math", "items": [{"response": "\\boxed{4}", "reference": "4"}]})
    assert math[0]["valid"] and math[0]["score"] == 1.0, math
    items = [{"response": ADD_CODE, "reference": ADD}, {"response": "print(3)", "reference": ADD}]
    code = score(served, {"model": "code", "items": items})
    assert code[0]["score"] == 1.0 and [t["verdict"] for t in code[0]["tests"]] == ["AC", "AC"], code
    assert code[1]["valid"] and code[1]["score"] == 0.5, code
    isolation = httpx.get(served.url + "/health", timeout=10).json()["isolation"]["code"]
    assert "bubblewrap" in isolation and "seccomp" in isolation, isolation
    # The image's HEALTHCHECK (kept by the docker format) passes once /ready does.
    done = served.exec("python", "-c", "print(1)")
    assert done.returncode == 0, done.stderr
    health = podman.podman("healthcheck", "run", served.name, check=False)
    assert "unhealthy" not in health, health


def test_the_image_runs_as_its_own_user_with_the_service_outside_usr(served):
    """Every sandbox mounts the container's /usr: the service's packages and their
    dependencies live in /opt/rewardserve, and nothing importable from the system's
    Python names them."""
    done = served.exec("sh", "-c", "id -u; command -v rewardserve")
    assert done.returncode == 0, done.stderr
    uid, entry = done.stdout.decode().split()
    assert uid == "10001" and entry == "/opt/rewardserve/bin/rewardserve"
    found = served.exec(
        "sh", "-c", "find /usr -name 'rewardserve*' -o -name 'torch' -o -name 'fastapi' -o -name 'transformers' | head"
    )
    assert found.stdout.decode().strip() == "", found.stdout


# Attacks run by the container's code model, each with what it must see.
PROBE = """
import os, socket, sys
out = {}
out["root"] = sorted(os.listdir("/"))
out["proc"] = [p for p in ("/proc/1", "/proc/self/environ", "/proc/self/fd", "/proc/self/root") if os.path.exists(p)]
out["etc"] = sorted(os.listdir("/etc")) if os.path.isdir("/etc") else []
out["env"] = sorted(k for k in os.environ if k.startswith("REWARDSERVE") or k in ("HF_HOME", "VIRTUAL_ENV"))
net = []
for host, port in (("127.0.0.1", 8000), ("10.0.2.2", 80), ("1.1.1.1", 53)):
    try:
        socket.create_connection((host, port), timeout=1).close()
        net.append("open")
    except OSError as exc:
        net.append(type(exc).__name__)
out["net"] = net
writes = []
for path in ("/usr/pwned", "/etc/pwned", "/opt/rewardserve/pwned", "/models/pwned", "/pwned"):
    try:
        open(path, "w").write("x")
        writes.append("written")
    except OSError as exc:
        writes.append(type(exc).__name__)
out["writes"] = writes
reads = []
for path in ("/etc/passwd", "/opt/rewardserve/pyvenv.cfg", "/app/pyproject.toml", "/run/secrets"):
    reads.append(os.path.exists(path))
out["reads"] = reads
mods = []
for name in ("rewardserve", "fastapi", "torch", "transformers"):
    try:
        __import__(name)
        mods.append("imported")
    except ImportError:
        mods.append("missing")
out["modules"] = mods
open("/tmp/mine", "w").write("ok")
out["tmp"] = open("/tmp/mine").read()
print(json.dumps(out))
""".replace("import os, socket, sys", "import json, os, socket, sys")


def test_the_sandbox_holds_inside_the_container(served):
    """No network (not the service's port, not the host, not the outside), no process
    in /proc (at most the one link the sandbox puts there), /etc at most a JDK's
    configuration, no environment of the service, nothing written outside /tmp, nothing
    of the service to read or import; /tmp works."""
    seen = json.loads(run_code(served, PROBE))
    assert set(seen["root"]) <= {"bin", "dev", "etc", "lib", "lib64", "proc", "sbin", "tmp", "usr"}, seen
    assert {"tmp", "usr"} <= set(seen["root"]), seen
    assert seen["proc"] == [] and seen["env"] == [], seen
    assert all(name.startswith("java-") for name in seen["etc"]), seen
    assert "open" not in seen["net"], seen
    assert "written" not in seen["writes"], seen
    assert seen["reads"] == [False] * 4, seen
    assert seen["modules"] == ["missing"] * 4, seen
    assert seen["tmp"] == "ok", seen


def test_a_fork_bomb_is_contained_and_scored_zero(served):
    """A fork bomb gets RE, scored 0 (valid), and the service scores the next item."""
    bomb = "import os\nwhile True:\n    os.fork()"
    results = score(
        served,
        {
            "model": "code",
            "items": [{"response": bomb, "reference": {"inputs": [""], "outputs": ["ok"]}}],
            "options": {"code": {"timeout_s": 1.0, "memory_mb": 256}},
        },
    )
    assert results[0]["valid"] and results[0]["score"] == 0.0, results
    assert [t["verdict"] for t in results[0]["tests"]] == ["RE"], results
    after = score(served, {"model": "code", "items": [{"response": ADD_CODE, "reference": ADD}]})
    assert after[0]["score"] == 1.0, after
    assert httpx.get(served.url + "/ready", timeout=10).status_code == 200


def test_without_the_profile_the_code_model_refuses_to_load_naming_it(image):
    """Docker's default seccomp profile refuses the namespaces bwrap needs: the service
    stops at start with one line naming the setting; it never serves code unsandboxed."""
    with podman.container(image, "--security-opt", f"seccomp={DOCKER_DEFAULT}", name_suffix="noprofile") as box:
        ended = podman.wait_exited(box.name)
        log = box.logs()
    assert ended.get("ExitCode") != 0, log
    lines = [line for line in log.splitlines() if "seccomp-bwrap.json" in line]
    assert lines and "code" in lines[0], log[-3000:]
