"""One error shape, one table from error type to HTTP status.

Every failure the service answers is ``{"error": {"type", "message", "param"?}}``.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from rewardserve.client.protocol import ERROR_STATUS, ErrorBody, ErrorDetail, ErrorType
from rewardserve.models.planning import RequestError

log = logging.getLogger(__name__)


class ServiceError(RequestError):
    """Raise one of the subclasses; the handler below renders it (a kind's own
    RequestError goes the same way)."""

    error_type: ErrorType = "internal_error"

    def __init__(self, message: str, *, param: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message, param=param, type=self.error_type, headers=headers)


def one_line(exc: BaseException) -> str:
    """An exception as ``Type: message`` on one line (messages carry tracebacks' newlines)."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())


class NotFound(ServiceError):
    error_type = "not_found"


class PayloadTooLarge(ServiceError):
    error_type = "payload_too_large"


class InvalidRequest(ServiceError):
    error_type = "invalid_request"


class Overloaded(ServiceError):
    error_type = "overloaded"

    def __init__(self, message: str, *, retry_after_s: int):
        super().__init__(message, headers={"retry-after": str(retry_after_s)})


class NotReady(ServiceError):
    error_type = "not_ready"


class DeadlineExceeded(ServiceError):
    error_type = "deadline_exceeded"


# A model's queue refusing work (service/batcher.py); dispatch.py turns them into 429 / 413.
class QueueFull(Exception):
    def __init__(self, retry_after_s: int):
        super().__init__(f"queue full, retry after {retry_after_s}s")
        self.retry_after_s = retry_after_s


class TenantQueueFull(QueueFull):
    """The tenant's own queued-token limit on this model is reached."""

    def __init__(self, tenant: str, limit: int, retry_after_s: int):
        super().__init__(retry_after_s)
        self.tenant = tenant
        self.limit = limit


class QueueTooSmall(Exception):
    """The request alone is bigger than the whole queue: retrying cannot help."""


TYPE_BY_STATUS: dict[int, ErrorType] = {status: kind for kind, status in ERROR_STATUS.items()}


class BodyError(RequestError):
    """A body refused before validation (413 / 422), naming ``param``."""

    def __init__(self, status: int, message: str, param: str = "body", headers: dict[str, str] | None = None):
        super().__init__(message, param=param, type=TYPE_BY_STATUS[status], headers=headers)


def error_response(
    kind: ErrorType,
    message: str,
    param: str | None = None,
    headers: dict[str, str] | None = None,
    status: int | None = None,
) -> JSONResponse:
    """The error body; its status from the one table unless the status came first (a
    405's, say)."""
    body = ErrorBody(error=ErrorDetail(type=kind, message=message, param=param))
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status or ERROR_STATUS[kind], headers=headers)


def _loc_to_param(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p != "body"]
    out = ""
    for part in parts:
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out or "body"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestError)
    async def _request(_: Request, exc: RequestError) -> JSONResponse:
        return error_response(exc.type, exc.message, exc.param, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request"}
        param = _loc_to_param(tuple(first.get("loc", ())))
        message = f"{param}: {first.get('msg', 'invalid')}"
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more problem(s))"
        return error_response("invalid_request", message, param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # a body FastAPI could not parse (bad UTF-8, too deep)
            return error_response("invalid_request", f"the body is not valid JSON: {exc.detail}", "body")
        kind = TYPE_BY_STATUS.get(exc.status_code, "invalid_request")
        return error_response(kind, str(exc.detail), None, headers=dict(exc.headers or {}), status=exc.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_response("internal_error", f"internal error: {type(exc).__name__}")
