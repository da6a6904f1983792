"""Pure ASGI middleware: the request-size limit and per-request metrics."""

from __future__ import annotations

import time

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rewardserve.service.errors import error_response
from rewardserve.service.metrics import Metrics


class BodyLimit:
    """413 for a body over ``max_bytes``: from Content-Length before reading a byte, or
    as soon as a streamed (chunked) body passes the limit."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = f"the request body is over the {self.max_bytes}-byte limit"
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None:
            try:
                too_big = int(length) > self.max_bytes
            except ValueError:
                too_big = True
                message = "the content-length header is not a number"
            if too_big:  # unread, so the connection is not kept
                response = error_response("payload_too_large", message, headers={"connection": "close"})
                await response(scope, receive, send)
                return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    raise HTTPException(413, message)
            return msg

        await self.app(scope, counted, send)


class RequestMetrics:
    """Counts requests by route template, model and status, and times them. Routes
    name their model in ``request.state.model`` once they know it is served."""

    def __init__(self, app: ASGIApp, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(msg: Message) -> None:
            nonlocal status
            if msg["type"] == "http.response.start":
                status = msg["status"]
            await send(msg)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            model = scope.get("state", {}).get("model", "")
            self.metrics.requests.labels(route, model, str(status)).inc()
            self.metrics.request_seconds.labels(route, model).observe(time.perf_counter() - start)
