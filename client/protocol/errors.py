"""Every error body, and the one table from error type to HTTP status."""

from __future__ import annotations

from typing import Literal

from rewardserve.client.protocol.common import _Response

# --------------------------------------------------------------------------- errors

ErrorType = Literal[
    "authentication_error",
    "not_found",
    "method_not_allowed",
    "payload_too_large",
    "malformed_request",
    "invalid_request",
    "overloaded",
    "internal_error",
    "not_ready",
    "deadline_exceeded",
]
# The one table from error type to HTTP status: the service answers with it, the client
# reads a bodiless status (a proxy's 502) back through it.
ERROR_STATUS: dict[ErrorType, int] = {
    "authentication_error": 401,
    "not_found": 404,
    "method_not_allowed": 405,
    "payload_too_large": 413,
    "malformed_request": 400,  # HTTP framing a server must refuse (RFC 9112), before any body
    "invalid_request": 422,
    "overloaded": 429,
    "internal_error": 500,
    "not_ready": 503,
    "deadline_exceeded": 504,
}


class ErrorDetail(_Response):
    type: ErrorType
    message: str
    param: str | None = None


class ErrorBody(_Response):
    """Every non-2xx response: ``{"error": {"type", "message", "param"?}}``."""

    error: ErrorDetail
