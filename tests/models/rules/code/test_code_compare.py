"""The code model's output comparisons (models/rules/code/compare.py). ``lines`` is checked
against LiveCodeBench's own grader as lighteval 0.13.0 (PyPI) ships it,
``lighteval/tasks/tasks/lcb/codegen_metrics.py`` ``grade_stdio``, on every golden pair of
code_golden.py; ``exact`` against verl's client in tests/service/api/code/test_routes.py;
``sandbox_fusion`` against SandboxFusion's judge, whose verdicts on the same pairs
make_sandbox_fusion_verdicts.py wrote (no PyPI package ships that judge), or live where
``SANDBOXFUSION_SRC`` names a checkout of SandboxFusion."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from rewardserve.models.rules.code.compare import same_lines, same_sandbox_fusion, same_tokens, same_value
from tests.models.rules.code.code_golden import golden
from tests.models.rules.code.make_sandbox_fusion_verdicts import VERDICTS, pairs_digest, sandbox_fusion_live

# Run apart: grade_stdio runs the program in its own process with signal.alarm, and
# lighteval's package __init__ imports every task (and their heavy dependencies), so the
# grader's file is loaded by path.
LIVECODEBENCH = """
import importlib.util, json, os, sys
path = os.path.join(sys.argv[1], "tasks", "tasks", "lcb", "codegen_metrics.py")
spec = importlib.util.spec_from_file_location("lcb_codegen_metrics", path)
lcb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lcb)
out = []
for got, want in json.load(sys.stdin):
    code = "import sys\\nsys.stdout.write(" + repr(got) + ")\\n"
    out.append(lcb.grade_stdio(code, [""], [want], timeout=30))
print(json.dumps(out))
"""


def livecodebench_says(pairs: list[tuple[str, str]]) -> list[bool]:
    spec = importlib.util.find_spec("lighteval")  # the Makefile's peers install lighteval==0.13.0
    assert spec is not None and spec.submodule_search_locations, "lighteval is not installed"
    run = subprocess.run(
        [sys.executable, "-c", LIVECODEBENCH, list(spec.submodule_search_locations)[0]],
        input=json.dumps(pairs),
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    assert all(r in ([True], [-2]) for r in results), {str(r) for r in results}  # judged, never crashed
    return [r == [True] for r in results]


@pytest.mark.timeout(300)
def test_lines_is_livecodebench_s_rule_on_every_golden_pair():
    pairs = golden()
    assert len(pairs) >= 100
    theirs = livecodebench_says(pairs)
    ours = [same_lines(got, want) for got, want in pairs]
    differ = [(got[:60], want[:60], t) for (got, want), o, t in zip(pairs, ours, theirs) if o != t]
    assert not differ, differ[:10]
    assert 40 <= sum(ours) <= len(pairs) - 40  # the set has both answers in numbers


def sandbox_fusion_verdicts(pairs: list[tuple[str, str]]) -> list[bool]:
    checkout = os.environ.get("SANDBOXFUSION_SRC")
    if checkout:
        return [v == "1" for v in sandbox_fusion_live(checkout)[1]]
    written = json.loads(VERDICTS.read_text())
    assert written["pairs_sha256"] == pairs_digest(pairs), "code_golden.py changed: run make_sandbox_fusion_verdicts"
    assert written["commit"] == "469de0845cb7d665bc68044d541aa3aa28c5b30a"
    return [v == "1" for v in written["passed"]]


def test_sandbox_fusion_is_sandbox_fusion_s_rule_on_every_golden_pair():
    pairs = golden()
    theirs = sandbox_fusion_verdicts(pairs)
    ours = [same_sandbox_fusion(got, want) for got, want in pairs]
    differ = [(got[:60], want[:60], t) for (got, want), o, t in zip(pairs, ours, theirs) if o != t]
    assert not differ, differ[:10]
    assert 40 <= sum(ours) <= len(pairs) - 40


@pytest.mark.parametrize(
    ("got", "want", "same"),
    [
        ("YES\n", "yes", True),  # case-insensitive, where the default is not
        ("0.333334", "0.333333", True),  # 3e-6 relative: within its 1e-5
        ("0.33334", "0.33333", False),  # 3e-5
        ("1e6", "1000000", True),
        ("1000001", "1000000", True),  # its tolerance takes an integer that is off by one
        ("1 2", "1  2", False),  # a line is compared whole, not by tokens
        ("nan", "nan", True),  # equal as text
        ("nan", "NaN", True),
        ("1\n\n2", "1\n2", False),
    ],
)
def test_sandbox_fusion_s_rule(got, want, same):
    assert same_sandbox_fusion(got, want) is same


def test_lines_refuses_what_livecodebench_would_crash_on():
    assert same_lines("sNaN", "sNaN")  # equal as text
    assert not same_lines("sNaN 1", "sNaN 2")  # Decimal refuses to compare a signalling NaN


@pytest.mark.parametrize(
    ("got", "want", "same"),
    [
        ("3\n", "3", True),
        ("3   \n\n\n", "3\n", True),
        ("1 2\r\n3\r\n", "1 2\n3\n", True),
        ("0.3333333", "0.33333333", True),
        ("1e6", "1000000", False),  # an expected integer takes only an integer
        ("1000001.0", "1000000", False),  # a float's tolerance would pass it
        ("123456790000.0", "123456789012", False),
        ("1000000", "1e6", True),
        ("5", "5.0", True),
        ("-0", "0", True),
        ("1000001", "1000000", False),
        ("50000000000000000", "50000000000000001", False),
        ("nan", "nan", False),
        ("YES", "yes", False),
        ("1 2", "1\n2", False),
        ("", "", True),
        ("", "0", False),
        ("héllo wörld", "héllo  wörld", True),
        ("1_000.5", "1000.5", False),  # float() takes these; a judge does not
        ("١٠٠٠.5", "1000.5", False),
        ("١٠٠٠", "1000", False),
        ("1E+3", "1000.0", True),
        ("inf", "Infinity", True),
    ],
)
def test_the_default_comparison(got, want, same):
    assert same_tokens(got, want) is same


def test_call_results_compare_as_json_with_the_float_rule():
    assert same_value((1, 2.0000000001), [1, 2.0])
    assert not same_value((1, 2.0000000001), [1, 2])  # an expected integer takes no tolerance
    assert not same_value(1000001.0, 1000000)
    assert same_value(1000000.0, 1000000)  # Python's ==, as the peers compare
    assert same_value(3, 3.0000000001)
    assert not same_value([1, 2], [1, 2, 3])
    assert not same_value(True, 1)
    assert same_value({"a": [0.1]}, {"a": [0.10000000001]})
    assert not same_value(float("nan"), float("nan"))
