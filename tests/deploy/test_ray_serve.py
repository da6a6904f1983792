"""The service as a Ray Serve application (rewardserve.service.ray_serve) on a local Ray
instance: two replicas of a small model, 500 requests from 8 concurrent clients, one
replica's actor killed mid-run: every request answered, every score the model's own.

Ray runs from .venv-ray (`make ray-venv`, which `make test` runs: ray[serve] brings
uvloop and httptools, which uvicorn would pick up in .venv); this process only sends
requests. Where ray could not be installed the test skips with the installer's error.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from rewardserve.client import RewardClient
from tests.builders import reference_outcome_scores
from tests.harness import free_port

ROOT = Path(__file__).resolve().parents[2]
RAY_PYTHON = ROOT / ".venv-ray" / "bin" / "python"
REQUESTS = 500
CLIENTS = 8

DRIVER = """
import sys, ray
from ray import serve
from rewardserve.service.ray_serve import app
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
serve.start(http_options={"host": "127.0.0.1", "port": int(sys.argv[1])})
serve.run(app({"config": sys.argv[2], "replicas": "2", "num_cpus": "0.5", "compile": "false",
               "log_level": "warning"}), name="rewardserve", route_prefix="/")
print("READY", flush=True)
sys.stdin.read()
serve.shutdown()
ray.shutdown()
"""


def replica_pids(driver: subprocess.Popen) -> list[int]:
    """The Ray worker processes that hold our replicas (their title names the deployment),
    in the driver's session only: a second test run on the machine has replicas too."""
    pids = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if "ServeReplica:rewardserve:rewardserve" in " ".join(proc.info["cmdline"] or []):
                if os.getsid(proc.info["pid"]) == driver.pid:
                    pids.append(proc.info["pid"])
        except (psutil.Error, ProcessLookupError):
            continue
    return pids


RAY_FAILED = ROOT / ".venv-ray.failed"


def ray_missing() -> str | None:
    """Why Ray Serve cannot run here, or None."""
    if RAY_FAILED.exists():
        return "ray could not be installed here: " + RAY_FAILED.read_text()[-500:]
    if not RAY_PYTHON.exists():
        return "Ray Serve runs from .venv-ray: make ray-venv"
    return None


@pytest.mark.long(70)
def test_two_ray_replicas_answer_everything_through_a_replica_kill(qwen3_rm, tmp_path):
    if reason := ray_missing():
        print(reason)
        pytest.skip(reason)
    config = tmp_path / "models.yaml"
    config.write_text(f"models:\n  - {{name: rm, source: {qwen3_rm}}}\n")
    port = free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1"}
    driver = subprocess.Popen(
        [str(RAY_PYTHON), "-c", DRIVER, str(port), str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "ray.log", "wb"),
        env=env,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        line = ""
        while "READY" not in line:
            assert driver.poll() is None and time.monotonic() < deadline, (tmp_path / "ray.log").read_text()[-3000:]
            line = driver.stdout.readline()
        pids = replica_pids(driver)
        assert len(pids) == 2, pids
        texts = [f"answer number {k}: {'yes ' * (k % 7)}done" for k in range(REQUESTS)]
        prompt = "Say something."
        scores: dict[int, float] = {}
        done = threading.Event()
        answered = []
        clients = [RewardClient(f"http://127.0.0.1:{port}", max_retries=6) for _ in range(CLIENTS)]

        def one(k: int) -> None:
            result = clients[k % CLIENTS].score("rm", [{"prompt": prompt, "response": texts[k]}]).results[0]
            assert result.valid, result.error
            scores[k] = result.score
            answered.append(k)
            if len(answered) == REQUESTS // 5:
                done.set()

        def kill_one_replica() -> None:
            done.wait(120)
            os.kill(pids[0], signal.SIGKILL)

        killer = threading.Thread(target=kill_one_replica)
        killer.start()
        with ThreadPoolExecutor(CLIENTS) as pool:
            list(pool.map(one, range(REQUESTS)))
        killer.join()
        assert not psutil.pid_exists(pids[0]) or psutil.Process(pids[0]).status() == psutil.STATUS_ZOMBIE
        assert len(scores) == REQUESTS
        reference = reference_outcome_scores(
            qwen3_rm, [[{"role": "user", "content": prompt}, {"role": "assistant", "content": t}] for t in texts]
        )
        assert [scores[k] for k in range(REQUESTS)] == pytest.approx([r[0] for r in reference], abs=1e-4)
    finally:
        if driver.poll() is None:
            driver.stdin.close()
            try:
                driver.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait(timeout=10)
