"""What every use case does, once, whatever route asked for it.

    route (api/<family>/routes.py): its wire shape in and out
      -> its RequestContext (service/deps.py Ctx; context.py): tenant, scope, the
         service, accounting
      -> a use case (api/<family>/usecases.py) built of these: the per-request item
         limit and the tenant's admission, the served model and whether it answers the
         operation, its plan run (engine/executor.py: work charged per stage, batched,
         pooled, awaited), then reward-health and shadow scoring
      -> Executed: results, usage and timing; the route encodes them in its shape and
         the timing in ``x-queue-time`` / ``x-inference-time``

A compat route translates its peer's request into one of these calls and the results
back; what the native route does to a request (limits, charge, log, metrics, health,
shadow) it does the same. Models never call back into the service: what a plan needs of
the service (the tenant's part of a cache, the other models as the tenant sees them) is
lent to it here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from rewardserve.engine.executor import Executed as Executed  # what the routes answer from
from rewardserve.engine.executor import run_plan as execute_plan
from rewardserve.engine.registry import Served
from rewardserve.engine.tenants import label, named
from rewardserve.models.errors import InvalidRequest, NotFound, Overloaded, PayloadTooLarge
from rewardserve.models.plan import Plan
from rewardserve.protocol import (
    Item,
    ScoreOptions,
)
from rewardserve.service.context import RequestContext

log = logging.getLogger(__name__)
R = TypeVar("R")

# The route that answers each operation a kind declares (RewardModel.endpoints).
ENDPOINT_ROUTES = {
    "score": "/v1/score",
    "steps": "/v1/score/steps",
    "pooling": "/pooling",
    "verify": "/v1/verify",
    "judge": "/v1/rubric (as judge)",
    "compare": "/v1/compare",
    "classify": "/classify, /v1/embeddings",
}


async def run_plan(
    ctx: RequestContext, served: Served | None, n_items: int, planner: Callable[[Any], Plan[R]]
) -> Executed[R]:
    """The engine runs the plan; what it did goes into the request log
    (service/http/middleware.py)."""
    done = await execute_plan(ctx, served, n_items, planner)
    ctx.log_fields["work"] = {
        "items": done.usage.items,
        "tokens": done.usage.prompt_tokens,
        "queue_ms": round(done.queue_s * 1000, 1),
        "inference_ms": round(done.inference_s * 1000, 1),
    }
    return done


def admit(ctx: RequestContext, n_items: int) -> None:
    """The per-request item limit, and the tenant's items (counted once per request; what
    its plan makes beyond them is charged as it is planned, engine/executor.py charge_work)."""
    limit = ctx.svc.settings.max_items_per_request
    if n_items > limit:
        raise PayloadTooLarge(
            f"{n_items} items is over the limit of {limit} per request; split the list (the client does this for you)",
            param="items",
        )
    if ctx.detached or not ctx.svc.tenants.enabled:
        return
    ctx.work_charged = n_items
    wait = ctx.svc.tenants.admit_items(ctx.tenant, n_items)
    if wait is not None:
        raise Overloaded(f"{named(ctx.tenant)} is over its items per second; retry after {wait}s", retry_after_s=wait)


def serving(ctx: RequestContext, model: str, endpoint: str, field: str = "model") -> Served:
    """The served model, ready, that answers ``endpoint``; named in the request's log.
    ``field``: the request field that named it, which the errors name."""
    try:
        served = ctx.svc.registry.get(model)
    except NotFound as exc:
        if field == "model":
            raise
        raise NotFound(f"{field}: {exc}", param=field) from None
    if not ctx.detached:
        ctx.name_model(model)
    if endpoint not in served.model.endpoints:
        routes = ", ".join(sorted(ENDPOINT_ROUTES[e] for e in served.model.endpoints))
        raise InvalidRequest(f"{field} {model!r} is of kind {served.model.kind}; it answers {routes}", param=field)
    return served


def observe(ctx: RequestContext, model: str, items: list[Item], options: ScoreOptions, results: list[Any]) -> list[str]:
    """Reward health sees the model's scores, and the tenant's reward-hacking alarms its
    groups (the alarms that start, as warnings for the answer); its shadow candidate (if
    any) scores the same items, charged to the same tenant. Not for the service's own work."""
    if ctx.detached:
        return []
    ctx.svc.health.observe(model, items, results)
    started = ctx.svc.health.alarms(model, label(ctx.tenant), items, results)
    ctx.svc.shadowing.maybe_shadow(ctx, model, items, options, results)
    return started


def warn(ctx: RequestContext, done: Executed[Any], warning: str | None) -> None:
    """A warning in the response, and in the service log the first time its text is seen
    (per process, a bounded few)."""
    if warning is None:
        return
    done.warnings.append(warning)
    seen = ctx.svc.warned
    if warning not in seen and len(seen) < 64:
        seen.add(warning)
        log.warning("%s (model %s, %s)", warning, ctx.log_fields.get("model", "-"), named(ctx.tenant))


def by_name_or_source(ctx: RequestContext, named: str) -> str:
    """A served model's name, or the name of the one model served from ``named`` as its
    source (vLLM's clients, verl among them, send the checkpoint path)."""
    registry = ctx.svc.registry
    if named not in {s.model.name for s in registry}:
        sourced = [s.model.name for s in registry if s.model.spec.source == named]
        if len(sourced) == 1:
            return sourced[0]
    return named


def only_model_with(ctx: RequestContext, endpoint: str) -> str:
    """The one served model that answers ``endpoint``, for requests that name none."""
    names = [s.model.name for s in ctx.svc.registry if endpoint in s.model.endpoints]
    if len(names) != 1:
        raise InvalidRequest("name the model: 'model' is required here", param="model")
    return names[0]
