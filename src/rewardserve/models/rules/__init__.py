"""Rule rewards: small plain functions, registered by name.

A rule takes the response text, the item's reference and its own keyword arguments, and
returns a score (1.0 / 0.0 for pass / fail, or a graded value). A rule that cannot judge
raises ``RuleError``: the item becomes ``valid: false``, never a silent 0.

Every rule runs in a pool worker with a time and a memory limit (worker.py): sympy
can run for minutes on a crafted formula, a regex can backtrack for hours. A rule whose
cost grows faster than its input declares ``limits``: a cheap check, run in the serving
process before the call is queued, that names the field over its cap (a 413; a 422 for a
count over its cap, such as a code item's number of tests).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from rewardserve.protocol import ErrorType

RuleFn = Callable[..., float]
# Caps every rule has; rules with super-linear costs add their own (``limits``).
MAX_RESPONSE_CHARS = 1_000_000
MAX_REFERENCES = 64


class Limit(NamedTuple):
    """An item's input over a cap: the field (under ``items[i]``), what is over, and the
    error type (payload_too_large: 413; invalid_request: 422)."""

    field: str
    message: str
    error_type: ErrorType = "payload_too_large"


# (response, reference, args) -> None, or the Limit the input is over.
LimitsFn = Callable[[str, Any, dict[str, Any]], "Limit | None"]

# Modules that define rules; imported on first lookup (in the server and in pool workers).
_RULE_MODULES = (
    "rewardserve.models.rules.math",
    "rewardserve.models.rules.text",
    "rewardserve.models.rules.structure",
    "rewardserve.models.rules.similarity",
    "rewardserve.models.rules.code",
)


class Scored(float):
    """A rule's score with why: a rubric shows ``reason`` beside the criterion's score
    (a format rule's 0 says what it looked for)."""

    reason: str

    def __new__(cls, value: float, reason: str) -> Scored:
        out = super().__new__(cls, value)
        out.reason = reason
        return out

    def __reduce__(self) -> tuple[type[Scored], tuple[float, str]]:  # back from a worker whole
        return (Scored, (float(self), self.reason))


class RuleError(ValueError):
    """The rule cannot judge this input (say, an unparsable reference)."""


@dataclass(frozen=True)
class Rule:
    name: str
    fn: RuleFn
    limits: LimitsFn | None = None
    # The pool it runs in (runner.py): "light", or "embedding" for rules holding a model.
    pool: str = "light"
    # Loads what the rule needs once per worker, outside any call's time limit.
    warmer: Callable[[], None] | None = None
    # Checked once where the model loads, with the model's args: what the rule runs on,
    # in words (the code rule's sandbox); raises, naming what is missing, where the rule
    # cannot run here.
    startup: Callable[[dict[str, Any]], str] | None = None
    # The ScoreOptions field whose values a request may pass over the model's args ("code").
    request_options: str | None = None
    # Keyword arguments only the operator sets (a served model's args, the settings): a
    # sandbox's bypass, the caps on what a request asks. No request names them, by any route.
    operator_args: frozenset[str] = frozenset()
    # As a rubric criterion, the rule runs on the served model of this rule (its operator
    # args, its settings) and is refused where none is served: code runs only where the
    # operator serves a code model.
    served_by: str | None = None

    def check(self, response: str, reference: Any, args: dict[str, Any]) -> Limit | None:
        """Every rule's caps (response size, number of references), then its own."""
        problem = over("response", len(response), MAX_RESPONSE_CHARS)
        if problem is None and isinstance(reference, list):
            problem = over("reference", len(reference), MAX_REFERENCES, "references")
        if problem is None and self.limits is not None:
            problem = self.limits(response, reference, args)
        return problem

    def warm(self) -> None:
        if self.warmer is not None:
            self.warmer()


_RULES: dict[str, Rule] = {}


def rule(
    name: str,
    *,
    limits: LimitsFn | None = None,
    pool: str = "light",
    warm: Callable[[], None] | None = None,
    startup: Callable[[dict[str, Any]], str] | None = None,
    request_options: str | None = None,
    operator_args: tuple[str, ...] = (),
    served_by: str | None = None,
) -> Callable[[RuleFn], RuleFn]:
    def add(fn: RuleFn) -> RuleFn:
        _RULES[name] = Rule(name, fn, limits, pool, warm, startup, request_options, frozenset(operator_args), served_by)
        return fn

    return add


def without_operator_args(rule: Rule, args: dict[str, Any]) -> dict[str, Any]:
    """A request's args less any the operator alone sets."""
    return {k: v for k, v in args.items() if k not in rule.operator_args}


def over_cap(asked: dict[str, Any], operator: dict[str, Any]) -> tuple[str, float, float] | None:
    """The first of a request's numeric args over the operator's cap on it (``max_<arg>``):
    its name, its value and the cap."""
    for key, value in asked.items():
        cap = operator.get(f"max_{key}")
        if isinstance(cap, (int, float)) and isinstance(value, (int, float)) and value > cap:
            return key, value, cap
    return None


def over(field: str, size: int, cap: int, unit: str = "characters") -> Limit | None:
    """The Limit of a size check (413), or None when ``size`` is within ``cap``."""
    if size <= cap:
        return None
    return Limit(field, f"{size} {unit}, over this rule's limit of {cap}")


def text_references(reference: Any, rule_name: str) -> list[str]:
    """The references a text rule compares against: a string, a number, or a list of
    them. An object (``{"answer": "42"}``) is not one: comparing against its printed form
    would score a right answer 0 and call it valid, so the rule refuses it and says how
    to name the field."""
    if reference is None or reference == [] or reference == "":
        raise RuleError(f"{rule_name} needs a 'reference'")
    refs = reference if isinstance(reference, list) else [reference]
    for ref in refs:
        if isinstance(ref, (dict, list)):
            raise RuleError(
                f"{rule_name} compares text, and the reference is "
                f"{type(ref).__name__ if isinstance(ref, list) else 'an object'} "
                f"({str(ref)[:60]}); name the part to compare in the criterion, e.g. "
                'args: {"reference": "{{ item.reference.answer }}"}'
            )
    return [str(r) for r in refs]


def with_named_reference(reference: Any, args: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """A criterion's ``args.reference`` (rendered already, so a template such as
    ``{{ item.reference.answer }}`` picks a field) replaces the item's reference."""
    if "reference" not in args:
        return reference, args
    rest = dict(args)
    return rest.pop("reference"), rest


def reference_texts(reference: Any) -> list[str]:
    """A reference (or a list of them) as strings, for size checks."""
    if reference is None:
        return []
    refs = reference if isinstance(reference, list) else [reference]
    return [r if isinstance(r, str) else str(r) for r in refs]


@functools.cache  # once loaded, a lookup is a dict's (a request may look up thousands)
def _load_rules() -> None:
    for module in _RULE_MODULES:
        importlib.import_module(module)


def get_rule(name: str) -> Rule:
    """A registered rule; for a ``module:function`` (the operator's own, custom.py) a
    rule of the light pool whose calls the worker makes itself."""
    _load_rules()
    try:
        return _RULES[name]
    except KeyError:
        from rewardserve.models.rules.custom import is_custom

        if is_custom(name):
            return _custom_rule(name)
        raise KeyError(f"unknown rule {name!r}; known rules: {', '.join(sorted(_RULES))}") from None


@functools.lru_cache(maxsize=1024)
def _custom_rule(name: str) -> Rule:
    def only_in_a_worker(response: str, reference: Any, **args: Any) -> float:
        raise RuleError(f"{name} is called by a rule worker, with the item's prompt and columns")

    return Rule(name, only_in_a_worker)


def rule_names() -> list[str]:
    _load_rules()
    return sorted(_RULES)
