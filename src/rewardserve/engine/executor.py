"""Running a plan: queue its units, run its calls, await both, finish.

plan (the kind's, off the event loop) -> units on the model's batcher, calls in the
rule pools -> await them (unless the request's scope is cancelled first: the client
disconnected or the deadline passed) -> plan.finish (off the event loop) -> results,
or the next plan. Each stage's work is charged to the request's tenant first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from starlette.concurrency import run_in_threadpool

from rewardserve.engine.batcher import BatchAnswer
from rewardserve.engine.errors import ClientGone
from rewardserve.engine.metrics import EngineMetrics
from rewardserve.engine.pools.runner import RuleRunner
from rewardserve.engine.registry import ModelRegistry, Served
from rewardserve.engine.scope import RequestScope
from rewardserve.engine.tenants import FairGate, Tenants, named
from rewardserve.models.errors import DeadlineExceeded, NotReady, Overloaded, PayloadTooLarge, RequestError
from rewardserve.models.plan import Part, Plan, Unit
from rewardserve.protocol import Usage

R = TypeVar("R")


class VersionObserver(Protocol):
    """Who watches each served version's health on real traffic (service/ops/
    canary_watch.py): told every plan's valid flags, and every failure that is the
    version's own (not the caller's input, the service's limits, or a caller gone)."""

    def observe(self, served: Served, valid: Iterable[bool]) -> None: ...

    def observe_failure(self, served: Served) -> None: ...


@dataclass(eq=False)
class Engine:
    """What runs plans: the served models and their holds, the fair gate in front of
    planning, the tenants' books, the rule pools, the engine's metrics, the per-request
    work limit and who watches versions. Made once per app (service/app.py)."""

    registry: ModelRegistry
    gate: FairGate
    tenants: Tenants
    rules: RuleRunner
    metrics: EngineMetrics
    max_work_per_request: int
    observer: VersionObserver | None = None


class RequestWork(Protocol):
    """What the executor reads and counts of one request (service/context.py's
    RequestContext): the engine it runs on, its scope, the work planned so far and how
    much of it its tenant has been charged."""

    @property
    def engine(self) -> Engine: ...

    @property
    def scope(self) -> RequestScope: ...

    @property
    def tenant(self) -> str | None: ...

    work_units: int
    work_charged: int


@dataclass
class Executed(Generic[R]):
    results: list[R]
    usage: Usage
    queue_s: float = 0.0
    inference_s: float = 0.0
    warnings: list[str] = field(default_factory=list)
    revision: str | None = None  # the served model's pinned hub revision
    model_version: str | None = None  # the version of the served model that ran the plan

    def timing_headers(self) -> dict[str, str]:
        # Milliseconds, as TEI reports them; and the version that scored, on every route
        # (the compat routes' bodies are their peers' shapes: the header is where it fits).
        headers = {
            "x-queue-time": f"{self.queue_s * 1000:.3f}",
            "x-inference-time": f"{self.inference_s * 1000:.3f}",
        }
        if self.model_version is not None:
            headers["x-model-version"] = self.model_version
        return headers


async def run_plan(
    ctx: RequestWork, served: Served | None, n_items: int, planner: Callable[[Any], Plan[R]]
) -> Executed[R]:
    """``planner(model)`` off the event loop (it tokenizes), on the model object the hold
    gives (a model woken from a level-2 sleep meanwhile is a new one), then the plan
    executed, the served model held meanwhile (no sleep or swap closes it). Without a
    served model (a rubric of rules), ``planner(None)``."""
    engine = ctx.engine
    if served is None:
        async with engine.gate.slot(ctx.tenant):
            plan = await run_in_threadpool(planner, None)
        return await execute(ctx, served, plan, n_items)
    async with engine.registry.hold(served) as model:
        async with engine.gate.slot(ctx.tenant):
            plan = await run_in_threadpool(planner, model)
        try:
            done = await execute(ctx, served, plan, n_items)
        except (RequestError, ClientGone):
            raise  # the caller's input, the service's limits, a caller gone: not the version's health
        except Exception:
            if engine.observer is not None:
                engine.observer.observe_failure(served)
            raise
        # Read while held: weights rewritten in place take a new version only once nobody holds it.
        done.model_version = served.version
    if engine.observer is not None:
        engine.observer.observe(served, (getattr(r, "valid", True) for r in done.results))
    done.revision = model.spec.revision
    return done


async def execute(ctx: RequestWork, served: Served | None, plan: Plan[R], n_items: int) -> Executed[R]:
    """Run ``plan`` (units on ``served``'s batcher) stage by stage to its results."""
    metrics = ctx.engine.metrics
    prompt_tokens = cached_tokens = 0
    queue_s = inference_s = 0.0
    while True:
        charge_work(ctx, sum(unit.members for unit in plan.units) + len(plan.calls))
        prompt_tokens += plan.prompt_tokens
        cached_tokens += plan.cached_tokens
        if served is not None:
            name = served.model.name
            metrics.cache_hits.labels(name).inc(plan.cache_hits)
            metrics.cache_misses.labels(name).inc(plan.cache_misses)
            metrics.deduplicated.labels(name).inc(plan.deduplicated)
        calls = asyncio.ensure_future(run_calls(ctx, plan.calls))
        parts = asyncio.ensure_future(run_parts(ctx, plan.parts))
        try:
            outcomes = await compute(ctx, served, plan.units)
            values = await calls
            ran = await parts
        finally:
            calls.cancel()
            parts.cancel()
        prompt_tokens += sum(p.usage.prompt_tokens for p in ran)
        cached_tokens += sum(p.usage.cached_tokens for p in ran)
        queue_s = max([queue_s, *(o.queue_s for o in outcomes), *(p.queue_s for p in ran)])
        inference_s = max([inference_s, *(o.inference_s for o in outcomes), *(p.inference_s for p in ran)])
        done = await run_in_threadpool(plan.finish, [o.result for o in outcomes], values)
        if isinstance(done, Plan):
            plan = done
            continue
        items = plan.scored_items if plan.scored_items is not None else n_items
        usage = Usage(items=items, prompt_tokens=prompt_tokens, cached_tokens=cached_tokens)
        return Executed(done, usage, queue_s, inference_s)


def refuse_over_limit(ctx: RequestWork, work: int) -> None:
    """413 for a request that makes more work than one request may (a route that knows
    it before planning asks here first: nothing is planned for a request refused)."""
    limit = ctx.engine.max_work_per_request
    if work > limit:
        raise PayloadTooLarge(
            f"this request asks for {work} model inputs and rule calls (each item, judge prompt, compared "
            f"pair, rule call and template render), over the limit of {limit} per request; split it",
            param="items",
        )


def charge_work(ctx: RequestWork, work: int) -> None:
    """Count a plan stage's work (forward inputs: items, judge prompts, compared pairs;
    rule calls and template renders) against the request's limit (413) and, beyond the
    items the request was admitted with, against its tenant's items per second (429): a
    request is charged what it makes the service do, not only the items it lists."""
    ctx.work_units += work
    refuse_over_limit(ctx, ctx.work_units)
    extra = ctx.work_units - ctx.work_charged
    if extra > 0 and ctx.engine.tenants.enabled:
        ctx.work_charged = ctx.work_units
        wait = ctx.engine.tenants.charge(ctx.tenant, extra)
        if wait is not None:
            raise Overloaded(
                f"{named(ctx.tenant)} is over its items per second (this request's judge "
                f"prompts and rule calls count too); retry after {wait}s",
                retry_after_s=wait,
            )


async def run_parts(ctx: RequestWork, parts: list[Part[Any]]) -> list[Executed[Any]]:
    """Each part's plan on its own model's batcher, concurrently; its results put in the
    part. A part's model that is not ready fails the request (503). Each part's model is
    held while its part runs, as a request's own model is: weights rewritten in place wait
    for the part, and a part waits for them (never half of each)."""
    if not parts:
        return []
    registry = ctx.engine.registry

    async def run(part: Part[Any]) -> Executed[Any]:
        served = registry.get(part.model)
        async with registry.hold(served):
            done: Executed[Any] = await execute(ctx, served, part.plan, 0)
        part.results = done.results
        return done

    tasks = [asyncio.ensure_future(run(part)) for part in parts]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()


def refuse_without_room(ctx: RequestWork, calls_by_rule: dict[str, int]) -> None:
    """429 before planning when the rule pools have no room for the calls a request will
    make (a refusal then costs no plan; ``run_calls`` asks again)."""
    if not calls_by_rule:
        return
    ctx.engine.rules.check_room(calls_by_rule, ctx.scope)


async def run_calls(ctx: RequestWork, calls: list[Any]) -> list[Any]:
    """Run calls in the rule pools for this request; 429 when the pools are full."""
    if not calls:
        return []
    future = ctx.engine.rules.run(calls, ctx.scope)
    (values,) = await until_done_or_gone(ctx.scope, [asyncio.wrap_future(future)])
    produced: list[Any] = values
    return produced


async def compute(ctx: RequestWork, served: Served | None, units: list[Unit[Any]]) -> list[BatchAnswer]:
    """Queue units on the model's batcher (which refuses them when its queue or the
    tenant's share of it is full, or the request is bigger than the queue) and await them."""
    scope = ctx.scope
    if scope.cancelled or scope.expired():
        raise gone_error(scope)
    if not units:
        return []
    assert served is not None and served.batcher is not None, "units need a served model"
    for unit in units:
        unit.scope = scope
    futures = served.batcher.submit(units, scope.deadline)
    return await until_done_or_gone(scope, futures)


def gone_error(scope: RequestScope) -> Exception:
    """What a request whose scope was cancelled is answered with."""
    if scope.reason == "disconnected":
        return ClientGone()
    if scope.reason == "shutdown":
        return NotReady("the replica shut down before this request finished; retry it")
    return DeadlineExceeded("the request's deadline passed before its results were ready")


async def until_done_or_gone(scope: RequestScope, futures: Sequence[asyncio.Future[Any]]) -> list[Any]:
    """Await every future; if the request's scope is cancelled first (client gone,
    deadline passed), fail the futures still pending so a batcher drops that work before
    computing it, and raise what the request is answered with."""
    if not futures:
        return []
    gathered = asyncio.gather(*futures)
    cancelled: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake() -> None:
        if not cancelled.done():
            cancelled.set_result(None)

    def on_cancel(_reason: str) -> None:
        cancelled.get_loop().call_soon_threadsafe(wake)

    unregister = scope.on_cancel(on_cancel)
    try:
        waiting: set[asyncio.Future[Any]] = {gathered, cancelled}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
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
