"""``RequestContext``: what every layer below the routes knows of one request, built once.

Its tenant, its ``RequestScope`` (deadline, cancellation: the client gone, the deadline
passed, the replica shutting down), the service's state (settings, served models,
metrics, tenants, pools), what the request has made the service do so far (charged to
its tenant, held to the per-request limit), and ``log_fields``: the fields the request log and
the request metrics read when it is answered (service/http/middleware.py). A route makes it
from its HTTP request (``of``); shadow scoring makes a detached one for the tenant whose
request it copies (``detached``): no HTTP request behind it, and nobody reads its log.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from rewardserve.engine.scope import RequestScope
from rewardserve.models.plan import PeerLookup

if TYPE_CHECKING:
    from rewardserve.engine.executor import Engine
    from rewardserve.service.app import ServiceState

_KEY = "request_context"


@dataclass(eq=False)
class RequestContext:
    svc: ServiceState
    scope: RequestScope
    # The fields the request log and the request metrics read when it is answered: the
    # request's ASGI state, where service/http/middleware.py finds them.
    log_fields: dict[str, Any] = field(default_factory=dict)
    # Model inputs and pool calls planned so far, and how many of them the tenant's items
    # per second has been charged (engine/executor.py charge_work).
    work_units: int = 0
    work_charged: int = 0

    @property
    def tenant(self) -> str | None:
        return self.scope.tenant

    @property
    def engine(self) -> Engine:
        return self.svc.engine

    @property
    def detached(self) -> bool:
        """Made by the service for work of its own (a shadow), not by a route."""
        return bool(self.log_fields.get("detached"))

    def peers(self, names: Iterable[str]) -> PeerLookup:
        """The served models ``names`` (with what they depend on) as this request's
        tenant sees them, lent to its plan."""
        return self.svc.registry.lend(names, self.tenant)

    def name_model(self, name: str) -> None:
        """The model this request is for, in its log line and metrics."""
        self.log_fields["model"] = name

    @classmethod
    def of(cls, request: Request) -> RequestContext:
        """The request's context, made on first use (its scope is Admission's)."""
        from rewardserve.service.http.admission import scope_of

        state = request.scope.setdefault("state", {})
        if _KEY not in state:
            state[_KEY] = cls(request.app.state.svc, scope_of(request), log_fields=state)
        context: RequestContext = state[_KEY]
        return context

    @classmethod
    def detached_for(cls, svc: ServiceState, tenant: str | None, seconds: float, name: str) -> RequestContext:
        """A context of the service's own, charged to ``tenant``, dropped after ``seconds``."""
        scope = RequestScope(deadline=time.monotonic() + seconds, name=name, tenant=tenant)
        return cls(svc, scope, log_fields={"detached": True})
