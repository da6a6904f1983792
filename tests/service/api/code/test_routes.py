"""SandboxFusion's /run_code and /submit here. /submit is called by sandbox-fusion 0.3.7's
own client (PyPI; ``submit`` in its client.py); /run_code by verl 0.9.1's own client:
``verl/utils/reward_score/sandbox_fusion/utils.py`` ``check_correctness`` (installed
``--no-deps`` by the Makefile; the module is loaded from its file, since ``import verl``
pulls in ray and tensordict). Each case gets the result code verl documents for what
SandboxFusion answers: True, False, -2 (runtime error), -3 (time limit); and on every
golden pair of tests/models/rules/code/code_golden.py, verl's pass / fail is the code model's
``exact`` comparison."""

from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path

import httpx
import pytest

from rewardserve.models.rules.code.compare import same_exact
from tests.harness import serve_subprocess
from tests.models.rules.code.code_golden import golden


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


@pytest.mark.timeout(240)
def test_exact_is_verl_s_rule_on_every_golden_pair(url):
    # The program writes the pair's output as it is; verl's client compares it with the
    # expected one by its own rule, the code model's ``exact`` by ours.
    verl = verl_sandbox_fusion()
    pairs = golden()
    writer = "import json, sys\nsys.stdout.write(json.loads(sys.stdin.read()))\n"
    in_outs = {"inputs": [json.dumps(got) for got, _ in pairs], "outputs": [want for _, want in pairs]}
    results, metadata = verl.check_correctness(url + "/run_code", in_outs, writer, timeout=10, memory_limit_mb=512)
    unjudged = [m for m, r in zip(metadata, results) if r not in (True, False)]
    assert not unjudged, unjudged[:3]
    differ = [(got[:60], want[:60], r) for (got, want), r in zip(pairs, results) if same_exact(got, want) != r]
    assert not differ, differ[:10]
    assert 40 <= sum(results) <= len(pairs) - 40


@pytest.mark.skipif(not Path("/usr/bin/g++").exists(), reason="no g++ here")
def test_verl_s_client_on_cpp_gets_its_compile_error_code(url):
    verl = verl_sandbox_fusion()
    add = "#include <iostream>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b << std::endl; }\n"
    in_outs = {"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}
    results, _ = verl.check_correctness(url + "/run_code", in_outs, add, timeout=10, language="cpp")
    assert results == [True, True]
    results, metadata = verl.check_correctness(url + "/run_code", in_outs, "int main() {", timeout=10, language="cpp")
    assert results == [-4, -4], metadata


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


@pytest.mark.parametrize(
    ("code", "language", "summary"),
    [
        ("print(input())", "python", "Success"),
        ("raise SystemExit(3)", "python", "RunFailed"),
        ("import time\ntime.sleep(30)", "python", "RunTimeout"),
        ("int main() {", "cpp", "CompileFailed"),
    ],
)
def test_sandbox_fusion_s_own_client_reads_our_answers(url, code, language, summary):
    """sandbox-fusion 0.3.7 (PyPI, the SandboxFusion client): its ``run_code`` sends its
    own RunCodeRequest, parses our answer into its RunCodeResponse, and its
    ``summary_run_code_result`` reads it as SandboxFusion's server would have it read."""
    sandbox_fusion = pytest.importorskip("sandbox_fusion")  # the Makefile installs it --no-deps
    if language == "cpp" and not Path("/usr/bin/g++").exists():
        pytest.skip("no g++ here")
    request = sandbox_fusion.RunCodeRequest(code=code, language=language, stdin="hi", run_timeout=2)
    response = sandbox_fusion.run_code(request, endpoint=url, max_attempts=1, client_timeout=60)
    mapping = sandbox_fusion.SummaryMapping(
        CompileFailed="CompileFailed", RunFailed="RunFailed", RunTimeout="RunTimeout", CompileTimeout="CompileTimeout"
    )
    assert sandbox_fusion.summary_run_code_result(response, mapping) == summary, response
    if summary == "Success":
        assert response.run_result.stdout == "hi\n"


def test_files_go_in_and_fetch_files_come_back_through_sandbox_fusion_s_client(url):
    sandbox_fusion = pytest.importorskip("sandbox_fusion")
    code = "words = open('data/in.txt').read().split()\nopen('out.txt', 'w').write(' '.join(reversed(words)))\n"
    request = sandbox_fusion.RunCodeRequest(
        code=code,
        language="python",
        files={"data/in.txt": base64.b64encode(b"a b c").decode(), "unused": None},
        fetch_files=["out.txt", "missing.txt"],
    )
    response = sandbox_fusion.run_code(request, endpoint=url, max_attempts=1, client_timeout=60)
    assert response.status == "Success", response
    assert {path: base64.b64decode(data) for path, data in response.files.items()} == {"out.txt": b"c b a"}
    with httpx.Client(timeout=30) as http:
        escape = http.post(url + "/run_code", json={"code": "", "language": "python", "files": {"../x": "YQ=="}})
    assert escape.status_code == 200 and escape.json()["status"] == "SandboxError" and ".." in escape.json()["message"]


PARITY = "n = int(input())\nprint('YES' if n % 2 == 0 else 'NO')\n"
PARITY_ROW = {
    "test": [
        {"input": {"stdin": "4\n"}, "output": {"stdout": "yes\n"}},  # SandboxFusion's judge ignores case
        {"input": {"stdin": "3\n"}, "output": {"stdout": "no"}},
        {"input": {"stdin": "8\n"}, "output": {"stdout": "YES"}},
    ]
}


def submitted(url, completion, row=PARITY_ROW, **config):
    """sandbox-fusion 0.3.7's own ``submit`` (client.py), with a CommonOJDataset row given
    inline as SandboxFusion's ``provided_data``; its EvalResult, parsed by its own model."""
    sandbox_fusion = pytest.importorskip("sandbox_fusion")
    test_config = sandbox_fusion.TestConfig(
        dataset_type="CommonOJDataset", language="python", provided_data=row, **config
    )
    request = sandbox_fusion.SubmitRequest(dataset="mine", id=7, completion=completion, config=test_config)
    return sandbox_fusion.submit(request, endpoint=url, max_attempts=1, client_timeout=60)


def test_sandbox_fusion_s_client_submits_a_completion_and_reads_each_case(url):
    completion = f"Even or odd:\n```\nprint('draft')\n```\nFinal:\n```python\n{PARITY}```\n"
    result = submitted(url, completion)
    assert result.id == 7 and result.accepted, result
    assert result.extracted_code == PARITY.rstrip("\n")  # the python block, as SandboxFusion takes it
    assert [case.passed for case in result.tests] == [True, True, True]
    assert [case.exec_info.run_result.stdout for case in result.tests] == ["YES\n", "NO\n", "YES\n"]
    assert result.tests[1].test_info == PARITY_ROW["test"][1]


def test_a_failed_case_ends_a_submission_unless_every_case_is_asked_for(url):
    completion = "```python\nprint('YES')\n```"
    result = submitted(url, completion)
    assert not result.accepted and [case.passed for case in result.tests] == [True, False]
    assert result.tests[1].exec_info.status == "Success"  # it ran; its output was wrong
    every = submitted(url, completion, extra={"run_all_cases": True})
    assert not every.accepted and [case.passed for case in every.tests] == [True, False, True]
    crashed = submitted(url, "```python\nraise SystemExit(3)\n```")
    assert [case.exec_info.run_result.return_code for case in crashed.tests] == [3]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"dataset_type": "HumanEvalDataset"}, "config.dataset_type"),
        ({"custom_extract_logic": "import os"}, "config"),
        ({"language": "php"}, "config.language"),
        ({"language": None}, "config.language"),
        ({"provided_data": [PARITY_ROW]}, "config"),
        ({"provided_data": {"test": [{"input": {"stdin": 1}, "output": {"stdout": "1"}}]}}, "config"),
        ({"provided_data": {"test": "[not json"}}, "config"),
        ({"provided_data": {"test": PARITY_ROW["test"] * 100}}, "items[0].reference"),  # the code model's cap
    ],
)
def test_a_submission_this_service_cannot_judge_is_refused_not_scored_zero(url, change, named):
    body = {
        "dataset": "mine",
        "id": 1,
        "completion": "print(1)",
        "config": {"dataset_type": "CommonOJDataset", "language": "python", "provided_data": PARITY_ROW, **change},
    }
    with httpx.Client(timeout=30) as http:
        answer = http.post(url + "/submit", json=body)
    assert answer.status_code == 422, answer.text  # invalid_request, as on every route
    assert answer.json()["error"]["param"] == named
    sandbox_fusion = pytest.importorskip("sandbox_fusion")
    request = sandbox_fusion.SubmitRequest(**body)
    assert not sandbox_fusion.submit_safe(request, endpoint=url, max_attempts=1).accepted  # its client's rejection


def _running(marker: str) -> int:
    """Processes on this machine whose command line holds ``marker``."""
    count = 0
    for entry in Path("/proc").iterdir():
        try:
            count += marker in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
    return count


def test_a_client_that_goes_away_takes_its_running_code_with_it(url):
    """A completion sleeps in a child process; once that process runs, its caller
    disconnects: the service kills the call, and the sandbox with everything in it goes."""
    import json
    import socket
    import time
    from urllib.parse import urlsplit

    marker = "47.25"
    code = f"import subprocess\nsubprocess.run(['/usr/bin/sleep', '{marker}'])\nprint(3)"
    body = {"model": "code", "items": [{"response": code, "reference": {"inputs": [""], "outputs": ["3"]}}]}
    body["options"] = {"code": {"timeout_s": 50}}
    data = json.dumps(body).encode()
    parts = urlsplit(url)
    head = (
        f"POST /v1/score HTTP/1.1\r\nhost: {parts.hostname}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\n\r\n"
    ).encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as caller:
        caller.sendall(head + data)
        deadline = time.monotonic() + 20
        while not _running(f"sleep {marker}") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _running(f"sleep {marker}") == 1, "the completion's child never started"
    deadline = time.monotonic() + 20
    while _running(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _running(f"sleep {marker}") == 0
