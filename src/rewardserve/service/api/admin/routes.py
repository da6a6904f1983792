"""The admin API (``/v1/admin/``): a served model's lifecycle while the service runs, for
an operator or a trainer that shares the GPU with it. Admin keys only (service/http/admission.py);
each call answers when its work is done, with the model's state (service/ops/lifecycle.py);
with ``?async=true`` a POST answers 202 at once, the state's ``operation`` telling how
the call goes (poll GET /v1/admin/models/{name}).

    GET  /v1/admin/models/{name}           state, version, requests in flight, memory held
    GET  /v1/admin/operations/{id}         how a ?async=true call went (its id in the 202's state)
    POST /v1/admin/models/{name}/sleep     {"level": 1 | 2}
    POST /v1/admin/models/{name}/wake_up
    POST /v1/admin/models/{name}/load      {"source", "version", "force"?}: hot swap
    POST /v1/admin/models/{name}/weights   {"path", "version"}: new weights, in place where it can
    POST /v1/admin/models/{name}/rollback  the version the last load replaced, loaded again
    POST /v1/admin/models/{name}/promote   its shadow candidate serves under its name
    POST /v1/admin/models/{name}/canary    {"source", "version", "percent"}: that share of its
                                           requests to a version beside it (0: end it)
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import Response

from rewardserve.protocol import (
    AdminModelState,
    AdminOperation,
    CanaryRequest,
    LoadRequest,
    SleepRequest,
    WeightsRequest,
)
from rewardserve.service.api.responses import ERROR_RESPONSES, json_response
from rewardserve.service.deps import Admin
from rewardserve.service.http.body import BoundedRoute
from rewardserve.service.ops.lifecycle import Lifecycle

ASYNC_ACCEPTED = {"model": AdminModelState, "description": "?async=true: the call runs on; poll the state"}
router = APIRouter(route_class=BoundedRoute, responses={**ERROR_RESPONSES, 403: ERROR_RESPONSES[401]})


@router.get("/v1/admin/models/{name}", response_model=AdminModelState, summary="A model's lifecycle state")
async def model_state(name: str, lifecycle: Admin) -> Response:
    """The model's lifecycle state: its serving version and source, sleep level, a version loading beside it, a
    canary, requests in flight and its latest admin operation."""
    return json_response(lifecycle.state(name))


@router.get(
    "/v1/admin/operations/{operation_id}", response_model=AdminOperation, summary="An asynchronous admin operation"
)
async def operation_state(operation_id: str, lifecycle: Admin) -> Response:
    """The progress of an admin call made with `?async=true`: running, succeeded, failed or cancelled, with its error
    and duration."""
    return json_response(lifecycle.operations.get(operation_id))


# ?async=true: answer 202 at once; the call runs on, its progress in the state's operation.
RUN_ASYNC = Query(False, alias="async", description="answer 202 at once; poll the model's state")


async def _answer(
    lifecycle: Lifecycle, name: str, operation: str, call: Coroutine[Any, Any, AdminModelState], run_async: bool
) -> Response:
    if run_async:
        return json_response(lifecycle.start(name, operation, call), status=202)
    return json_response(await call)


@router.post(
    "/v1/admin/models/{name}/sleep",
    response_model=AdminModelState,
    responses={202: ASYNC_ACCEPTED},
    summary="Put a model to sleep",
)
async def sleep(name: str, body: SleepRequest, lifecycle: Admin, run_async: bool = RUN_ASYNC) -> Response:
    """Stops serving the model and frees memory: level 1 what the backend holds beside the weights, level 2 the
    weights too. Its requests get a typed 503 (``model_asleep``) until wake_up, or wake it when its config says
    ``wake_on_request``. Answers the model's state (202 and an operation with `?async=true`)."""
    return await _answer(lifecycle, name, "sleep", lifecycle.sleep(name, body.level), run_async)


@router.post(
    "/v1/admin/models/{name}/wake_up",
    response_model=AdminModelState,
    responses={202: ASYNC_ACCEPTED},
    summary="Wake a sleeping model",
)
async def wake_up(name: str, lifecycle: Admin, run_async: bool = RUN_ASYNC) -> Response:
    """Brings a sleeping model back to serving, reloading what its sleep freed. Answers the model's state (202 and an
    operation with `?async=true`)."""
    return await _answer(lifecycle, name, "wake_up", lifecycle.wake(name), run_async)


@router.post(
    "/v1/admin/models/{name}/load",
    response_model=AdminModelState,
    responses={202: ASYNC_ACCEPTED},
    summary="Load a new version of a model",
)
async def load(name: str, body: LoadRequest, lifecycle: Admin, run_async: bool = RUN_ASYNC) -> Response:
    """Loads a new version from a directory or hub id beside the serving one, which keeps serving until the new one
    is ready and probed; then the new one serves. A checkpoint whose architecture, label count or kind differs is
    refused unless `force`. Answers the model's state (202 and an operation with `?async=true`)."""
    return await _answer(
        lifecycle, name, "load", lifecycle.load_checked(name, body.source, body.version, body.force), run_async
    )


@router.post(
    "/v1/admin/models/{name}/weights",
    response_model=AdminModelState,
    responses={202: ASYNC_ACCEPTED},
    summary="Serve weights a trainer wrote",
)
async def weights(name: str, body: WeightsRequest, lifecycle: Admin, run_async: bool = RUN_ASYNC) -> Response:
    """Serves the weights a trainer wrote at `path` (safetensors of this model) as a new version: in place when the
    backend can, else loaded beside the serving version. Answers the model's state (202 and an operation with
    `?async=true`)."""
    return await _answer(lifecycle, name, "weights", lifecycle.weights(name, body.path, body.version), run_async)


@router.post(
    "/v1/admin/models/{name}/rollback",
    response_model=AdminModelState,
    responses={202: ASYNC_ACCEPTED},
    summary="Roll back to the previous version",
)
async def rollback(name: str, lifecycle: Admin, run_async: bool = RUN_ASYNC) -> Response:
    """Serves again the version the last load or weights call replaced (the current one serves until it is
    ready); refused when there is none. Answers the model's state (202 and an operation with `?async=true`)."""
    return await _answer(lifecycle, name, "rollback", lifecycle.rollback(name), run_async)


@router.post(
    "/v1/admin/models/{name}/promote",
    response_model=AdminModelState,
    responses={202: ASYNC_ACCEPTED},
    summary="Promote the shadow candidate",
)
async def promote(name: str, lifecycle: Admin, run_async: bool = RUN_ASYNC) -> Response:
    """The model's shadow candidate serves under the model's name (its own spec and version, loaded the way a load
    is) and the shadowing ends; refused when the model has no shadow. Answers the model's state (202 and an
    operation with `?async=true`)."""
    return await _answer(lifecycle, name, "promote", lifecycle.promote(name), run_async)


@router.post(
    "/v1/admin/models/{name}/canary",
    response_model=AdminModelState,
    responses={202: ASYNC_ACCEPTED},
    summary="Start, change or end a canary",
)
async def canary(name: str, body: CanaryRequest, lifecycle: Admin, run_async: bool = RUN_ASYNC) -> Response:
    """Sends `percent` of the model's requests to a version loaded from `source` beside the serving one; 0 ends the
    canary. A canary that turns unhealthy on real traffic is stopped on its own. Answers the model's state (202
    and an operation with `?async=true`)."""
    call = lifecycle.canary(name, body.source, body.version, body.percent)
    return await _answer(lifecycle, name, "canary", call, run_async)
