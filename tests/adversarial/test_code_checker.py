"""A reference's checker against completions that try to break it: a checker that fails
on a completion's output must not turn that wrong answer into an invalid item (which a
trainer drops rather than penalises)."""

from __future__ import annotations

import pytest

from rewardserve.models.rules import RuleError
from tests.adversarial.test_code_sandbox import run

# Checkers as references write them: one that gives up (testlib's "fail", exit 3) on an
# output it cannot read, and one whose time grows with the number it reads.
GIVES_UP = (
    "import sys\n"
    "try:\n"
    "    got = int(open(sys.argv[2]).read())\n"
    "except ValueError:\n"
    "    sys.exit(3)\n"
    "sys.exit(0 if got == int(open(sys.argv[3]).read()) else 1)\n"
)
WALKS = (
    "import sys\n"
    "n = int(open(sys.argv[2]).read())\n"
    "sys.exit(0 if sum(1 for _ in range(n)) == int(open(sys.argv[3]).read()) else 1)\n"
)


def test_an_output_the_checker_cannot_judge_is_a_wrong_answer(monkeypatch):
    """The checker gave up on "six", or ran out of time on 10**15, and the item was
    invalid: a policy learns to print what its checker cannot judge whenever it does not
    know the answer (invalid items are dropped, not penalised). A checker that fails on
    an output is asked about the expected answer in its place; it accepts that, so the
    output was at fault: WA."""
    from rewardserve.models.rules import code

    monkeypatch.setattr(code, "CHECKER_TIMEOUT_S", 1.0)  # the completion's own 1 s
    for checker in (GIVES_UP, WALKS):
        reference = {"inputs": ["3", "4"], "outputs": ["6", "8"], "checker": checker}
        for program, verdicts in [
            ("print('six' if input() else 0)", ["WA", "WA"]),
            ("print(10 ** 15)", ["WA", "WA"]),
            ("n = int(input())\nprint(n * 2 if n == 3 else 'eight')", ["AC", "WA"]),
            ("print(int(input()) * 2)", ["AC", "AC"]),
        ]:
            result, took = run(program, reference)
            assert [t["verdict"] for t in result.tests] == verdicts, (checker, program, result.tests)
            assert took < 30
        binary, _ = run("print('six')", reference, binary=True)
        assert float(binary) == 0.0 and [t["verdict"] for t in binary.tests] == ["WA"], binary.tests


def test_a_checker_that_fails_on_its_own_answer_makes_the_item_invalid():
    """Where the checker fails on the expected answer too, the reference is broken, not
    the completion: the item is invalid, with the checker's reason."""
    with pytest.raises(RuleError, match="checker failed on test 0: exit 3; and on its own answer"):
        run("print('six')", {"inputs": ["3"], "outputs": ["six"], "checker": GIVES_UP})
    with pytest.raises(RuleError, match="checker failed"):
        run("print(6)", {"inputs": ["3"], "outputs": ["6"], "checker": "raise SystemExit(7)"})


def test_an_output_that_floods_the_checker_is_a_wrong_answer_not_an_invalid_item():
    """A checker that reads every token ran under the completion's memory limit; 16 MB of
    output made it fail, and the wrong answer became "invalid" (dropped, not penalised).
    The checker has limits of its own, and its failure on an outsized output is a WA."""
    checker = (
        "import sys\n"
        "out = [float(x) for x in open(sys.argv[2]).read().split()]\n"
        "ans = [float(x) for x in open(sys.argv[3]).read().split()]\n"
        "sys.exit(0 if len(out) == len(ans) and all(abs(a - b) <= 1e-6 for a, b in zip(out, ans)) else 1)\n"
    )
    reference = {"inputs": ["3"], "outputs": ["6"], "checker": checker}
    flood, took = run("import sys\nsys.stdout.write('1 ' * ((8 << 20) - 10))", reference)
    assert float(flood) == 0.0 and [t["verdict"] for t in flood.tests] == ["WA"], flood.tests
    assert took < 30
