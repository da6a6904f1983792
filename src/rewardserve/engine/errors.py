"""The engine's refusals: a model's queue or a rule pool without room, a request bigger
than a whole queue, a client gone. Each is a RequestError of the type it is answered
as (models/errors.py), its message written where the refusal is found: nothing above
translates them.
"""

from __future__ import annotations

from rewardserve.models.errors import Overloaded, PayloadTooLarge


class QueueFull(Overloaded):
    """A model's queue has no room for the request's tokens now."""


class TenantQueueFull(QueueFull):
    """The tenant's own queued-token limit on this model is reached."""


class QueueTooSmall(PayloadTooLarge):
    """The request alone is bigger than the model's whole queue: retrying cannot help."""

    def __init__(self, message: str):
        super().__init__(message, param="items")


class PoolBusy(Overloaded):
    """A rule pool's queue has no room for this tenant's calls now."""

    def __init__(self, reason: str, tenant: str | None = None, retry_after_s: int = 1):
        super().__init__(
            f"the rule pools have no room for this request ({reason}); retry after {retry_after_s}s",
            retry_after_s=retry_after_s,
        )
        self.reason = reason
        self.tenant = tenant


class ClientGone(Exception):
    """The client disconnected; its queued work was dropped (answered 499, read by nobody)."""
