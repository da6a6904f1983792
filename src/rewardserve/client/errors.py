"""The client's error hierarchy.

RewardServeError
├── APIConnectionError          the service could not be reached
│   └── APITimeoutError         ...or did not answer in time
├── APIResponseValidationError  its answer is not one (malformed, results that do not
│   │                           match the items sent, a valid result with no finite score)
│   └── ResponseTooLargeError   ...or is over max_response_bytes
└── APIStatusError              the service answered with an error status
    ├── AuthenticationError     401
    ├── PermissionDeniedError   403 (a scoring key on the admin API)
    ├── NotFoundError           404
    ├── PayloadTooLargeError    413
    ├── UnprocessableEntityError 422
    ├── RateLimitError          429 (retried, honouring retry-after)
    └── InternalServerError     5xx
        ├── ServiceUnavailableError 503 (retried; a model asleep too)
        └── DeadlineExceededError   504
"""

from __future__ import annotations

import json

import httpx

from rewardserve.protocol import ERROR_STATUS, ErrorBody, ErrorType


class RewardServeError(Exception):
    pass


class APIConnectionError(RewardServeError):
    def __init__(self, message: str, *, request: httpx.Request | None = None):
        super().__init__(message)
        self.request = request


class APITimeoutError(APIConnectionError):
    pass


class APIResponseValidationError(RewardServeError):
    """The service answered 2xx with something that is not a valid answer to the call."""


class ResponseTooLargeError(APIResponseValidationError):
    pass


class APIStatusError(RewardServeError):
    def __init__(self, response: httpx.Response, hint: str | None = None):
        self.response = response
        self.status_code = response.status_code
        self.type: str | None = None
        self.param: str | None = None
        message = response.text[:500] or response.reason_phrase
        try:
            body = ErrorBody.model_validate_json(response.content)
            self.type, self.param, message = body.error.type, body.error.param, body.error.message
        except ValueError:
            # A type this client does not know yet (a newer service): still read the body.
            error = _error_fields(response.content)
            self.type, self.param, message = error.get("type"), error.get("param"), error.get("message", message)
        self.message = f"{message}; {hint}" if hint else message
        where = f" (param: {self.param})" if self.param else ""
        try:
            url = f"{response.request.method} {response.request.url}: "
        except RuntimeError:  # a response made without its request
            url = ""
        super().__init__(f"{url}{response.status_code} {self.type or 'error'}: {self.message}{where}")


class AuthenticationError(APIStatusError):
    pass


class PermissionDeniedError(APIStatusError):
    """A valid key that may not do this (a scoring key on the admin API)."""


class NotFoundError(APIStatusError):
    pass


class PayloadTooLargeError(APIStatusError):
    pass


class BadRequestError(APIStatusError):
    pass


class UnprocessableEntityError(APIStatusError):
    pass


class RateLimitError(APIStatusError):
    pass


class InternalServerError(APIStatusError):
    pass


class ServiceUnavailableError(InternalServerError):
    pass


class DeadlineExceededError(InternalServerError):
    pass


def _error_fields(content: bytes) -> dict[str, str]:
    try:
        error = json.loads(content).get("error")
    except (ValueError, AttributeError):
        return {}
    if not isinstance(error, dict):
        return {}
    return {k: v for k, v in error.items() if k in ("type", "message", "param") and isinstance(v, str)}


# By the status each error type has in the contract's one table (ERROR_STATUS).
_BY_TYPE: dict[ErrorType, type[APIStatusError]] = {
    "authentication_error": AuthenticationError,
    "permission_denied": PermissionDeniedError,
    "not_found": NotFoundError,
    "payload_too_large": PayloadTooLargeError,
    "malformed_request": BadRequestError,
    "invalid_request": UnprocessableEntityError,
    "overloaded": RateLimitError,
    "not_ready": ServiceUnavailableError,
    "deadline_exceeded": DeadlineExceededError,
}
_BY_STATUS: dict[int, type[APIStatusError]] = {ERROR_STATUS[kind]: cls for kind, cls in _BY_TYPE.items()}


def status_error(response: httpx.Response, hint: str | None = None) -> APIStatusError:
    """The error for a status (a proxy's bodiless 503 included), by the contract's table;
    ``hint``: what to do, after the service's message."""
    cls = _BY_STATUS.get(response.status_code)
    if cls is None:
        cls = InternalServerError if response.status_code >= 500 else APIStatusError
    return cls(response, hint)
