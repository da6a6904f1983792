"""Math answer equivalence with math-verify (the grader open-r1 and TRL use)."""

from __future__ import annotations

import logging
from typing import Any

from rewardserve.models.rules import RuleError, rule, text_references

# math-verify warns once per process that its own timeouts are off; they are off on
# purpose (see _parse), so its warnings would only be noise in every pool worker.
logging.getLogger("math_verify").setLevel(logging.ERROR)


def _parse(text: str) -> list[Any]:
    from math_verify import parse  # type: ignore[import-untyped]  # ships no type information

    # Timeouts off: math-verify's own use SIGALRM and turn a timeout into "wrong";
    # the pool that runs this rule kills a stuck call and reports it as invalid instead.
    parsed: list[Any] = parse(text, parsing_timeout=None)
    return parsed


def _warm() -> None:
    """Import math-verify (and sympy behind it) in the worker before any call's clock."""
    _parse("$1$")


@rule("math_equiv", warm=_warm)
def math_equiv(response: str, reference: Any, **_: Any) -> float:
    """1.0 when the response's final answer equals the reference mathematically."""
    from math_verify import verify

    if reference is None or str(reference).strip() == "":
        raise RuleError("math_equiv needs a 'reference' answer")
    if isinstance(reference, list):
        raise RuleError("math_equiv compares against one answer, and the reference is a list")
    (reference,) = text_references(reference, "math_equiv")
    gold = _parse(reference) or _parse(f"${reference}$")
    # A parse that found only the raw string (no expression) did not understand it.
    if not any(not isinstance(g, str) for g in gold):
        raise RuleError(f"the reference {reference[:80]!r} is not a parsable answer")
    answer = _parse(response)
    # A response with no parsable answer is a wrong answer, not an invalid item.
    return float(bool(answer) and verify(gold, answer, timeout_seconds=None))
