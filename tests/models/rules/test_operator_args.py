"""A rule's operator arguments (models/rules/__init__.py ``operator_args``): set by the
served model alone, never by a request's args, in the planner or in the worker (issue 57,
items 1 and 2)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from rewardserve.models.errors import RequestError
from rewardserve.models.rules import _RULES, Rule, Scored, get_rule, over_cap, rule_names, without_operator_args
from rewardserve.models.rules.worker import RuleCall, _run_one
from rewardserve.models.spec import ModelSpec
from rewardserve.protocol import CodeOptions, Item, ScoreOptions
from tests.builders import build_alone

CODE_OPERATOR_ARGS = {"max_timeout_s", "max_memory_mb", "unsafe_exec"}
ADD = {"inputs": ["2 3\n"], "outputs": ["5\n"]}


def test_the_rules_that_run_code_name_their_operator_args_and_no_other_rule_has_any():
    for name in rule_names():
        rule = get_rule(name)
        if name in ("code_tests", "python_grader"):
            assert rule.operator_args == CODE_OPERATOR_ARGS and rule.served_by == "code_tests", name
            parameters = inspect.signature(rule.fn).parameters
            assert all(parameters[arg].kind is inspect.Parameter.KEYWORD_ONLY for arg in rule.operator_args), name
        else:
            assert rule.operator_args == frozenset() and rule.served_by is None, name


def test_no_request_option_of_the_code_model_is_an_operator_arg():
    assert not set(CodeOptions.model_fields) & CODE_OPERATOR_ARGS


def _shows_args(response: str, reference: Any, **args: Any) -> float:
    return Scored(1.0, repr(sorted(args.items())))


@pytest.fixture
def guarded(monkeypatch):
    """A rule with operator args that shows the args it was called with."""
    get_rule("exact_match")  # the registered rules loaded first
    rule = Rule("shows_args", _shows_args, operator_args=frozenset({"max_n", "unsafe"}))
    monkeypatch.setitem(_RULES, "shows_args", rule)
    return "shows_args"


def test_the_worker_gives_a_rule_the_operator_s_args_whatever_the_request_s_hold(guarded):
    call = RuleCall(guarded, "x", None, {"n": 1, "max_n": 99, "unsafe": True}, operator_args={"max_n": 5})
    assert _run_one(call).reason == repr([("max_n", 5), ("n", 1)])


def test_the_worker_drops_operator_args_that_templates_render(guarded):
    args = {"n": "{{ item.reference }}", "unsafe": "{{ item.reference }}"}
    call = RuleCall(guarded, "x", "7", args, variables={"item": {"reference": "7"}}, operator_args={})
    assert _run_one(call).reason == repr([("n", "7")])


def test_over_cap_names_the_first_arg_over_the_operator_s_cap():
    operator = {"max_timeout_s": 60, "max_memory_mb": 4096}
    assert over_cap({"timeout_s": 60, "memory_mb": 4096}, operator) is None
    assert over_cap({"timeout_s": 6, "memory_mb": 8192}, operator) == ("memory_mb", 8192, 4096)
    assert without_operator_args(get_rule("code_tests"), {"unsafe_exec": True, "timeout_s": 1}) == {"timeout_s": 1}


@pytest.fixture(scope="module")
def code_model():
    spec = ModelSpec(
        name="code",
        kind="rule",
        source="code_tests",
        options={"args": {"max_timeout_s": 10, "max_memory_mb": 1024, "unsafe_exec": False, "compare": "exact"}},
    )
    model = build_alone(spec)
    model.load()
    yield model
    model.close()


def test_the_code_model_s_calls_carry_its_operator_args_apart(code_model):
    options = ScoreOptions(code=CodeOptions(timeout_s=10, memory_mb=512))
    (job,) = code_model.prepare([Item(response="print(5)", reference=ADD)], options)
    call = job.payload
    assert call.operator_args == {"max_timeout_s": 10, "max_memory_mb": 1024, "unsafe_exec": False}
    assert call.args == {"compare": "exact", "timeout_s": 10, "memory_mb": 512}


@pytest.mark.parametrize(("key", "value"), [("timeout_s", 11), ("memory_mb", 2048)])
def test_options_code_over_the_model_s_caps_is_refused(code_model, key, value):
    with pytest.raises(RequestError, match="over model 'code''s limit") as refused:
        code_model.prepare([Item(response="print(5)", reference=ADD)], ScoreOptions(code=CodeOptions(**{key: value})))
    assert refused.value.param == f"options.code.{key}"


def test_request_args_naming_an_operator_arg_are_refused(code_model):
    with pytest.raises(RequestError, match="set by the operator") as refused:
        code_model.check_request_args({"unsafe_exec": True}, "criteria[0].args")
    assert refused.value.param == "criteria[0].args.unsafe_exec"
