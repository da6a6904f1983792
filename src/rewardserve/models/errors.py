"""The domain's errors: what went wrong, as a type of the wire contract's error table
(protocol/errors.py), never as HTTP. Only the service turns a type into a status and a
``retry_after_s`` into a header (service/errors.py).

    ItemError      one item cannot be scored; the others still are (``valid: false``)
    RequestError   the request as a whole is refused; one subclass per error type
    StartupError   what cannot be served as configured, found before serving
"""

from __future__ import annotations

from typing import ClassVar

from rewardserve.protocol import ErrorType


class ItemError(Exception):
    """This item cannot be scored; its neighbours still are. Becomes ``valid: false``."""


class RequestError(Exception):
    """The request as a whole is unacceptable: answered as its ``type`` says, naming
    ``param``; ``retry_after_s`` when retrying later can succeed."""

    error_type: ClassVar[ErrorType] = "invalid_request"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        type: ErrorType | None = None,
        retry_after_s: int | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.param = param
        self.type: ErrorType = type or self.error_type
        self.retry_after_s = retry_after_s


class InvalidRequest(RequestError):
    error_type = "invalid_request"


class NotFound(RequestError):
    error_type = "not_found"


class PayloadTooLarge(RequestError):
    error_type = "payload_too_large"


class Overloaded(RequestError):
    error_type = "overloaded"

    def __init__(self, message: str, *, retry_after_s: int, param: str | None = None):
        super().__init__(message, param=param, retry_after_s=retry_after_s)


class NotReady(RequestError):
    error_type = "not_ready"


class DeadlineExceeded(RequestError):
    error_type = "deadline_exceeded"


class ModelAsleep(RequestError):
    error_type = "model_asleep"


class StartupError(ValueError):
    """What cannot be served as configured (a model, the port), one line each."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def one_line(exc: BaseException) -> str:
    """An exception as ``Type: message`` on one line (messages carry tracebacks' newlines)."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())
