"""Scores of several sources mixed into one reward: a rubric's model criteria, each
criterion's score put on its scale, and escalation to an expensive model.

A model criterion is a Part of the rubric's plan: the named model's own ``plan_score``
for the items that ask for it, run on that model's batcher with other requests' work;
its results come back as the criterion's raw scores.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from rewardserve.models.errors import ItemError, RequestError
from rewardserve.models.operations.groups import group_keys
from rewardserve.models.operations.scales import RunningScore, normalize_scores
from rewardserve.models.plan import Part, PeerLookup, Plan
from rewardserve.protocol import Criterion, Escalation, Item, ItemResult, Scale, ScoreOptions

Key = tuple[int, int]  # (item index, criterion index)
R = TypeVar("R", bound=ItemResult)


def score_part(peers: PeerLookup, name: str, items: list[Item], param: str) -> tuple[Part[ItemResult], RunningScore]:
    """The served model ``name``'s /v1/score plan for ``items``, and its running
    statistics; a 422 naming ``param`` for a model that does not score."""
    peer = peers(name, param)
    if "score" not in peer.model.endpoints:
        raise RequestError(f"model {name!r} is of kind {peer.model.kind}; it gives no /v1/score score", param=param)
    return Part(name, peer.model.plan_score(items, ScoreOptions(), peer.cache, peers)), peer.running


def part_scores(part: Part[ItemResult]) -> list[float | ItemError]:
    """Each item's score from a part, or why it has none."""
    return [
        r.score if r.valid and r.score is not None else ItemError(f"model {part.model!r}: {r.error}")
        for r in part.finished()
    ]


@dataclass
class ModelCriteria:
    """A rubric's model criteria: one Part per named model (each item it scores once,
    however many criteria name it) and the running statistics of each."""

    parts: list[Part[ItemResult]]
    running: dict[str, RunningScore]
    _positions: dict[str, dict[int, int]]  # model -> item index -> position in its part
    _keys: dict[str, list[Key]]

    def outcomes(self) -> dict[Key, Any]:
        """Each model criterion's raw score (or ItemError), once the parts have run."""
        out: dict[Key, Any] = {}
        for part in self.parts:
            scores = part_scores(part)
            for key in self._keys[part.model]:
                out[key] = scores[self._positions[part.model][key[0]]]
        return out


def plan_model_criteria(
    items: Sequence[Item], criteria: list[list[Criterion]], params: list[str], peers: PeerLookup | None
) -> ModelCriteria:
    keys: dict[str, list[Key]] = {}
    for i, own in enumerate(criteria):
        for k, criterion in enumerate(own):
            if criterion.model is not None:
                keys.setdefault(criterion.model, []).append((i, k))
    parts, running, positions = [], {}, {}
    for name, model_keys in keys.items():
        i, k = model_keys[0]
        if peers is None:
            raise RequestError(
                "model criteria are scored by served models; none are lent here", param=f"{params[i]}[{k}].model"
            )
        indices = sorted({i for i, _ in model_keys})
        part, running[name] = score_part(peers, name, [items[i] for i in indices], f"{params[i]}[{k}].model")
        parts.append(part)
        positions[name] = {index: at for at, index in enumerate(indices)}
    return ModelCriteria(parts, running, positions, keys)


@dataclass
class Scaled:
    """A criterion's score as aggregated (or why it has none), with what it came from."""

    score: float | ItemError
    reason: str | None = None
    raw: float | None = None
    running_count: int | None = None


def scale_outcomes(
    items: Sequence[Item],
    criteria: list[list[Criterion]],
    outcomes: dict[Key, tuple[Any, str | None]],
    running: dict[str, RunningScore],
) -> dict[Key, Scaled]:
    """Every criterion's raw outcome on its ``normalize`` scale, polarity applied. Scales
    over several items (group, running) read all items' outcomes of the same criterion
    name (and model) together."""
    buckets: dict[tuple[str, str | None, Scale], list[Key]] = {}
    for key in outcomes:
        criterion = criteria[key[0]][key[1]]
        buckets.setdefault((criterion.name, criterion.model, criterion.normalize), []).append(key)
    groups = group_keys(list(items))
    scaled: dict[Key, Scaled] = {}
    for (_, model, mode), bucket in buckets.items():
        raw = [outcomes[key][0] if not isinstance(outcomes[key][0], ItemError) else None for key in bucket]
        values, stats = normalize_scores(
            mode, raw, [groups[key[0]] for key in bucket], running.get(model) if model is not None else None
        )
        for key, value, r in zip(bucket, values, raw):
            criterion = criteria[key[0]][key[1]]
            outcome, reason = outcomes[key]
            if isinstance(outcome, ItemError) or value is None:
                scaled[key] = Scaled(outcome if isinstance(outcome, ItemError) else ItemError("no score"), reason)
                continue
            if criterion.polarity == "negative":
                value = 1.0 - value if criterion.unit_scale else -value
            scaled[key] = Scaled(value, reason, r, stats.count if stats is not None else None)
    return scaled


# --------------------------------------------------------------------------- escalation


def pick_escalated(escalation: Escalation, items: Sequence[Item], results: Sequence[ItemResult]) -> dict[int, str]:
    """Which items ``escalation.when`` picks, and why, within ``max_fraction`` of the
    request's items: invalid items first, then whole groups that teach nothing, then the
    most uncertain, then the closest to the threshold."""
    when = escalation.when
    budget = math.floor(escalation.max_fraction * len(items) + 1e-9)
    candidates: list[tuple[tuple[int, float], list[int], str]] = []
    scores = [r.score if r.valid else None for r in results]
    if when.invalid:
        candidates += [((0, 0.0), [i], "invalid") for i, s in enumerate(scores) if s is None]
    if when.group_zero_variance:
        members: dict[Hashable, list[int]] = {}
        for index, (key, item) in enumerate(zip(group_keys(list(items)), items)):
            if item.group_id is not None and scores[index] is not None:
                members.setdefault(key, []).append(index)
        for indices in members.values():
            values = [scores[i] for i in indices]
            if len(indices) > 1 and max(values) - min(values) <= 1e-9:  # type: ignore[type-var, operator]
                candidates.append(((1, 0.0), indices, "group_zero_variance"))
    if when.uncertainty_above is not None:
        for i, r in enumerate(results):
            if r.valid and r.uncertainty is not None and r.uncertainty > when.uncertainty_above:
                candidates.append(
                    ((2, -r.uncertainty), [i], f"uncertainty {r.uncertainty:.4g} > {when.uncertainty_above:g}")
                )
    if when.margin_below is not None:
        for i, s in enumerate(scores):
            if s is not None and abs(s - when.threshold) < when.margin_below:
                candidates.append(
                    ((3, abs(s - when.threshold)), [i], f"margin {abs(s - when.threshold):.4g} < {when.margin_below:g}")
                )
    picked: dict[int, str] = {}
    for _, indices, why in sorted(candidates, key=lambda c: c[0]):
        fresh = [i for i in indices if i not in picked]
        if fresh and len(picked) + len(fresh) <= budget:
            picked.update({i: why for i in fresh})
    return picked


def escalate(
    escalation: Escalation | None,
    items: list[Item],
    results: list[R],
    peers: PeerLookup | None,
    then: Callable[[list[R]], list[R]] | None = None,
) -> list[R] | Plan[R]:
    """``results`` as they are when nothing escalates; else the plan that asks
    ``escalation.to`` for the picked items and puts its scores in their place (an item
    whose escalation fails keeps its cheap score, saying so)."""
    done = then or (lambda rs: rs)
    picked = pick_escalated(escalation, items, results) if escalation is not None else {}
    if not picked or escalation is None:
        return done(results)
    if peers is None:
        raise RequestError("escalation asks a served model; none are lent here", param="escalate.to")
    order = sorted(picked)
    part, running = score_part(peers, escalation.to, [items[i] for i in order], "escalate.to")
    mode = escalation.normalize

    def finish(_outputs: list[Any], _values: list[Any]) -> list[R]:
        raw = part_scores(part)
        values, _ = normalize_scores(
            mode, [None if isinstance(r, ItemError) else r for r in raw], [None] * len(raw), running
        )
        out = list(results)
        for index, value, r in zip(order, values, raw):
            why = f"{picked[index]}: scored by {escalation.to}"
            if value is None:
                why += f" (failed: {r}; the cheap score kept)"
                out[index] = out[index].model_copy(update={"escalated": why})
            else:
                out[index] = out[index].model_copy(
                    update={"score": value, "valid": True, "error": None, "escalated": why}
                )
        return done(out)

    return Plan(units=[], finish=finish, parts=[part])
