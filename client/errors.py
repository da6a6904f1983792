"""The client's error hierarchy.

    RewardServeError
    ├── APIConnectionError          the service could not be reached
    │   └── APITimeoutError         ...or did not answer in time
    └── APIStatusError              the service answered with an error status
        ├── AuthenticationError     401
        ├── NotFoundError           404
        ├── PayloadTooLargeError    413
        ├── UnprocessableEntityError 422
        ├── RateLimitError          429 (retried, honouring retry-after)
        └── InternalServerError     5xx
            ├── ServiceUnavailableError 503 (retried)
            └── DeadlineExceededError   504
"""

from __future__ import annotations

import httpx

from rewardserve.client.protocol import ErrorBody


class RewardServeError(Exception):
    pass


class APIConnectionError(RewardServeError):
    def __init__(self, message: str, *, request: httpx.Request | None = None):
        super().__init__(message)
        self.request = request


class APITimeoutError(APIConnectionError):
    pass


class APIStatusError(RewardServeError):
    def __init__(self, response: httpx.Response):
        self.response = response
        self.status_code = response.status_code
        self.type: str | None = None
        self.param: str | None = None
        message = response.text[:500] or response.reason_phrase
        try:
            body = ErrorBody.model_validate_json(response.content)
            self.type, self.param, message = body.error.type, body.error.param, body.error.message
        except ValueError:
            pass
        self.message = message
        super().__init__(f"{response.status_code} {self.type or 'error'}: {message}")


class AuthenticationError(APIStatusError):
    pass


class NotFoundError(APIStatusError):
    pass


class PayloadTooLargeError(APIStatusError):
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


_BY_STATUS: dict[int, type[APIStatusError]] = {
    401: AuthenticationError,
    404: NotFoundError,
    413: PayloadTooLargeError,
    422: UnprocessableEntityError,
    429: RateLimitError,
    503: ServiceUnavailableError,
    504: DeadlineExceededError,
}


def status_error(response: httpx.Response) -> APIStatusError:
    cls = _BY_STATUS.get(response.status_code)
    if cls is None:
        cls = InternalServerError if response.status_code >= 500 else APIStatusError
    return cls(response)
