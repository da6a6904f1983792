"""Every error body, and the one table from error type to HTTP status."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from rewardserve.protocol.common import _Response

# --------------------------------------------------------------------------- errors

ErrorType = Literal[
    "authentication_error",
    "permission_denied",
    "not_found",
    "method_not_allowed",
    "payload_too_large",
    "malformed_request",
    "invalid_request",
    "overloaded",
    "internal_error",
    "model_asleep",
    "not_ready",
    "deadline_exceeded",
]
# The one table from error type to HTTP status: the service answers with it, the client
# reads a bodiless status (a proxy's 502) back through it.
ERROR_STATUS: dict[ErrorType, int] = {
    "authentication_error": 401,
    "permission_denied": 403,  # a valid key that may not do this (a tenant's on the admin API)
    "not_found": 404,
    "method_not_allowed": 405,
    "payload_too_large": 413,
    "malformed_request": 400,  # HTTP framing a server must refuse (RFC 9112), before any body
    "invalid_request": 422,
    "overloaded": 429,
    "internal_error": 500,
    "model_asleep": 503,  # put to sleep by the admin API (service/ops/lifecycle.py): retry, or wake it
    "not_ready": 503,
    "deadline_exceeded": 504,
}


class ErrorDetail(_Response):
    type: ErrorType = Field(description="The error's type: one name per meaning (the errors reference lists them).")
    message: str = Field(description="What went wrong, in words, and what to change.")
    param: str | None = Field(default=None, description="The request field at fault, as a dotted path, when one is.")


class ErrorBody(_Response):
    """Every non-2xx response: ``{"error": {"type", "message", "param"?}}``."""

    error: ErrorDetail = Field(description="The error.")


def unknown_field_message(field: str, known: Sequence[str], where: str) -> str:
    """A request field its model does not have, told the same way by the service and the
    client: the nearest known name (as config errors suggest one) and the fields of the
    model (``where``) it was sent in."""
    close = difflib.get_close_matches(field, list(known), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown field {field!r}; {hint}{where} has the fields: {', '.join(known)}"
