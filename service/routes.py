"""HTTP routes. Each reads top to bottom: look up the model, check limits, score."""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from rewardserve.client.protocol import (
    ErrorBody,
    Health,
    ModelCard,
    ModelList,
    PoolingData,
    PoolingRequest,
    PoolingResponse,
    PoolingUsage,
    RunningStats,
    ScoreRequest,
    ScoreResponse,
    ShadowReport,
    StepsRequest,
    StepsResponse,
)
from rewardserve.service.admission import scope_of
from rewardserve.service.auth import has_valid_key
from rewardserve.service.body import BoundedRoute
from rewardserve.service.dispatch import run_plan, score_items
from rewardserve.service.errors import InvalidRequest, NotFound, Overloaded, PayloadTooLarge
from rewardserve.service.metrics import CONTENT_TYPE
from rewardserve.service.served_models import Served
from rewardserve.service.tenants import DEFAULT

ERROR_RESPONSES = {code: {"model": ErrorBody} for code in (401, 404, 413, 422, 429, 500, 503, 504)}

open_routes = APIRouter()
# Keys are checked by service/admission.py before a route runs; bodies are parsed under
# limits by service/body.py.
scoring_routes = APIRouter(route_class=BoundedRoute, responses=ERROR_RESPONSES)


def json_response(body, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(body.model_dump_json(), status_code=status, headers=headers, media_type="application/json")


def admit(request: Request, n_items: int) -> None:
    """The per-request item limit, for every scoring route (rubric included), and the
    tenant's items per second."""
    svc = request.app.state.svc
    limit = svc.settings.max_items_per_request
    if n_items > limit:
        raise PayloadTooLarge(
            f"{n_items} items is over the limit of {limit} per request; split the list (the client does this for you)",
            param="items",
        )
    if svc.tenants.enabled:
        tenant = scope_of(request).tenant
        request.state.work_charged = n_items  # the plan's work beyond them is charged as it is planned
        wait = svc.tenants.admit_items(tenant, n_items)
        if wait is not None:
            raise Overloaded(
                f"tenant {tenant or DEFAULT!r} is over its items per second; retry after {wait}s", retry_after_s=wait
            )


def serving(request: Request, model: str, n_items: int, endpoint: str, admitted: bool = False) -> Served:
    """The served model, after the per-request limits (unless the route ``admitted`` the
    request already); names it for the metrics."""
    if not admitted:
        admit(request, n_items)
    served = request.app.state.svc.registry.get(model)
    request.state.model = model
    if endpoint not in served.model.endpoints:
        routes = ", ".join(sorted(ENDPOINT_ROUTES[e] for e in served.model.endpoints))
        raise InvalidRequest(
            f"model {model!r} is a {served.model.kind} model; it answers {routes}",
            param="model",
        )
    return served


ENDPOINT_ROUTES = {
    "score": "/v1/score",
    "steps": "/v1/score/steps",
    "pooling": "/pooling",
    "verify": "/v1/verify",
    "judge": "/v1/rubric (as judge)",
    "compare": "/v1/compare",
    "classify": "/classify, /v1/embeddings",
}


@scoring_routes.post("/v1/score", response_model=ScoreResponse)
async def score(body: ScoreRequest, request: Request) -> Response:
    """Outcome reward per item, in request order (for a PRM, its trajectory aggregate)."""
    served = serving(request, body.model, len(body.items), "score")
    done = await score_items(request, served, body.items, body.options)
    svc = request.app.state.svc
    svc.health.observe(body.model, body.items, done.results)
    svc.shadowing.maybe_shadow(request, body.model, body.items, body.options, done.results)
    response = ScoreResponse(model=body.model, results=done.results, usage=done.usage)
    return json_response(response, headers=done.timing_headers())


@scoring_routes.post("/v1/score/steps", response_model=StepsResponse)
async def score_steps(body: StepsRequest, request: Request) -> Response:
    """Process reward per step, every step of a trajectory from one forward pass."""
    served = serving(request, body.model, len(body.items), "steps")
    done = await run_plan(
        request,
        served,
        len(body.items),
        served.model.plan_steps,
        body.items,
        body.options,
        served.cache(scope_of(request).tenant),
    )
    response = StepsResponse(model=body.model, results=done.results, usage=done.usage)
    return json_response(response, headers=done.timing_headers())


@scoring_routes.post("/pooling", response_model=PoolingResponse)
async def pooling(body: PoolingRequest, request: Request) -> Response:
    """vLLM's /pooling for process reward models: per-step probability vectors read at
    the step tags of already-templated text, in vLLM's response shape."""
    svc = request.app.state.svc
    name = by_name_or_source(svc.registry, body.model) if body.model else _only_model_with(svc.registry, "pooling")
    inputs = (
        [body.input]
        if isinstance(body.input, str) or (body.input and isinstance(body.input[0], int))
        else list(body.input)
    )
    served = serving(request, name, len(inputs), "pooling")
    done = await run_plan(
        request,
        served,
        len(inputs),
        served.model.plan_pooling,
        inputs,
        body.truncate_prompt_tokens,
        body.truncation_side or "right",
    )
    tokens = done.usage.prompt_tokens
    response = PoolingResponse(
        id=f"pooling-{uuid.uuid4().hex}",
        created=int(time.time()),
        model=body.model or name,
        data=[PoolingData(index=i, data=vectors) for i, vectors in enumerate(done.results)],
        usage=PoolingUsage(prompt_tokens=tokens, total_tokens=tokens),
    )
    return json_response(response)


def by_name_or_source(registry, named: str) -> str:
    """A served model's name, or the name of the one model served from ``named`` as its
    source (vLLM's clients, verl among them, send the checkpoint path)."""
    if named not in {s.model.name for s in registry}:
        sourced = [s.model.name for s in registry if s.model.spec.source == named]
        if len(sourced) == 1:
            return sourced[0]
    return named


def _only_model_with(registry, endpoint: str) -> str:
    names = [s.model.name for s in registry if endpoint in s.model.endpoints]
    if len(names) != 1:
        raise InvalidRequest("name the model: 'model' is required here", param="model")
    return names[0]


@scoring_routes.get("/v1/models", response_model=ModelList)
async def models(request: Request) -> Response:
    registry = request.app.state.svc.registry
    tenant = scope_of(request).tenant
    return json_response(ModelList(data=[_card(s, tenant) for s in registry]))


@scoring_routes.get("/v1/models/{name}/shadow", response_model=ShadowReport)
async def shadow(name: str, request: Request) -> Response:
    """How the model's shadow candidate compares with it (service/shadow.py)."""
    svc = request.app.state.svc
    served = svc.registry.get(name)
    spec = served.model.spec.shadow
    if spec is None:
        raise NotFound(f"model {name!r} has no shadow candidate", param="name")
    # A tenant reads what the shadow showed on its own items; the operator, on everyone's.
    tenant = scope_of(request).tenant if svc.tenants.enabled else None
    window = svc.shadowing.window(name) if tenant is None else svc.shadowing.window(name, tenant)
    return json_response(window.report(name, spec.model, spec.fraction))


def _card(served: Served, tenant: str | None) -> ModelCard:
    """The model's card, with the running statistics of the caller's tenant's scores."""
    card = served.model.card(served.ready)
    stats = served.running(tenant).snapshot()
    if stats.count:
        card = card.model_copy(update={"running": RunningStats(count=stats.count, mean=stats.mean, std=stats.std)})
    return card


@open_routes.get("/health", response_model=Health)
async def health(request: Request) -> Response:
    """Alive. 503 only when a model failed to load: restarting is the cure."""
    registry = request.app.state.svc.registry
    if registry.unhealthy:
        detail = "; ".join(registry.unhealthy) if names_models(request) else f"{len(registry.unhealthy)} model(s)"
        return json_response(Health(status="failed: " + detail), 503)
    return json_response(Health(status="ok"))


def names_models(request: Request) -> bool:
    """Whether an open route may name the served models to this caller."""
    svc = request.app.state.svc
    return svc.settings.public_model_names or (
        bool(svc.api_keys) and has_valid_key(request.headers.get("authorization"), svc.api_keys)
    )


@open_routes.get("/ready", response_model=Health)
async def ready(request: Request) -> Response:
    """Ready once every model is loaded and a real probe forward succeeded."""
    svc = request.app.state.svc
    states = {s.model.name: s.ready for s in svc.registry} if names_models(request) else {}
    if svc.registry.all_ready and not svc.draining:
        return json_response(Health(status="ready", models=states))
    status = "draining" if svc.draining else ("failed" if svc.registry.unhealthy else "loading")
    return json_response(Health(status=status, models=states), 503)


@open_routes.get("/metrics")
async def metrics(request: Request) -> Response:
    """Prometheus metrics; without model names (summed over them) unless names_models."""
    svc = request.app.state.svc
    for served in svc.registry:
        for tenant, running in list(served.running_by_tenant.items()):
            stats = running.snapshot()
            if stats.count:
                svc.health.running_stats(served.model.name, tenant or DEFAULT, stats.count, stats.mean, stats.std)
    svc.shadowing.refresh_gauges(svc.registry)
    rendered = svc.metrics.render(by_model=names_models(request), tenant=_tenant_view(request))
    return Response(rendered, media_type=CONTENT_TYPE)


def _tenant_view(request: Request) -> str | None:
    """Whose view of /metrics a caller gets, with tenants: a tenant's key its own; a key
    of no tenant (the operator's) everything; no key or a wrong one no tenant's work
    at all (""). Without tenants, everything."""
    svc = request.app.state.svc
    if not svc.tenants.enabled:
        return None
    if bool(svc.api_keys) and has_valid_key(request.headers.get("authorization"), svc.api_keys):
        return scope_of(request).tenant
    return ""


@open_routes.get("/", include_in_schema=False)
async def root() -> JSONResponse:
    return JSONResponse({"service": "rewardserve", "docs": "/docs", "models": "/v1/models"})
