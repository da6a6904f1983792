"""Rubric criteria of a hosted rule (models/operations/rubric.py ``host_models``): code_tests and
python criteria run on the served code model, with its args and its operator's, and are
refused where none is served (issue 57, items 1 and 2)."""

from __future__ import annotations

import pytest

from rewardserve.models.errors import RequestError
from rewardserve.models.operations.rubric import hosted_rules, plan_rubric
from rewardserve.models.plan import Peer
from rewardserve.models.spec import ModelSpec
from rewardserve.protocol import RubricRequest
from tests.builders import build_alone

ADD = {"inputs": ["2 3\n"], "outputs": ["5\n"]}
GRADER = "def grade(sample, item):\n    return 1.0\n"
OPERATOR = {"max_timeout_s": 10, "max_memory_mb": 1024, "unsafe_exec": False}


@pytest.fixture(scope="module")
def lent():
    spec = ModelSpec(
        name="code",
        kind="rule",
        source="code_tests",
        options={"timeout_s": 120, "args": {**OPERATOR, "compare": "exact"}},
    )
    model = build_alone(spec)
    model.load()

    def peers(name, param=None):
        assert name == "code", name
        return Peer(model, None, None)

    yield peers
    model.close()


def body(*criteria):
    return RubricRequest(items=[{"response": "print(5)", "reference": ADD}], criteria=list(criteria))


def test_code_criteria_name_the_code_model_as_their_host():
    code = body({"name": "c", "fn": "code_tests"}, {"name": "p", "python": GRADER}, {"name": "m", "fn": "exact_match"})
    assert hosted_rules(code) == {"code_tests"}
    assert hosted_rules(body({"name": "m", "fn": "exact_match"})) == set()


def test_hosted_calls_take_the_model_s_args_and_its_operator_s_apart(lent):
    plan = plan_rubric(
        body({"name": "c", "fn": "code_tests", "args": {"timeout_s": 2}}, {"name": "p", "python": GRADER}),
        None,
        lent,
        {"code_tests": "code"},
    )
    code, grader = plan.calls
    assert code.args == {"compare": "exact", "timeout_s": 2} and code.operator_args == OPERATOR
    assert grader.args == {"source": GRADER} and grader.operator_args == OPERATOR  # not code_tests' own args
    assert code.timeout_s == grader.timeout_s == 120  # the model's call limit


@pytest.mark.parametrize("criterion", [{"name": "c", "fn": "code_tests"}, {"name": "p", "python": GRADER}])
def test_code_criteria_without_a_code_model_are_refused(criterion, lent):
    with pytest.raises(RequestError, match="no code model is served") as refused:
        plan_rubric(body(criterion), None, lent, {})
    assert refused.value.param == ("criteria[0].python" if "python" in criterion else "criteria[0].fn")


@pytest.mark.parametrize(
    ("args", "param"),
    [
        ({"unsafe_exec": True}, "criteria[0].args.unsafe_exec"),
        ({"max_memory_mb": 100_000}, "criteria[0].args.max_memory_mb"),
        ({"timeout_s": 11}, "criteria[0].args.timeout_s"),
        ({"memory_mb": "{{ item.reference }}", "harness": "nope"}, "criteria[0].args.harness"),
        ({"language": "python", "shell": True}, "criteria[0].args.shell"),
    ],
)
def test_code_criteria_args_are_checked_as_options_code_is(args, param, lent):
    with pytest.raises(RequestError) as refused:
        plan_rubric(body({"name": "c", "fn": "code_tests", "args": args}), None, lent, {"code_tests": "code"})
    assert refused.value.param == param, refused.value
