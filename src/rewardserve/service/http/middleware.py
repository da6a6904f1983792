"""Pure ASGI middleware: the request-size limit, per-request metrics and the request log."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rewardserve.service.errors import BodyError, error_response
from rewardserve.service.observability.metrics import Metrics


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
                    raise BodyError(413, message, param=None, headers={"connection": "close"})
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


REQUEST_ID = "x-request-id"
# A caller's id is kept when it is short and printable ASCII, so it cannot forge log
# lines and comes back byte for byte.
_ID = re.compile(r"[A-Za-z0-9_.:@/+=-]{1,128}")
# Shown as it is in a text log line; anything else (spaces, quotes, control characters,
# non-ASCII from a percent-decoded path) is written JSON-escaped.
_BARE = re.compile(r"[A-Za-z0-9_.:@/+,\[\]{}()*?!#%&<>|~^$-]+")
_REASON_BYTES = 2048
request_log = logging.getLogger("rewardserve.requests")
QUIET_ROUTES = frozenset({"/health", "/ready", "/metrics"})


class RequestLog:
    """One log line per request: its id (the caller's ``x-request-id``, or one made
    here, echoed on the response), method, route, model, items, tokens, queue and
    inference ms, status, time, and the error message of a 4xx / 5xx."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        given = dict(scope["headers"]).get(REQUEST_ID.encode(), b"").decode("latin-1")
        request_id = given if _ID.fullmatch(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        status = 500
        error_body = b""

        async def send_logged(msg: Message) -> None:
            nonlocal status, error_body
            if msg["type"] == "http.response.start":
                status = msg["status"]
                msg = {**msg, "headers": [*msg.get("headers", []), (REQUEST_ID.encode(), request_id.encode())]}
            elif msg["type"] == "http.response.body" and status >= 400 and len(error_body) < _REASON_BYTES:
                error_body += msg.get("body", b"")[: _REASON_BYTES - len(error_body)]
            await send(msg)

        try:
            await self.app(scope, receive, send_logged)
        finally:
            state = scope.get("state", {})
            request_scope = state.get("request_scope")
            fields = {
                "request_id": request_id,
                "tenant": getattr(request_scope, "tenant", None),
                "method": scope.get("method"),
                "route": getattr(scope.get("route"), "path", scope.get("path", "")),
                "model": state.get("model"),
                **state.get("work", {}),
                "status": status,
                "ms": round((time.perf_counter() - start) * 1000, 1),
            }
            if status >= 400:
                fields["reason"] = _reason(error_body)
            shown = {k: v for k, v in fields.items() if v is not None}
            # Probes and scrapes poll: their lines only at debug level (a 503 from /ready
            # while models load is the answer, not an error).
            level = (
                logging.DEBUG
                if fields["route"] in QUIET_ROUTES
                else (logging.WARNING if status >= 500 else logging.INFO)
            )
            request_log.log(level, " ".join(f"{k}={_quoted(v)}" for k, v in shown.items()), extra={"fields": shown})


def _reason(body: bytes) -> str:
    try:
        return str(json.loads(body)["error"]["message"])[:500]
    except (ValueError, KeyError, TypeError):
        return body[:200].decode("utf-8", "replace")


def _quoted(value: object) -> str:
    text = str(value)
    return text if _BARE.fullmatch(text) else json.dumps(text)
