"""The part of every scoring route after validation: prepare, queue, wait, assemble.

    prepare (tokenize, off the event loop) -> batcher.submit -> await results
    (unless the request's scope is cancelled first: the client disconnected or the
    deadline passed) -> results in request order, usage, timings
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from rewardserve.client.protocol import Item, ItemResult, StepsResult, Usage
from rewardserve.models.reward_model import ItemError, RequestError, Work
from rewardserve.models.request_scope import RequestScope
from rewardserve.service.admission import scope_of
from rewardserve.service.batcher import Outcome, QueueFull, QueueTooSmall
from rewardserve.service.errors import (
    DeadlineExceeded,
    NotReady,
    Overloaded,
    PayloadTooLarge,
    from_request_error,
)
from rewardserve.models.text.steps import delta_rewards, group_process_advantages
from rewardserve.service.served_models import Served

GROUP_EPS = 1e-6


class ClientGone(Exception):
    """The client disconnected; its queued work was dropped."""


@dataclass
class Scored:
    results: list[ItemResult]
    usage: Usage
    queue_s: float = 0.0
    inference_s: float = 0.0

    def timing_headers(self) -> dict[str, str]:
        # Milliseconds, as TEI reports them.
        return {
            "x-queue-time": f"{self.queue_s * 1000:.3f}",
            "x-inference-time": f"{self.inference_s * 1000:.3f}",
        }


async def score_items(
    request: Request, served: Served, items: list[Item], options
) -> Scored:
    """Prepare the items with the model's kind, answer what the score cache knows,
    compute each distinct piece of work once (in units that share prefixes), and put
    each item's result (or its error) back in request order."""
    model = served.model
    try:
        entries = await run_in_threadpool(prepare_isolating, model, items, options)
    except RequestError as exc:
        raise from_request_error(exc) from exc
    scope = scope_of(request)
    for entry in entries:
        if isinstance(entry, Work):
            entry.scope = scope
    works = [(i, e) for i, e in enumerate(entries) if isinstance(e, Work)]
    answers: dict[int, object] = {i: e for i, e in enumerate(entries) if not isinstance(e, Work)}

    todo, twins = _cached_and_distinct(served, works, answers, request.app.state.svc.metrics)
    units = await run_in_threadpool(model.combine, [w for _, w in todo]) if todo else []
    outcomes = await compute(request, served, [unit for unit, _ in units])
    for (unit, members), outcome in zip(units, outcomes):
        results = outcome.result if isinstance(outcome.result, list) else [outcome.result]
        for member, result in zip(members, results):
            index, work = todo[member]
            for twin in twins.get(index, [index]):
                answers[twin] = result
            if work.key is not None and isinstance(result, ItemResult) and result.valid:
                model.score_cache.put(work.key, result)

    results: list[ItemResult] = []
    for index, item in enumerate(items):
        result = answers[index]
        if isinstance(result, ItemError):
            result = ItemResult(score=None, valid=False, error=str(result))
        elif result.valid and (result.score is None or not math.isfinite(result.score)):
            # A computed result always has a number; JSON would turn NaN into null.
            result = result.model_copy(update={"score": None, "valid": False,
                                               "error": "the model gave no finite score for this item"})
        results.append(result.model_copy(update={"id": item.id}))
    computed = {index for index, _ in todo}
    usage = Usage(
        items=len(items),
        prompt_tokens=sum(w.prompt_tokens for _, w in works),
        cached_tokens=sum(w.prompt_tokens for i, w in works if i not in computed)
        + sum(unit.shared_tokens for unit, _ in units),
    )
    return Scored(
        results,
        usage,
        queue_s=max((o.queue_s for o in outcomes), default=0.0),
        inference_s=max((o.inference_s for o in outcomes), default=0.0),
    )


def prepare_isolating(model, items: list[Item], options) -> list:
    """``model.prepare``; if it fails on something other than a RequestError, each item
    again alone, so the item at fault is the only one invalid (a 500 on client input
    is a bug, but one bug must not fail the neighbours)."""
    model.refuse_unscorable_shapes(items)
    try:
        return model.prepare(items, options)
    except RequestError:
        raise
    except Exception:
        pass
    entries: list = []
    for index, item in enumerate(items):
        try:
            (entry,) = model.prepare([item], options)
        except RequestError as exc:
            param = exc.param or ""
            if param.startswith("items[0]"):
                param = f"items[{index}]" + param[len("items[0]"):]
            raise RequestError(exc.message.replace("items[0]", f"items[{index}]"), param=param or None,
                               status=exc.status) from exc
        except Exception as exc:
            entry = ItemError(f"the item could not be prepared: {type(exc).__name__}: {exc}")
        entries.append(entry)
    return entries


def _cached_and_distinct(served: Served, works, answers: dict, metrics) -> tuple[list, dict[int, list[int]]]:
    """Fill ``answers`` from the score cache; of the rest, keep one per key (GRPO sends
    the same completion often). Returns the work to compute and, per computed index,
    every index that shares its result."""
    name = served.model.name
    todo, first_of, twins = [], {}, {}
    hits = 0
    for index, work in works:
        cached = served.model.score_cache.get(work.key) if work.key is not None else None
        if cached is not None:
            answers[index] = cached
            hits += 1
        elif work.key is not None and work.key in first_of:
            twins[first_of[work.key]].append(index)
        else:
            if work.key is not None:
                first_of[work.key] = index
                twins[index] = [index]
            todo.append((index, work))
    keyed = sum(1 for _, w in works if w.key is not None)
    metrics.cache_hits.labels(name).inc(hits)
    metrics.cache_misses.labels(name).inc(keyed - hits)
    metrics.deduplicated.labels(name).inc(sum(len(t) - 1 for t in twins.values()))
    return todo, twins


async def compute(request: Request, served: Served, works: list[Work]) -> list[Outcome]:
    """Queue work on the model's batcher (or refuse it: 429 / 413) and await it."""
    model = served.model
    scope = scope_of(request)
    deadline = scope.deadline
    if scope.cancelled or scope.expired():
        raise gone_error(scope)
    try:
        futures = served.batcher.submit(works, deadline) if works else []
    except QueueFull as exc:
        request.app.state.svc.metrics.rejected.labels(model.name, "queue_full").inc()
        raise Overloaded(
            f"model {model.name!r} is at capacity; retry after {exc.retry_after_s}s",
            retry_after_s=exc.retry_after_s,
        ) from exc
    except QueueTooSmall as exc:
        raise PayloadTooLarge(str(exc), param="items") from exc
    return await until_done_or_gone(scope, futures)


def gone_error(scope: RequestScope) -> Exception:
    """What a request whose scope was cancelled is answered with."""
    if scope.reason == "disconnected":
        return ClientGone()
    if scope.reason == "shutdown":
        return NotReady("the replica shut down before this request finished; retry it")
    return DeadlineExceeded("the request's deadline passed before its results were ready")


async def until_done_or_gone(scope: RequestScope, futures: list[asyncio.Future]) -> list:
    """Await every future; if the request's scope is cancelled first (client gone,
    deadline passed), fail the futures still pending so a batcher drops that work before
    computing it, and raise what the request is answered with."""
    if not futures:
        return []
    gathered = asyncio.gather(*futures)
    cancelled = asyncio.get_running_loop().create_future()
    unregister = scope.on_cancel(
        lambda _: cancelled.get_loop().call_soon_threadsafe(lambda: cancelled.done() or cancelled.set_result(None))
    )
    try:
        await asyncio.wait({gathered, cancelled}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        gathered.cancel()
        raise
    finally:
        unregister()
        cancelled.cancel()
    if gathered.done():
        return gathered.result()
    gathered.add_done_callback(lambda f: f.cancelled() or f.exception())  # consumed
    error = gone_error(scope)
    if isinstance(error, ClientGone):
        gathered.cancel()
        raise error
    for future in futures:  # the batcher drops these before compute, counted as "deadline"
        if not future.done():
            future.set_exception(error if isinstance(error, DeadlineExceeded) else DeadlineExceeded(str(error)))
    raise error


def group_advantages(items: list[Item], results: list[ItemResult]) -> list[ItemResult]:
    """GRPO advantages: (r - mean) / (std + 1e-6) over the valid scores of each group_id,
    with the sample standard deviation (torch's and TRL's default). An item without a
    group_id is a group of one (advantage 0); an invalid item gets none."""
    groups: dict[object, list[int]] = {}
    for index, (key, result) in enumerate(zip(group_keys(items), results)):
        if result.valid and result.score is not None:
            groups.setdefault(key, []).append(index)
    out = list(results)
    for members in groups.values():
        scores = [results[i].score for i in members]
        mean = sum(scores) / len(scores)
        if len(scores) > 1:
            std = math.sqrt(sum((s - mean) ** 2 for s in scores) / (len(scores) - 1))
        else:
            std = 0.0
        for i, s in zip(members, scores):
            out[i] = out[i].model_copy(update={"advantage": (s - mean) / (std + GROUP_EPS)})
    return out


def group_keys(items: list[Item]) -> list[object]:
    """Each item's group: its group_id, or a group of its own."""
    return [it.group_id if it.group_id is not None else ("", i) for i, it in enumerate(items)]


def shape_steps(items: list[Item], results: list[StepsResult], shaping: str) -> list[StepsResult]:
    """step_rewards per options.shaping: raw scores, deltas, or GRPO process advantages
    over each group's steps jointly."""
    if shaping == "none":
        return results
    if shaping in ("raw", "delta"):
        shape = list if shaping == "raw" else delta_rewards
        return [
            r.model_copy(update={"step_rewards": shape(r.step_scores)}) if r.valid else r
            for r in results
        ]
    members: dict[object, list[int]] = {}
    for index, key in enumerate(group_keys(items)):
        if results[index].valid:
            members.setdefault(key, []).append(index)
    order = list(members.values())
    shaped = group_process_advantages([[results[i].step_scores for i in group] for group in order])
    out = list(results)
    for group, rewards in zip(order, shaped):
        for index, reward in zip(group, rewards):
            out[index] = out[index].model_copy(update={"step_rewards": reward})
    return out
