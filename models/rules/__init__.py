"""Rule rewards: small plain functions, registered by name.

A rule takes the response text, the item's reference and its own keyword arguments, and
returns a score (1.0 / 0.0 for pass / fail, or a graded value). A rule that cannot judge
raises ``RuleError``: the item becomes ``valid: false``, never a silent 0.

``isolated`` rules (math-verify's sympy can run for minutes on a crafted input) run in a
process pool that kills them at a timeout.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

RuleFn = Callable[..., float]

# Modules that define rules; imported on first lookup (in the server and in pool workers).
_RULE_MODULES = (
    "rewardserve.models.rules.math",
    "rewardserve.models.rules.text",
    "rewardserve.models.rules.structure",
    "rewardserve.models.rules.similarity",
)


class RuleError(ValueError):
    """The rule cannot judge this input (say, an unparsable reference)."""


@dataclass(frozen=True)
class Rule:
    name: str
    fn: RuleFn
    isolated: bool


_RULES: dict[str, Rule] = {}


def rule(name: str, *, isolated: bool = False) -> Callable[[RuleFn], RuleFn]:
    def add(fn: RuleFn) -> RuleFn:
        _RULES[name] = Rule(name, fn, isolated)
        return fn

    return add


def _load_rules() -> None:
    for module in _RULE_MODULES:  # cached by the import system after the first call
        importlib.import_module(module)


def get_rule(name: str) -> Rule:
    _load_rules()
    try:
        return _RULES[name]
    except KeyError:
        raise KeyError(f"unknown rule {name!r}; known rules: {', '.join(sorted(_RULES))}")


def rule_names() -> list[str]:
    _load_rules()
    return sorted(_RULES)


def call_rule(name: str, response: str, reference: Any, args: dict[str, Any]) -> float:
    """Entry point for pool workers: look the rule up by name and run it."""
    return float(get_rule(name).fn(response, reference, **args))
