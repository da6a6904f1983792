"""FastAPI dependencies: each handler is given what it uses, by type.

    Ctx      the request's RequestContext (context.py): its tenant, scope and accounting,
             and through it the use cases' view of the service
    Admin    the served models' lifecycle (ops/lifecycle.py), for the admin routes

A handler names ``ctx: Ctx`` or ``lifecycle: Admin`` in its signature rather than
reaching into ``request.app.state``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from rewardserve.service.context import RequestContext
from rewardserve.service.ops.lifecycle import Lifecycle


async def request_context(request: Request) -> RequestContext:
    # async: FastAPI runs a plain def dependency in its threadpool, a hop for nothing.
    return RequestContext.of(request)


async def lifecycle(request: Request) -> Lifecycle:
    served: Lifecycle = request.app.state.svc.lifecycle
    return served


Ctx = Annotated[RequestContext, Depends(request_context)]
Admin = Annotated[Lifecycle, Depends(lifecycle)]
