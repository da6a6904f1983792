"""Rubric rewards: each item is graded by weighted criteria, rules or judge questions,
and the criterion scores are aggregated into the item's reward.

This module holds what does not need a model: templated criterion fields, running rule
criteria (isolated rules in a killable process pool), and the aggregations. Judge
criteria are answered by a verifier model (``VerifierModel.prepare_judge``).
"""

from __future__ import annotations

import json
import os
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from jinja2 import TemplateError

from rewardserve.client.protocol import Aggregation, Criterion, CriterionResult, Item
from rewardserve.models.base import ItemError, RequestError
from rewardserve.models.formula import FormulaError, compile_formula, evaluate
from rewardserve.models.judging import _jinja, item_variables
from rewardserve.models.rules import RuleError, get_rule

MAX_TEMPLATE_OUTPUT = 100_000


def render_field(value: Any, variables: dict[str, Any]) -> Any:
    """Render ``{{ ... }}`` in strings, recursively through lists and dicts."""
    if isinstance(value, str):
        if "{{" not in value and "{%" not in value:
            return value
        try:
            out = _jinja().from_string(value).render(**variables)
        except TemplateError as exc:
            raise ItemError(f"template field {value[:60]!r}: {exc}") from exc
        return out[:MAX_TEMPLATE_OUTPUT]
    if isinstance(value, list):
        return [render_field(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: render_field(v, variables) for k, v in value.items()}
    return value


def response_with_tool_calls(item: Item) -> str:
    """The graded text; an assistant turn's own tool calls appended as ``<tool_call>``
    blocks, so tool-call rules see them."""
    text = item.response_text()
    if item.messages:
        last = next((m for m in reversed(item.messages) if m.role == "assistant"), None)
        for call in (last.tool_calls or []) if last else []:
            args = call.function.arguments
            args = json.loads(args) if isinstance(args, str) and args.strip() else (args or {})
            text += f"\n<tool_call>{json.dumps({'name': call.function.name, 'arguments': args})}</tool_call>"
    return text


def check_criteria(criteria: list[Criterion], aggregation: Aggregation, param: str) -> None:
    """Request-time checks: unique names, known rules, a safe formula (422 otherwise)."""
    names = [c.name for c in criteria]
    if not criteria:
        raise RequestError("an item needs at least one criterion", param=param)
    if len(set(names)) != len(names):
        raise RequestError("criterion names must be unique", param=param)
    for index, criterion in enumerate(criteria):
        if criterion.fn is not None:
            try:
                get_rule(criterion.fn)
            except KeyError as exc:
                raise RequestError(str(exc.args[0]), param=f"{param}[{index}].fn") from exc
    if aggregation.mode == "formula":
        try:
            compile_formula(aggregation.formula or "", set(names))
        except FormulaError as exc:
            raise RequestError(str(exc), param="aggregation.formula") from exc
    if aggregation.mode in ("weighted_mean", "threshold") and sum(c.weight for c in criteria) <= 0:
        raise RequestError("the criteria's weights sum to 0", param=param)


class RuleRunner:
    """Runs rule criteria; isolated rules go to a process pool created on first use."""

    def __init__(self, workers: int | None = None, timeout_s: float = 5.0):
        self.workers = workers or max(2, min(4, os.cpu_count() or 2))
        self.timeout_s = timeout_s
        self._pool = None

    def run(self, jobs: list[tuple[str, str, Any, dict]]) -> list[float | ItemError]:
        """``(rule, response, reference, args)`` per job, results in order."""
        pending = []
        for name, response, reference, args in jobs:
            rule = get_rule(name)
            if rule.isolated:
                pending.append(self._pool_submit(name, response, reference, args))
            else:
                pending.append(lambda rule=rule, r=response, ref=reference, a=args: rule.fn(r, ref, **a))
        out: list[float | ItemError] = []
        for job, call in zip(jobs, pending):
            try:
                out.append(float(call.result() if hasattr(call, "result") else call()))
            except FutureTimeout:
                out.append(ItemError(f"rule {job[0]!r} timed out after {self.timeout_s:g}s"))
            except RuleError as exc:
                out.append(ItemError(str(exc)))
            except Exception as exc:  # a rule's own bug stays with its criterion
                out.append(ItemError(f"rule {job[0]!r} failed: {type(exc).__name__}: {exc}"))
        return out

    def _pool_submit(self, name, response, reference, args):
        if self._pool is None:
            from rewardserve.models.rules.isolation import RulePool

            self._pool = RulePool(self.workers, self.timeout_s)
        return self._pool.submit(name, response, reference, args)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()


def rule_jobs(item: Item, criteria: list[Criterion]) -> list[tuple[int, tuple] | tuple[int, ItemError]]:
    """The rule criteria of one item, with their templated args rendered."""
    variables = item_variables(item)
    response = response_with_tool_calls(item)
    jobs = []
    for index, criterion in enumerate(criteria):
        if criterion.fn is None:
            continue
        try:
            args = render_field(criterion.args, variables)
            jobs.append((index, (criterion.fn, response, item.reference, args)))
        except ItemError as exc:
            jobs.append((index, exc))
    return jobs


def criterion_result(criterion: Criterion, outcome: float | ItemError, reason: str | None = None) -> CriterionResult:
    if isinstance(outcome, ItemError):
        return CriterionResult(name=criterion.name, valid=False, error=str(outcome), weight=criterion.weight)
    score = 1.0 - outcome if criterion.polarity == "negative" else outcome
    return CriterionResult(name=criterion.name, score=score, reason=reason, weight=criterion.weight)


def aggregate(criteria: list[Criterion], results: list[CriterionResult], aggregation: Aggregation) -> float:
    """The item's reward from valid criterion scores (the caller checks validity)."""
    scores = {r.name: r.score for r in results}
    if aggregation.mode == "all":
        return float(all(scores[c.name] >= c.pass_threshold for c in criteria))
    if aggregation.mode == "any":
        return float(any(scores[c.name] >= c.pass_threshold for c in criteria))
    if aggregation.mode == "formula":
        return evaluate(compile_formula(aggregation.formula, set(scores)), scores)
    total = sum(c.weight for c in criteria)
    mean = sum(c.weight * scores[c.name] for c in criteria) / total
    if aggregation.mode == "threshold":
        return float(mean >= aggregation.threshold)
    return mean
