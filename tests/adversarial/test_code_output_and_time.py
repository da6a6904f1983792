"""Completions that fail by printing or sleeping too much, against a real service process
(the built-in ``code`` model): each is a valid 0 with its verdicts, never ``valid:
false`` (issue 57, items 3 and 6). Without this, a policy's hostile rollout turned its own
0 into no answer (and verl's adapter, by default, into a failed reward step).

The service's code call limit is 10 s (REWARDSERVE_CODE_CALL_TIMEOUT_S) so that the time
budget is reached in seconds, not the default 300 s."""

from __future__ import annotations

import statistics
import threading
import time

import httpx
import pytest

from tests.harness import serve_subprocess

CALL_LIMIT_S = 10
ANSWER_CAP = 16 << 20  # the output one answer shows (models/rules/code/__init__.py ANSWER_BYTES)


@pytest.fixture(scope="module")
def url():
    env = {"REWARDSERVE_LOG_LEVEL": "warning", "REWARDSERVE_CODE_CALL_TIMEOUT_S": str(CALL_LIMIT_S)}
    with serve_subprocess(env=env) as base:
        yield base


def scored(url: str, code: str, tests: int, **options) -> dict:
    reference = {"inputs": [f"{i}\n" for i in range(tests)], "outputs": [f"{i}\n" for i in range(tests)]}
    body = {"model": "code", "items": [{"response": code, "reference": reference}], "options": {"code": options}}
    answer = httpx.post(url + "/v1/score", json=body, timeout=120)
    assert answer.status_code == 200, answer.text[:2000]
    return answer.json()["results"][0]


def test_eighty_tests_each_printing_15_mb_score_a_valid_zero(url):
    """Every test's record was kept until the call ended: 1.2 GB in the rule worker, past
    its memory limit, and the item invalid. Each output is now judged as it comes and
    dropped; once the tests' output together passes its total, the rest are OLE."""
    result = scored(url, "import sys\nsys.stdout.write('x' * 15_000_000)\n", 80)
    assert result["valid"] and result["score"] == 0.0, result.get("error")
    verdicts = [test["verdict"] for test in result["tests"]]
    assert len(verdicts) == 80 and set(verdicts) <= {"WA", "OLE"}, verdicts
    assert "OLE" in verdicts and verdicts[0] == "WA", verdicts  # the first ones judged, the rest cut off


def test_sixty_tests_sleeping_past_their_time_score_a_valid_zero_of_tles(url):
    """60 tests x 1 s is past the 10 s call limit: the pool killed the call and the item
    was invalid. The item now answers within its budget, the tests it had no time for TLE."""
    start = time.monotonic()
    result = scored(url, "import time\ntime.sleep(30)\n", 60, timeout_s=1.0)
    took = time.monotonic() - start
    assert result["valid"] and result["score"] == 0.0, result.get("error")
    assert [test["verdict"] for test in result["tests"]] == ["TLE"] * 60
    assert any("budget" in (test["detail"] or "") for test in result["tests"])
    assert took < 60, took  # answered, not retried call by call


def test_a_program_that_raises_says_its_exception_in_each_test_s_detail(url):
    result = scored(url, "raise KeyError('no such key: 42')\n", 2)
    assert [test["verdict"] for test in result["tests"]] == ["RE", "RE"]
    assert [test["detail"] for test in result["tests"]] == ["KeyError: 'no such key: 42'"] * 2
    assert "stderr" not in result["tests"][0] or result["tests"][0]["stderr"] is None  # not asked for


def test_outputs_asked_for_are_shrunk_to_the_answer_s_cap_and_say_so(url):
    result = scored(url, "import sys\nsys.stdout.write('y' * 15_000_000)\n", 80, outputs=True)
    assert result["valid"] and result["score"] == 0.0
    shown = sum(len(test["stdout"] or "") + len(test["stderr"] or "") for test in result["tests"])
    assert 0 < shown <= ANSWER_CAP
    assert result["tests"][0]["truncated"] and result["tests"][0]["stdout"].startswith("yyy")


def test_a_submission_of_256_cases_printing_a_megabyte_each_stays_small_and_the_service_answers(url):
    """256 cases each printing 1 MB to stdout and stderr made a 285 MB answer, serialized on
    the event loop: /health stalled for 5 s. The answer now shows at most 16 MiB of
    output, and /health answers meanwhile."""
    program = "import sys\nsys.stdout.write('o' * 1_000_000)\nsys.stderr.write('e' * 1_000_000)\n"
    row = {"test": [{"input": {"stdin": f"{i}\n"}, "output": {"stdout": f"{i}\n"}} for i in range(256)]}
    body = {
        "dataset": "mine",
        "id": 1,
        "completion": f"```python\n{program}```",
        "config": {
            "dataset_type": "CommonOJDataset",
            "language": "python",
            "provided_data": row,
            "extra": {"run_all_cases": True},
        },
    }
    latencies: list[float] = []
    done = threading.Event()

    def probe() -> None:
        with httpx.Client(timeout=30) as http:
            while not done.is_set():
                start = time.monotonic()
                http.get(url + "/health").raise_for_status()
                latencies.append(time.monotonic() - start)
                time.sleep(0.05)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        answer = httpx.post(url + "/submit", json=body, timeout=120)
    finally:
        done.set()
        prober.join()
    assert answer.status_code == 200, answer.text[:2000]
    cases = answer.json()["tests"]
    assert len(cases) == 256 and not answer.json()["accepted"]
    runs = [case["exec_info"]["run_result"] or {} for case in cases]
    shown = sum(len(run.get("stdout") or "") + len(run.get("stderr") or "") for run in runs)
    assert 0 < shown <= ANSWER_CAP, shown
    assert len(answer.content) < ANSWER_CAP + (2 << 20), len(answer.content)  # the rest: the row's cases
    assert len(latencies) >= 3 and max(latencies) < 0.5, (max(latencies), statistics.median(latencies))


def test_an_answer_of_many_code_items_shows_at_most_the_cap_of_output_in_all(url):
    """32 items each showing its own 1 MiB of stdout were a 32 MiB answer; one answer
    shows 16 MiB of output whatever the number of its items."""
    reference = {"inputs": [""], "outputs": ["1"]}
    items = [{"response": f"print({i})\nprint('w' * 2_000_000)\n", "reference": reference} for i in range(32)]
    body = {"model": "code", "items": items, "options": {"code": {"outputs": True}}}
    answer = httpx.post(url + "/v1/score", json=body, timeout=120)
    assert answer.status_code == 200, answer.text[:2000]
    tests = [test for result in answer.json()["results"] for test in result["tests"]]
    assert len(tests) == 32 and all(test["verdict"] == "WA" and test["truncated"] for test in tests)
    shown = sum(len(test["stdout"]) + len(test["stderr"]) for test in tests)
    share = ANSWER_CAP // 64  # each test's stdout and stderr, 32 tests (a newline is two bytes of JSON)
    assert shown <= ANSWER_CAP and all(share - 8 <= len(test["stdout"]) <= share for test in tests), shown
    assert [test["stdout"].split("\n")[0] for test in tests] == [str(i) for i in range(32)]  # each its own start
