"""Turn-level rewards for tool-using agents (protocol/turns.py): each assistant
turn's tool calls matched to the reference's calls, one bipartite matching over the
whole trajectory, as MatchTIR assigns them (arXiv 2601.10712): hard (a maximum-weight
one-to-one matching) or soft (entropic optimal transport).

A turn whose calls cannot be read (arguments that are not a JSON object) gets no reward
and says why; its calls stay out of the matching, and the other turns are scored. A
reference that cannot be read makes the item invalid."""

from __future__ import annotations

import json
from typing import Any

from rewardserve.models.errors import ItemError
from rewardserve.models.operations import Cost, Lent, Operation
from rewardserve.models.plan import Plan, UnitOutput
from rewardserve.protocol import Item, TurnOptions, TurnsRequest, TurnsResult

MAX_CALLS = 128  # predicted, and expected, per item: the similarities are their product


class Call:
    """A tool call: its name and its arguments as an object."""

    def __init__(self, name: str, arguments: dict[str, Any]):
        self.name, self.arguments = name, arguments


def arguments_of(raw: Any, where: str) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise ItemError(f"{where}: arguments are not JSON ({exc.msg} at {exc.pos})") from None
    if not isinstance(raw, dict):
        raise ItemError(f"{where}: arguments are not a JSON object")
    return raw


def _listed(reference: Any) -> Any:
    """The reference's list of expected calls: itself, or its ``tool_calls``."""
    return reference.get("tool_calls") if isinstance(reference, dict) else reference


def reference_calls(reference: Any) -> list[Call]:
    calls = _listed(reference)
    if not isinstance(calls, list):
        raise ItemError('the reference must be the expected calls: [{"name", "arguments"}] or {"tool_calls": [...]}')
    out = []
    for index, call in enumerate(calls):
        if isinstance(call, dict) and isinstance(call.get("function"), dict):
            call = call["function"]  # OpenAI's shape
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ItemError(f"reference call {index} has no name")
        given = call.get("arguments", call.get("parameters", {}))
        out.append(Call(call["name"], arguments_of(given, f"reference call {index}")))
    if len(out) > MAX_CALLS:
        raise ItemError(f"{len(out)} reference calls, over the limit of {MAX_CALLS}")
    return out


def similarity(pred: Call, gold: Call) -> float:
    """0 for another name; else the name, the argument names' overlap (shared over all)
    and each expected argument given its value, over 2 + the expected argument count."""
    if pred.name.lower() != gold.name.lower():
        return 0.0
    given, wanted = set(pred.arguments), set(gold.arguments)
    names = 1.0 if given == wanted else len(given & wanted) / len(given | wanted)
    values = sum(1.0 for key, value in gold.arguments.items() if key in pred.arguments and pred.arguments[key] == value)
    return (1.0 + names + values) / (2.0 + len(gold.arguments))


def rewards_of_calls(preds: list[Call], golds: list[Call], options: TurnOptions) -> tuple[list[float], float]:
    """Each predicted call's reward, and the trajectory's total."""
    import numpy as np

    if not preds:
        return [], 0.0
    if not golds:
        return [options.unmatched] * len(preds), options.unmatched
    scores = np.array([[similarity(p, g) for g in golds] for p in preds], dtype=float)
    if options.assignment == "hard":
        from scipy.optimize import linear_sum_assignment

        rows, cols = linear_sum_assignment(scores, maximize=True)
        rewards = [options.unmatched] * len(preds)
        for i, j in zip(rows, cols):
            if scores[i, j] > 0:  # a pair of other names is no match
                rewards[int(i)] = float(scores[i, j])
        return rewards, sum(rewards) / max(len(preds), len(golds))
    import ot

    plan = ot.sinkhorn(
        np.full(len(preds), 1.0 / len(preds)), np.full(len(golds), 1.0 / len(golds)), -scores, reg=options.reg
    )
    rewards = [float(r) for r in (plan * scores).sum(axis=1)]
    return rewards, float(sum(rewards))


def score_turns(item: Item, options: TurnOptions) -> TurnsResult:
    """The item's turn rewards; ItemError where the item cannot be read at all."""
    if item.messages is None:
        raise ItemError("turn rewards need 'messages' with the assistant's tool calls")
    golds = reference_calls(item.reference)
    turns = [i for i, m in enumerate(item.messages) if m.role == "assistant"]
    if not turns:
        raise ItemError("the conversation has no assistant turn")
    errors: list[str | None] = [None] * len(turns)
    preds: list[Call] = []
    owner: list[int] = []  # the turn of each predicted call
    for t, index in enumerate(turns):
        calls = []
        try:
            for k, call in enumerate(item.messages[index].tool_calls or []):
                where = f"messages[{index}].tool_calls[{k}]"
                calls.append(Call(call.function.name, arguments_of(call.function.arguments, where)))
        except ItemError as exc:
            errors[t] = str(exc)
            continue
        preds += calls
        owner += [t] * len(calls)
    if len(preds) > MAX_CALLS:
        raise ItemError(f"{len(preds)} tool calls, over the limit of {MAX_CALLS}")
    rewards, total = rewards_of_calls(preds, golds, options)
    sums, counts = [0.0] * len(turns), [0] * len(turns)
    for t, reward in zip(owner, rewards):
        sums[t] += reward
        counts[t] += 1
    per_turn: list[float | None] = [
        None if errors[t] else (sums[t] / counts[t] if counts[t] else 0.0) for t in range(len(turns))
    ]
    return TurnsResult(score=total, turn_rewards=per_turn, turn_errors=errors, turns=turns)


def turns_work(items: list[Item]) -> int:
    """What a request makes the service do, counted before any of it: a unit per item
    and per call, predicted or expected (each call is compared with every call of the
    other side)."""
    work = 0
    for item in items:
        listed = _listed(item.reference)
        expected = len(listed) if isinstance(listed, list) else 0
        predicted = sum(len(m.tool_calls or []) for m in item.messages or [])
        work += 1 + expected + predicted
    return work


def score_all_turns(items: list[Item], options: TurnOptions) -> list[TurnsResult]:
    """Each item's turn rewards; an item that cannot be read is invalid, saying why."""
    out = []
    for item in items:
        try:
            out.append(score_turns(item, options).model_copy(update={"id": item.id}))
        except ItemError as exc:
            out.append(TurnsResult(id=item.id, valid=False, error=str(exc), score=None))
    return out


class TurnsOperation:
    """/v1/score/turns: each item's tool calls matched to its reference's; no model, one
    stage whose finish does the matching (off the event loop, as every finish)."""

    def cost(self, body: TurnsRequest) -> Cost:
        return Cost(items=len(body.items), work=turns_work(body.items))

    def plan(self, body: TurnsRequest, lent: Lent) -> Plan[TurnsResult]:
        items, options = list(body.items), body.options

        def finish(_outputs: list[UnitOutput], _values: list[Any]) -> list[TurnsResult]:
            return score_all_turns(items, options)

        return Plan(units=[], finish=finish)


TURNS: Operation[TurnsRequest, TurnsResult] = TurnsOperation()
