"""The plan of a list of items scored one result each (/v1/score, /steps, /verify).

prepare -> the score cache by key -> one job per distinct key -> combine into units
finish: each unit's outputs back to its members, to their duplicates, in request
order; an ItemError or a non-finite score becomes ``valid: false`` with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from rewardserve.models.cache import LRUCache, cacheable
from rewardserve.models.errors import ItemError
from rewardserve.models.plan import Job, Plan, UnitOutput
from rewardserve.protocol import Item, ItemResult

if TYPE_CHECKING:
    from rewardserve.models.reward_model import RewardModel

R = TypeVar("R", bound=ItemResult)


def plan_items(
    model: RewardModel,
    items: list[Item],
    options: Any,
    cache: LRUCache | None,
    result_type: type[R],
    then: Callable[[list[R]], list[R]] | None = None,
) -> Plan[R]:
    entries = model.prepare_isolating(items, options)
    answers: dict[int, Any] = {i: e for i, e in enumerate(entries) if isinstance(e, ItemError)}
    jobs = [(i, e) for i, e in enumerate(entries) if isinstance(e, Job)]

    todo: list[tuple[int, Job[Any]]] = []
    first_of: dict[bytes, int] = {}
    twins: dict[int, list[int]] = {}
    hits = 0
    for index, job in jobs:
        cached = cache.get(job.key) if cache is not None and job.key is not None else None
        if cached is not None:
            answers[index] = cached
            hits += 1
        elif job.key is not None and job.key in first_of:
            twins[first_of[job.key]].append(index)
        else:
            if job.key is not None:
                first_of[job.key] = index
                twins[index] = [index]
            todo.append((index, job))
    # A kind whose jobs are pool calls (a rule) sends each as a call, not a unit.
    units = model.combine([job for _, job in todo]) if todo and not model.pooled else []
    calls = [job.payload for _, job in todo] if model.pooled else []
    computed = {index for index, _ in todo}

    def finish(outputs: list[UnitOutput], values: list[Any]) -> list[R]:
        produced_by = (
            [(members, produced) for (_, members), produced in zip(units, outputs)]
            if units
            else [([k], [model.call_result(value)]) for k, value in enumerate(values)]
        )
        for members, produced in produced_by:
            for member, result in zip(members, produced):
                index, job = todo[member]
                for twin in twins.get(index, [index]):
                    answers[twin] = result
                if cache is not None and job.key is not None and isinstance(result, ItemResult) and result.valid:
                    if cacheable(result):
                        cache.put(job.key, result)
        results = [_finished(item, answers[index], result_type) for index, item in enumerate(items)]
        return then(results) if then is not None else results

    keyed = sum(1 for _, job in jobs if job.key is not None)
    return Plan(
        units=[unit for unit, _ in units],
        finish=finish,
        calls=calls,
        prompt_tokens=sum(job.prompt_tokens for _, job in jobs),
        cached_tokens=sum(job.prompt_tokens for i, job in jobs if i not in computed)
        + sum(unit.shared_tokens for unit, _ in units),
        cache_hits=hits,
        cache_misses=keyed - hits if cache is not None else 0,
        deduplicated=sum(len(t) - 1 for t in twins.values()),
    )


def _finished(item: Item, result: Any, result_type: type[R]) -> R:
    """An item's result as ``result_type`` with the item's id; an error or a score that
    is not a finite number (JSON would turn NaN into null) as ``valid: false``."""
    if isinstance(result, ItemError):
        return result_type(id=item.id, score=None, valid=False, error=str(result))
    if result.valid and (result.score is None or not math.isfinite(result.score)):
        result = result.model_copy(
            update={"score": None, "valid": False, "error": "the model gave no finite score for this item"}
        )
    if not isinstance(result, result_type):
        result = result_type(**result.model_dump())
    finished: R = result.model_copy(update={"id": item.id})
    return finished
