"""A rule model names its rule when it is built (at start, beside the other models'
problems), not when it loads: an unknown rule is one line naming the rules there are."""

from __future__ import annotations

import pytest

from rewardserve.models.kinds import build_checked, build_model
from rewardserve.models.rules import rule_names
from rewardserve.models.spec import ModelSpec


def test_an_unknown_rule_source_names_the_known_rules():
    with pytest.raises(ValueError) as err:
        build_checked(ModelSpec(name="r", kind="rule", source="nonexistent_rule"))
    (line,) = str(err.value).splitlines()
    assert line.startswith("model 'r' (kind rule): unknown rule 'nonexistent_rule' (source); known rules: ")
    assert line.endswith(", ".join(rule_names()))
    assert "runner" not in line.lower()  # names rules, not the engine's internals


def test_a_misspelled_rule_gets_the_closest_one():
    with pytest.raises(ValueError, match=r"unknown rule 'math_equal' \(source\); did you mean 'math_equiv'\? known"):
        build_model(ModelSpec(name="m", kind="rule", source="math_equal"))
    with pytest.raises(ValueError, match=r"unknown rule 'exact_mach' \(options.fn\); did you mean 'exact_match'\?"):
        build_model(ModelSpec(name="m", kind="rule", source="anything", options={"fn": "exact_mach"}))


def test_a_known_rule_builds_and_closes_without_loading():
    model = build_model(ModelSpec(name="m", kind="rule", source="anything", options={"fn": "exact_match"}))
    model.close()  # built, never loaded: no pools of its own to close
