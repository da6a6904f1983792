"""The engine's capacity refusals, each carrying the error type it is answered as.

A batcher's queue or a rule pool without room, a request bigger than a whole queue, a
client that hung up: raised where the engine finds them, read by the executor (which
names the model and the tenant in the message) and by nothing above it.
"""

from __future__ import annotations

from typing import ClassVar

from rewardserve.protocol import ErrorType


class CapacityError(Exception):
    error_type: ClassVar[ErrorType] = "overloaded"


class QueueFull(CapacityError):
    """A model's queue is full; retry after ``retry_after_s``."""

    def __init__(self, retry_after_s: int):
        super().__init__(f"queue full, retry after {retry_after_s}s")
        self.retry_after_s = retry_after_s


class TenantQueueFull(QueueFull):
    """The tenant's own queued-token limit on this model is reached."""

    def __init__(self, tenant: str, limit: int, retry_after_s: int):
        super().__init__(retry_after_s)
        self.tenant = tenant
        self.limit = limit


class QueueTooSmall(CapacityError):
    """The request alone is bigger than the whole queue: retrying cannot help."""

    error_type = "payload_too_large"


class PoolBusy(CapacityError):
    """A rule pool's queue has no room for this tenant's calls; retry later."""

    def __init__(self, message: str, tenant: str | None = None, retry_after_s: int = 1):
        super().__init__(message)
        self.tenant = tenant
        self.retry_after_s = retry_after_s


class ClientGone(Exception):
    """The client disconnected; its queued work was dropped."""
