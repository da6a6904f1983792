"""One error shape, one table from error type to HTTP status.

Every failure the service answers is ``{"error": {"type", "message", "param"?}}``.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from rewardserve.client.protocol import ErrorBody, ErrorDetail
from rewardserve.models.reward_model import RequestError

log = logging.getLogger(__name__)

STATUS_BY_TYPE: dict[str, int] = {
    "authentication_error": 401,
    "not_found": 404,
    "method_not_allowed": 405,
    "payload_too_large": 413,
    "invalid_request": 422,
    "overloaded": 429,
    "internal_error": 500,
    "not_ready": 503,
    "deadline_exceeded": 504,
}
TYPE_BY_STATUS: dict[int, str] = {status: kind for kind, status in STATUS_BY_TYPE.items()}


class ServiceError(Exception):
    """Raise one of the subclasses; the handler below renders it."""

    type = "internal_error"

    def __init__(
        self, message: str, *, param: str | None = None, headers: dict[str, str] | None = None
    ):
        super().__init__(message)
        self.message = message
        self.param = param
        self.headers = headers or {}

    @property
    def status(self) -> int:
        return STATUS_BY_TYPE[self.type]


class NotFound(ServiceError):
    type = "not_found"


class PayloadTooLarge(ServiceError):
    type = "payload_too_large"


class InvalidRequest(ServiceError):
    type = "invalid_request"


class Overloaded(ServiceError):
    type = "overloaded"

    def __init__(self, message: str, *, retry_after_s: int):
        super().__init__(message, headers={"retry-after": str(retry_after_s)})


class NotReady(ServiceError):
    type = "not_ready"


class DeadlineExceeded(ServiceError):
    type = "deadline_exceeded"


def from_request_error(exc: RequestError) -> ServiceError:
    """A kind's RequestError (413 / 422) as the service error of that status."""
    cls = PayloadTooLarge if exc.status == 413 else InvalidRequest
    return cls(exc.message, param=exc.param)


def error_response(
    status: int, kind: str, message: str, param: str | None = None, headers=None
) -> JSONResponse:
    body = ErrorBody(error=ErrorDetail(type=kind, message=message, param=param))
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status, headers=headers)


def _loc_to_param(loc: tuple) -> str:
    parts = [str(p) for p in loc if p != "body"]
    out = ""
    for part in parts:
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out or "body"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service(_: Request, exc: ServiceError) -> JSONResponse:
        return error_response(exc.status, exc.type, exc.message, exc.param, exc.headers)

    @app.exception_handler(RequestError)
    async def _model_request(_: Request, exc: RequestError) -> JSONResponse:
        err = from_request_error(exc)
        return error_response(err.status, err.type, err.message, err.param)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request"}
        param = _loc_to_param(tuple(first.get("loc", ())))
        message = f"{param}: {first.get('msg', 'invalid')}"
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more problem(s))"
        return error_response(422, "invalid_request", message, param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # a body FastAPI could not parse (bad UTF-8, too deep)
            return error_response(422, "invalid_request", f"the body is not valid JSON: {exc.detail}", "body")
        kind = TYPE_BY_STATUS.get(exc.status_code, "invalid_request")
        return error_response(
            exc.status_code, kind, str(exc.detail), getattr(exc, "param", None),
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_response(500, "internal_error", f"internal error: {type(exc).__name__}")
