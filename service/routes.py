"""HTTP routes. Each reads top to bottom: look up the model, check limits, score."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from rewardserve.client.protocol import (
    ErrorBody,
    Health,
    ModelList,
    ScoreRequest,
    ScoreResponse,
)
from rewardserve.service.auth import require_api_key
from rewardserve.service.errors import PayloadTooLarge
from rewardserve.service.metrics import CONTENT_TYPE
from rewardserve.service.registry import Served
from rewardserve.service.scoring import group_advantages, score_items

_ERRORS = {
    code: {"model": ErrorBody}
    for code in (401, 404, 413, 422, 429, 500, 503, 504)
}

open_routes = APIRouter()
scoring_routes = APIRouter(dependencies=[Depends(require_api_key)], responses=_ERRORS)


def _json(body, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        body.model_dump_json(), status_code=status, headers=headers, media_type="application/json"
    )


def serving(request: Request, model: str, n_items: int) -> Served:
    """The served model, after the per-request limits; names it for the metrics."""
    svc = request.app.state.svc
    if n_items > svc.settings.max_items_per_request:
        raise PayloadTooLarge(
            f"{n_items} items is over the limit of {svc.settings.max_items_per_request} "
            "per request; split the list (the client does this for you)",
            param="items",
        )
    served = svc.registry.get(model)
    request.state.model = model
    return served


@scoring_routes.post("/v1/score", response_model=ScoreResponse)
async def score(body: ScoreRequest, request: Request) -> Response:
    """Outcome reward per item, in request order."""
    served = serving(request, body.model, len(body.items))
    scored = await score_items(request, served, body.items, body.options)
    results = scored.results
    if body.options.normalize == "group":
        results = group_advantages(body.items, results)
    response = ScoreResponse(model=body.model, results=results, usage=scored.usage)
    return _json(response, headers=scored.timing_headers())


@scoring_routes.get("/v1/models", response_model=ModelList)
async def models(request: Request) -> Response:
    registry = request.app.state.svc.registry
    return _json(ModelList(data=[s.model.card(s.ready) for s in registry]))


@open_routes.get("/health", response_model=Health)
async def health(request: Request) -> Response:
    """Alive. 503 only when a model failed to load: restarting is the cure."""
    registry = request.app.state.svc.registry
    if registry.failed:
        return _json(Health(status="failed: " + "; ".join(registry.failed)), 503)
    return _json(Health(status="ok"))


@open_routes.get("/ready", response_model=Health)
async def ready(request: Request) -> Response:
    """Ready once every model is loaded and a real probe forward succeeded."""
    svc = request.app.state.svc
    states = {s.model.name: s.ready for s in svc.registry}
    if svc.registry.all_ready and not svc.draining:
        return _json(Health(status="ready", models=states))
    status = "draining" if svc.draining else ("failed" if svc.registry.failed else "loading")
    return _json(Health(status=status, models=states), 503)


@open_routes.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(request.app.state.svc.metrics.render(), media_type=CONTENT_TYPE)


@open_routes.get("/", include_in_schema=False)
async def root() -> JSONResponse:
    return JSONResponse({"service": "rewardserve", "docs": "/docs", "models": "/v1/models"})
