"""HTTP routes. Each reads top to bottom: look up the model, check limits, score."""

from __future__ import annotations

import time
import uuid
from typing import Any, cast

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from rewardserve.protocol import (
    ErrorBody,
    Health,
    ModelList,
    PoolingData,
    PoolingRequest,
    PoolingResponse,
    PoolingUsage,
    ScoreRequest,
    ScoreResponse,
    ServiceInfo,
    ShadowReport,
    StepsRequest,
    StepsResponse,
    TurnsRequest,
    TurnsResponse,
    VersionInfo,
)
from rewardserve.service import application
from rewardserve.service.api.code_outputs import bound_outputs
from rewardserve.service.application import Executed
from rewardserve.service.context import RequestContext
from rewardserve.service.http.admission import scope_of
from rewardserve.service.http.auth import has_valid_key
from rewardserve.service.http.body import BoundedRoute
from rewardserve.service.observability.metrics import CONTENT_TYPE

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (401, 404, 413, 422, 429, 500, 503, 504)
}

open_routes = APIRouter()
# Keys are checked by service/http/admission.py before a route runs; bodies are parsed under
# limits by service/http/body.py.
scoring_routes = APIRouter(route_class=BoundedRoute, responses=ERROR_RESPONSES)


def json_response(
    body: BaseModel, status: int = 200, headers: dict[str, str] | None = None, *, exclude_none: bool = False
) -> Response:
    content = body.model_dump_json(exclude_none=exclude_none)
    return Response(content, status_code=status, headers=headers, media_type="application/json")


def answer(body: BaseModel, done: Executed[Any]) -> Response:
    """A scoring route's answer: its body, and the timing every scoring route sends."""
    return json_response(body, headers=done.timing_headers())


@scoring_routes.post("/v1/score", response_model=ScoreResponse, summary="Score items with an outcome reward")
async def score(body: ScoreRequest, request: Request) -> Response:
    """Outcome reward per item, in request order (for a PRM, its trajectory aggregate)."""
    done = await application.score(RequestContext.of(request), body.model, body.items, body.options)
    scored = ScoreResponse(
        model=body.model,
        revision=done.revision,
        model_version=done.model_version,
        results=done.results,
        usage=done.usage,
        warnings=done.warnings,
    )
    if any(result.tests for result in done.results):
        # Code items' tests may show megabytes of output each: bounded and encoded off the
        # event loop.
        return await run_in_threadpool(_bounded_answer, scored, done)
    return answer(scored, done)


def _bounded_answer(scored: ScoreResponse, done: Executed[Any]) -> Response:
    bound_outputs(scored.results)
    return answer(scored, done)


@scoring_routes.post(
    "/v1/score/steps", response_model=StepsResponse, summary="Score each reasoning step with a process reward"
)
async def score_steps(body: StepsRequest, request: Request) -> Response:
    """Process reward per step, every step of a trajectory from one forward pass."""
    done = await application.score_steps(RequestContext.of(request), body.model, body.items, body.options)
    return answer(
        StepsResponse(
            model=body.model,
            revision=done.revision,
            model_version=done.model_version,
            results=done.results,
            usage=done.usage,
            warnings=done.warnings,
        ),
        done,
    )


@scoring_routes.post(
    "/v1/score/turns", response_model=TurnsResponse, summary="Score each tool-calling turn of an agent"
)
async def score_turns(body: TurnsRequest, request: Request) -> Response:
    """A reward per assistant turn of a tool-using agent: its tool calls matched to the
    reference's (hard or soft assignment), and the trajectory's total."""
    done = await application.score_turns(RequestContext.of(request), body)
    return answer(TurnsResponse(results=done.results, usage=done.usage), done)


@scoring_routes.post(
    "/pooling", response_model=PoolingResponse, summary="vLLM /pooling: step probabilities from a process reward model"
)
async def pooling(body: PoolingRequest, request: Request) -> Response:
    """vLLM's /pooling for process reward models: per-step probability vectors read at
    the step tags of already-templated text, in vLLM's response shape."""
    ctx = RequestContext.of(request)
    if body.model:
        name = application.by_name_or_source(ctx, body.model)
    else:
        name = application.only_model_with(ctx, "pooling")
    one = isinstance(body.input, str) or (body.input and isinstance(body.input[0], int))
    # One input (text, or its token ids) or a list of them: the validated shape says which.
    inputs = cast(list[str | list[int]], [body.input] if one else list(body.input))
    done = await application.pooling(ctx, name, inputs, body.truncate_prompt_tokens, body.truncation_side or "right")
    tokens = done.usage.prompt_tokens
    response = PoolingResponse(
        id=f"pooling-{uuid.uuid4().hex}",
        created=int(time.time()),
        model=body.model or name,
        data=[PoolingData(index=i, data=vectors) for i, vectors in enumerate(done.results)],
        usage=PoolingUsage(prompt_tokens=tokens, total_tokens=tokens),
    )
    return answer(response, done)


@scoring_routes.get("/v1/models", response_model=ModelList, summary="List the served models")
async def models(request: Request) -> Response:
    """The served models, in OpenAI's list shape with this service's fields (kind, backend, source, readiness), so
    OpenAI-style clients and trainers can find which model answers which route."""
    return json_response(ModelList(data=application.model_cards(RequestContext.of(request))))


@open_routes.get("/version", response_model=VersionInfo, summary="The service's version")
async def version() -> Response:
    """The service's version, in vLLM's shape."""
    return json_response(VersionInfo(version=application.version()))


@scoring_routes.get("/info", response_model=ServiceInfo, summary="Served models and request limits")
async def info(request: Request) -> Response:
    """TEI's /info adapted: the served models (kind, dtype, device, token limits) and
    the per-request limits."""
    return json_response(application.info(RequestContext.of(request)))


@scoring_routes.get(
    "/v1/models/{name}/shadow", response_model=ShadowReport, summary="Compare a model with its shadow candidate"
)
async def shadow(name: str, request: Request) -> Response:
    """How the model's shadow candidate compares with it (service/observability/shadow.py)."""
    return json_response(application.shadow_report(RequestContext.of(request), name))


@open_routes.get("/health", response_model=Health, summary="Liveness")
async def health(request: Request) -> Response:
    """Alive. 503 only when a model failed to load: restarting is the cure."""
    registry = request.app.state.svc.registry
    if registry.unhealthy:
        detail = "; ".join(registry.unhealthy) if names_models(request) else f"{len(registry.unhealthy)} model(s)"
        return json_response(Health(status="failed: " + detail), 503)
    named = names_models(request)
    isolation = {s.model.name: s.model.runs_on for s in registry if named and s.model.runs_on is not None}
    return json_response(Health(status="ok", isolation=isolation))


def names_models(request: Request) -> bool:
    """Whether an open route may name the served models to this caller."""
    svc = request.app.state.svc
    return svc.settings.public_model_names or (
        bool(svc.api_keys) and has_valid_key(request.headers.get("authorization"), svc.api_keys)
    )


@open_routes.get("/ready", response_model=Health, summary="Readiness")
async def ready(request: Request) -> Response:
    """Ready once every model is loaded and a real probe forward succeeded."""
    svc = request.app.state.svc
    states = {s.model.name: s.ready for s in svc.registry} if names_models(request) else {}
    if svc.registry.all_ready and not svc.draining:
        return json_response(Health(status="ready", models=states))
    status = "draining" if svc.draining else ("failed" if svc.registry.unhealthy else "loading")
    return json_response(Health(status=status, models=states), 503)


@open_routes.get("/metrics", summary="Prometheus metrics")
async def metrics(request: Request) -> Response:
    """Prometheus metrics; without model names (summed over them) unless names_models."""
    rendered = application.metrics_text(RequestContext.of(request), names_models(request), _tenant_view(request))
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
