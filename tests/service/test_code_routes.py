"""SandboxFusion's /run_code here, called by verl 0.9.1's own client:
``verl/utils/reward_score/sandbox_fusion/utils.py`` ``check_correctness`` (installed
``--no-deps`` by the Makefile; the module is loaded from its file, since ``import verl``
pulls in ray and tensordict). Each case gets the result code verl documents for what
SandboxFusion answers: True, False, -2 (runtime error), -3 (time limit)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import httpx
import pytest

from tests.harness import serve_subprocess


def verl_sandbox_fusion():
    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        pytest.skip("verl==0.9.1 is not installed (make install-dev installs it --no-deps)")
    path = Path(spec.origin).parent / "utils" / "reward_score" / "sandbox_fusion" / "utils.py"
    module_spec = importlib.util.spec_from_file_location("verl_sandbox_fusion_utils", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


ADD = "a, b = map(int, input().split())\nprint(a + b)\n"


@pytest.fixture(scope="module")
def url():
    with serve_subprocess(env={"REWARDSERVE_LOG_LEVEL": "warning"}) as base:
        yield base


@pytest.mark.parametrize(
    ("generation", "in_outs", "expected"),
    [
        (ADD, {"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}, [True, True]),
        ("print(3)", {"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}, [True, False]),
        ("raise SystemExit(2)", {"inputs": ["1 2\n"], "outputs": ["3\n"]}, [-2]),
        ("def f(:\n", {"inputs": ["1 2\n"], "outputs": ["3\n"]}, [-2]),
        ("import time\ntime.sleep(30)", {"inputs": ["1 2\n"], "outputs": ["3\n"]}, [-3]),
        (
            "class Solution:\n    def add(self, a, b):\n        return a + b\n",
            {"inputs": ["1\n2", "3\n4"], "outputs": ["3", "8"], "fn_name": "add"},
            [True, False],
        ),
    ],
)
def test_verl_s_sandbox_fusion_client_gets_sandbox_fusion_s_result_codes(url, generation, in_outs, expected):
    verl = verl_sandbox_fusion()
    results, metadata = verl.check_correctness(url + "/run_code", in_outs, generation, timeout=2, memory_limit_mb=512)
    assert results == expected, metadata


def test_run_code_answers_in_sandbox_fusion_s_shape(url):
    with httpx.Client(timeout=30) as http:
        ok = http.post(url + "/run_code", json={"code": "print(input())", "stdin": "hi", "language": "python"})
        other = http.post(url + "/run_code", json={"code": "x", "language": "cobol"})
        ping = http.get(url + "/v1/ping")
    assert ok.status_code == 200 and ok.json()["status"] == "Success"
    run = ok.json()["run_result"]
    assert run["status"] == "Finished" and run["return_code"] == 0 and run["stdout"] == "hi\n" and run["stderr"] == ""
    assert other.status_code == 200 and other.json()["status"] == "SandboxError" and "cobol" in other.json()["message"]
    assert ping.text.strip('"') == "pong"
