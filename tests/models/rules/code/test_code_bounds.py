"""What a completion's runs may cost the code model (models/rules/code/__init__.py, sandbox.py):
its tests' output together and its time are bounded, what is past them is a verdict
(OLE, TLE) and never an invalid item; what an answer shows of the output is bounded too."""

from __future__ import annotations

import json

import pytest

from rewardserve.engine.pools.pool import RulePool
from rewardserve.models.rules.code import ANSWER_BYTES, CodeScore, code_tests, sandbox
from rewardserve.models.rules.worker import RuleCall, call_time_left

pytestmark = pytest.mark.alone  # budgets in wall-clock seconds, against niced sandboxes

SLEEPS = "import time\ntime.sleep(30)\n"


def test_tests_past_the_output_total_are_ole_and_those_before_are_judged():
    """Four tests of 1 MB each pass a 3.5 MB total: the fourth is judged, the rest not run."""
    limits = sandbox.Limits(timeout_s=5.0, output_total_bytes=3_500_000)
    tests = [{"stdin": ""} for _ in range(10)]
    outcome = sandbox.run("print('z' * 1_000_000)", tests, limits)
    assert [r.get("verdict") for r in outcome.results] == [None] * 4 + ["OLE"] * 6
    assert "output together" in outcome.results[-1]["detail"]


def test_fetched_files_count_in_the_output_total():
    """Each test writes a 12 MB file the reference fetches: 256 of them were 3 GB held in
    the rule worker; past 64 MiB together the tests not run are OLE."""
    code = "open('out.bin', 'wb').write(b'f' * 12_000_000)\nprint(1)\n"
    reference = {"inputs": [""] * 12, "outputs": ["1"] * 12, "fetch_files": ["out.bin"]}
    result = code_tests(code, reference)
    verdicts = [t["verdict"] for t in result.tests]
    assert verdicts == ["AC"] * 6 + ["OLE"] * 6, verdicts


def test_tests_past_the_time_budget_are_tle_and_marked_so():
    limits = sandbox.Limits(timeout_s=1.0)
    outcome = sandbox.run(SLEEPS, [{"stdin": ""} for _ in range(10)], limits, budget_s=2.5)
    assert [r.get("verdict") for r in outcome.results] == ["TLE"] * 10
    assert sum(bool(r.get("budget")) for r in outcome.results) >= 7  # at most three ran in 2.5 s


def test_outputs_shown_fit_their_share_of_the_answer_as_json():
    """Control characters take six bytes each in JSON: the share is counted as sent."""
    result = code_tests("print('\\x01' * 2_000_000)", {"inputs": [""], "outputs": ["x"]}, outputs=True)
    (test,) = result.tests
    assert test["verdict"] == "WA" and test["truncated"]
    assert 0 < len(json.dumps(test["stdout"])) - 2 <= 1 << 20
    many = code_tests("print('q' * 100_000)", {"inputs": [""] * 256, "outputs": ["x"] * 256}, outputs=True)
    assert sum(len(t["stdout"]) + len(t["stderr"]) for t in many.tests) <= ANSWER_BYTES
    assert all(t["truncated"] for t in many.tests)  # 32 KiB each of the 100 kB


def test_a_short_run_is_shown_whole_and_an_re_names_its_exception():
    result = code_tests(
        "print('partial')\nraise ValueError('bad thing')\n",
        {"inputs": [""], "outputs": ["x"]},
        outputs=True,
    )
    (test,) = result.tests
    assert test["verdict"] == "RE" and test["detail"] == "ValueError: bad thing"
    assert test["stdout"] == "partial\n" and not test["truncated"]
    quiet = code_tests("raise ValueError('no')", {"inputs": [""], "outputs": ["x"]})
    assert quiet.tests[0]["detail"] == "ValueError: no" and "stdout" not in quiet.tests[0]


def test_a_code_call_answers_within_its_pool_time_limit_with_tle_verdicts():
    """20 tests of 1 s in a call limited to 6 s: the pool killed the call (no answer);
    the rule now knows its limit and answers, the tests it had no time for TLE."""
    assert call_time_left() is None  # outside a pool's call: no budget
    pool = RulePool(workers=1, timeout_s=6.0, memory_mb=1024)
    try:
        reference = {"inputs": [""] * 20, "outputs": ["x"] * 20}
        call = RuleCall("code_tests", SLEEPS, reference, {"timeout_s": 1.0})
        (result,) = pool.run([call]).result(timeout=120)
    finally:
        pool.close()
    assert isinstance(result, CodeScore), result
    assert float(result) == 0.0 and [t["verdict"] for t in result.tests] == ["TLE"] * 20


def test_a_checker_the_budget_leaves_no_time_for_makes_tle_not_an_invalid_item():
    """Each run passes the budget's tests share; the checker, sleeping 2 s a case, cannot
    judge them all before the call's limit: those it did not judge are TLE."""
    checker = "import time\ntime.sleep(2)\nraise SystemExit(0)\n"
    reference = {"inputs": ["1"] * 6, "outputs": ["1"] * 6, "checker": checker}
    pool = RulePool(workers=1, timeout_s=8.0, memory_mb=1024)
    try:
        (result,) = pool.run([RuleCall("code_tests", "print(1)", reference, {})]).result(timeout=120)
    finally:
        pool.close()
    assert isinstance(result, CodeScore), result
    verdicts = [t["verdict"] for t in result.tests]
    assert len(verdicts) == 6 and "TLE" in verdicts and set(verdicts) <= {"AC", "TLE"}, verdicts


def test_a_checker_judges_outputs_that_take_six_times_their_size_as_json_within_the_worker_s_memory():
    """Four clean runs printing 16 MB of control characters each: sent to the checker at
    once, their JSON (six bytes a character) and its copies passed the rule worker's
    1 GiB and the item was invalid. The checker gets them a group at a time."""
    checker = "raise SystemExit(0)\n"  # accepts anything
    reference = {"inputs": ["1"] * 4, "outputs": ["1"] * 4, "checker": checker}
    pool = RulePool(workers=1, timeout_s=120.0, memory_mb=1024)
    try:
        call = RuleCall("code_tests", "import sys\nsys.stdout.write('\\x01' * 16_000_000)\n", reference, {})
        (result,) = pool.run([call]).result(timeout=240)
    finally:
        pool.close()
    assert isinstance(result, CodeScore), result
    assert [t["verdict"] for t in result.tests] == ["AC"] * 4
