"""The admin API (``/v1/admin/``): a served model's lifecycle while the service runs, for
an operator or a trainer that shares the GPU with it. Admin keys only (service/admission.py);
each call answers when its work is done, with the model's state (service/lifecycle.py).

    GET  /v1/admin/models/{name}           state, version, requests in flight, memory held
    POST /v1/admin/models/{name}/sleep     {"level": 1 | 2}
    POST /v1/admin/models/{name}/wake_up
    POST /v1/admin/models/{name}/load      {"source", "version"}: hot swap
    POST /v1/admin/models/{name}/rollback  the version the last load replaced, loaded again
    POST /v1/admin/models/{name}/promote   its shadow candidate serves under its name
    POST /v1/admin/models/{name}/canary    {"source", "version", "percent"}: that share of its
                                           requests to a version beside it (0: end it)
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from rewardserve.client.protocol import AdminModelState, CanaryRequest, LoadRequest, SleepRequest
from rewardserve.service.body import BoundedRoute
from rewardserve.service.context import RequestContext
from rewardserve.service.routes import ERROR_RESPONSES, json_response

router = APIRouter(route_class=BoundedRoute, responses={**ERROR_RESPONSES, 403: ERROR_RESPONSES[401]})


@router.get("/v1/admin/models/{name}", response_model=AdminModelState)
async def model_state(name: str, request: Request) -> Response:
    return json_response(RequestContext.of(request).svc.lifecycle.state(name))


@router.post("/v1/admin/models/{name}/sleep", response_model=AdminModelState)
async def sleep(name: str, body: SleepRequest, request: Request) -> Response:
    return json_response(await RequestContext.of(request).svc.lifecycle.sleep(name, body.level))


@router.post("/v1/admin/models/{name}/wake_up", response_model=AdminModelState)
async def wake_up(name: str, request: Request) -> Response:
    return json_response(await RequestContext.of(request).svc.lifecycle.wake(name))


@router.post("/v1/admin/models/{name}/load", response_model=AdminModelState)
async def load(name: str, body: LoadRequest, request: Request) -> Response:
    return json_response(await RequestContext.of(request).svc.lifecycle.load(name, body.source, body.version))


@router.post("/v1/admin/models/{name}/rollback", response_model=AdminModelState)
async def rollback(name: str, request: Request) -> Response:
    return json_response(await RequestContext.of(request).svc.lifecycle.rollback(name))


@router.post("/v1/admin/models/{name}/promote", response_model=AdminModelState)
async def promote(name: str, request: Request) -> Response:
    return json_response(await RequestContext.of(request).svc.lifecycle.promote(name))


@router.post("/v1/admin/models/{name}/canary", response_model=AdminModelState)
async def canary(name: str, body: CanaryRequest, request: Request) -> Response:
    lifecycle = RequestContext.of(request).svc.lifecycle
    return json_response(await lifecycle.canary(name, body.source, body.version, body.percent))
