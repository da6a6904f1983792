"""One error shape, one table from error type to HTTP status.

Every failure the service answers is ``{"error": {"type", "message", "param"?}}``. The
errors below the service carry their type (models/errors.py, engine/errors.py); here
alone a type becomes a status and a ``retry_after_s`` a ``retry-after`` header.
"""

from __future__ import annotations

import difflib
import logging
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

# The routes raise the domain's invalid_request through here: they import no models.
from rewardserve.models.errors import InvalidRequest as InvalidRequest
from rewardserve.models.errors import RequestError
from rewardserve.protocol import ERROR_STATUS, ErrorBody, ErrorDetail, ErrorType
from rewardserve.protocol.errors import unknown_field_message

log = logging.getLogger(__name__)


TYPE_BY_STATUS: dict[int, ErrorType] = {status: kind for kind, status in ERROR_STATUS.items()}


class BodyError(RequestError):
    """A body refused before validation (413 / 422), naming ``param``; ``headers``: the
    HTTP side of the refusal (``connection: close`` for a body not read to its end)."""

    def __init__(self, status: int, message: str, param: str | None = "body", headers: dict[str, str] | None = None):
        super().__init__(message, param=param, type=TYPE_BY_STATUS[status])
        self.headers = headers or {}


def response_headers(exc: RequestError) -> dict[str, str] | None:
    """The headers a refusal is answered with: ``retry-after`` when retrying can succeed."""
    headers = dict(exc.headers) if isinstance(exc, BodyError) else {}
    if exc.retry_after_s is not None:
        headers["retry-after"] = str(exc.retry_after_s)
    return headers or None


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


def _body_model(request: Request) -> Any:
    """The type the matched route validates its body as, if it takes one."""
    dependant = getattr(request.scope.get("route"), "dependant", None)
    params = getattr(dependant, "body_params", None) or []
    return params[0].field_info.annotation if len(params) == 1 else None


def _types_at(annotation: Any, part: Any) -> list[Any]:
    """The types a value at ``part`` (a field name or a list index) inside a value of
    ``annotation`` may have: every member of a union is followed."""
    annotation = getattr(annotation, "__value__", annotation)  # a type alias
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _types_at(args[0], part)
    if origin in (typing.Union, types.UnionType):
        return [t for member in args for t in _types_at(member, part)]
    if isinstance(part, int):
        is_sequence = isinstance(origin, type) and issubclass(origin, Sequence) and not issubclass(origin, str)
        return [args[0]] if is_sequence and args else []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        fields = annotation.model_fields
        named = fields.get(part) or next((f for f in fields.values() if f.alias == part), None)
        return [named.annotation] if named is not None else []
    if isinstance(origin, type) and issubclass(origin, Mapping) and len(args) == 2:
        return [args[1]]
    return []


def _models_of(annotation: Any) -> list[type[BaseModel]]:
    annotation = getattr(annotation, "__value__", annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _models_of(args[0])
    if origin in (typing.Union, types.UnionType):
        return [m for member in args for m in _models_of(member)]
    return [annotation] if isinstance(annotation, type) and issubclass(annotation, BaseModel) else []


def unknown_field(body_type: Any, loc: tuple[Any, ...]) -> str:
    """For a field the request model does not have: the message naming the nearest
    known name and the fields of the model it was sent in ("" where that model is not
    found)."""
    candidates = [body_type]
    for part in loc[:-1]:
        candidates = [t for c in candidates for t in _types_at(c, part)]
    models = list(dict.fromkeys(m for c in candidates for m in _models_of(c)))
    if not models:
        return ""
    known = list(dict.fromkeys(f.alias or name for m in models for name, f in m.model_fields.items()))
    return unknown_field_message(str(loc[-1]), known, " / ".join(m.__name__ for m in models))


def _validation_message(request: Request, error: Mapping[str, Any], param: str) -> str:
    loc = tuple(part for part in error.get("loc", ()) if part != "body")
    if error.get("type") == "extra_forbidden" and loc:
        told = unknown_field(_body_model(request), loc)
        if told:
            return f"{param}: {told}"
    return f"{param}: {error.get('msg', 'invalid')}"


def _route_hint(request: Request, status: int, allowed: str | None) -> str:
    """What a 404 or 405 most likely meant: the route with /v1 before it or the
    nearest path served, or the methods the path takes."""
    if status == 405 and allowed:
        return f"; {request.method} is not answered at {request.url.path}: use {allowed}"
    if status != 404 or request.scope.get("route") is not None:  # a route's own 404 names its thing
        return ""
    path = request.url.path
    # The schema lists the served paths (built once per app, then kept by FastAPI).
    paths = sorted(request.app.openapi().get("paths", {}))
    versioned = "/v1" + path if not path.startswith("/v1/") else None
    if versioned in paths:
        return f"; did you mean {versioned}?"
    close = difflib.get_close_matches(path, paths, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestError)
    async def _request(_: Request, exc: RequestError) -> JSONResponse:
        return error_response(exc.type, exc.message, exc.param, response_headers(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        # A misspelt field also leaves the one meant missing: the unknown name, with its
        # suggestion, is the problem to tell first.
        unknown = [e for e in errors if e.get("type") == "extra_forbidden"]
        first = (unknown or errors or [{"loc": ("body",), "msg": "invalid request"}])[0]
        param = _loc_to_param(tuple(first.get("loc", ())))
        message = _validation_message(request, first, param)
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more problem(s))"
        return error_response("invalid_request", message, param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # a body FastAPI could not parse (bad UTF-8, too deep)
            return error_response("invalid_request", f"the body is not valid JSON: {exc.detail}", "body")
        kind = TYPE_BY_STATUS.get(exc.status_code, "invalid_request")
        headers = dict(exc.headers or {})
        allowed = next((v for k, v in headers.items() if k.lower() == "allow"), None)
        message = str(exc.detail) + _route_hint(request, exc.status_code, allowed)
        return error_response(kind, message, None, headers=headers, status=exc.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_response("internal_error", f"internal error: {type(exc).__name__}")
