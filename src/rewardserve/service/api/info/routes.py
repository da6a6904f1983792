"""The routes that tell about the service: /health, /ready, /metrics, /version and / are
open (no key: probes and scrapers call them, and they name models only to callers that
may see them); /v1/models, /info and a model's shadow report need a key."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from rewardserve.protocol import (
    Health,
    ModelList,
    ServiceInfo,
    ShadowReport,
    VersionInfo,
)
from rewardserve.service.api.info import usecases
from rewardserve.service.api.responses import ERROR_RESPONSES, json_response
from rewardserve.service.deps import Ctx
from rewardserve.service.http.body import BoundedRoute
from rewardserve.service.observability.metrics import CONTENT_TYPE

open_routes = APIRouter()
router = APIRouter(route_class=BoundedRoute, responses=ERROR_RESPONSES)


@router.get("/v1/models", response_model=ModelList, summary="List the served models")
async def models(ctx: Ctx) -> Response:
    """The served models, in OpenAI's list shape with this service's fields (kind, backend, source, readiness), so
    OpenAI-style clients and trainers can find which model answers which route."""
    return json_response(ModelList(data=usecases.model_cards(ctx)))


@open_routes.get("/version", response_model=VersionInfo, summary="The service's version")
async def version() -> Response:
    """The service's version, in vLLM's shape."""
    return json_response(VersionInfo(version=usecases.version()))


@router.get("/info", response_model=ServiceInfo, summary="Served models and request limits")
async def info(ctx: Ctx) -> Response:
    """TEI's /info adapted: the served models (kind, dtype, device, token limits) and
    the per-request limits."""
    return json_response(usecases.info(ctx))


@router.get(
    "/v1/models/{name}/shadow", response_model=ShadowReport, summary="Compare a model with its shadow candidate"
)
async def shadow(name: str, ctx: Ctx) -> Response:
    """How the model's shadow candidate compares with it (service/observability/shadow.py)."""
    return json_response(usecases.shadow_report(ctx, name))


@open_routes.get("/health", response_model=Health, summary="Liveness")
async def health(ctx: Ctx, request: Request) -> Response:
    """Alive. 503 only when a model failed to load: restarting is the cure."""
    body, status = usecases.health(ctx, usecases.names_models(ctx, _keyed(ctx, request)))
    return json_response(body, status)


@open_routes.get("/ready", response_model=Health, summary="Readiness")
async def ready(ctx: Ctx, request: Request) -> Response:
    """Ready once every model is loaded and a real probe forward succeeded."""
    body, status = usecases.readiness(ctx, usecases.names_models(ctx, _keyed(ctx, request)))
    return json_response(body, status)


@open_routes.get("/metrics", summary="Prometheus metrics")
async def metrics(ctx: Ctx, request: Request) -> Response:
    """Prometheus metrics; without model names (summed over them) unless the caller may see them."""
    keyed = _keyed(ctx, request)
    rendered = usecases.metrics_text(ctx, usecases.names_models(ctx, keyed), usecases.tenant_view(ctx, keyed))
    return Response(rendered, media_type=CONTENT_TYPE)


@open_routes.get("/", include_in_schema=False)
async def root() -> JSONResponse:
    return JSONResponse({"service": "rewardserve", "docs": "/docs", "models": "/v1/models"})


def _keyed(ctx: Ctx, request: Request) -> bool:
    return usecases.holds_a_key(ctx, request.headers.get("authorization"))
