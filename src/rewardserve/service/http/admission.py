"""What happens to a request before the route reads a byte of its body, and what stops
it when nobody wants its answer any more.

``Admission`` (pure ASGI middleware, inside the body-size limit):

- authenticates: every route but the open ones (``/health``, ``/ready``, ``/metrics``,
  ``/``) needs the bearer key when keys are set, the API docs included; a refused
  request costs no body read and no JSON parse;
- refuses new scoring work (POST) with 503 while the replica drains;
- reads ``x-deadline-ms`` on arrival, so the deadline counts the time spent reading
  and parsing the body too;
- gives the request a ``RequestScope`` (``request.state.request_scope``) and cancels
  it when the client disconnects after sending its body, or when the deadline passes:
  queued and running work of that request is dropped (batcher, rule pool);
- keeps the requests in flight, so that a shutdown that cannot wait any longer answers
  each unfinished one with our JSON 503 and ``retry-after`` (which nginx and the client
  retry elsewhere) instead of a bare 500 from the server.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rewardserve.engine.scope import RequestScope
from rewardserve.engine.tenants import label, named
from rewardserve.protocol import ERROR_STATUS, ErrorBody, ErrorDetail, ErrorType
from rewardserve.service.http.auth import AuthError, bearer_token, check_bearer, has_valid_key

if TYPE_CHECKING:
    from rewardserve.service.app import ServiceState

# /version is open as in vLLM (a probe may read it with no key); /metrics shows a keyless caller no
# tenant's work (service/api/info/routes.py).
OPEN_PATHS = frozenset({"/health", "/ready", "/metrics", "/version", "/"})
# The admin API takes admin keys only (settings admin_keys), never the scoring keys.
ADMIN_PREFIX = "/v1/admin/"
DEADLINE_HEADER = "x-deadline-ms"


def has_body(headers: dict[str, str]) -> bool:
    return headers.get("content-length", "0") not in ("", "0") or "transfer-encoding" in headers


def scope_of(request: Request) -> RequestScope:
    """The request's scope (one made on the spot for a request that bypassed the
    middleware, as unit tests of a route may)."""
    state = request.scope.setdefault("state", {})
    if "request_scope" not in state:
        state["request_scope"] = RequestScope()
    request_scope: RequestScope = state["request_scope"]
    return request_scope


async def send_error(
    send: Send,
    kind: ErrorType,
    message: str,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> None:
    """The one error body, with its type's status from the one table
    (protocol/errors.py), written straight to ASGI (before or instead of the app)."""
    body = (
        ErrorBody(error=ErrorDetail(type=kind, message=message, param=param))
        .model_dump_json(exclude_none=True)
        .encode()
    )
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": ERROR_STATUS[kind], "headers": raw})
    await send({"type": "http.response.body", "body": body})


@dataclass(eq=False)  # kept in a set by identity
class _InFlight:
    scope: RequestScope
    task: asyncio.Task[None]
    started: bool = False  # the response has begun: it can only finish or break
    aborted: bool = False


@dataclass
class InFlightRequests:
    """The requests the app is working on, for a shutdown that gives up on them."""

    entries: set[_InFlight] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self.entries)

    def abort_all(self, reason: str = "shutdown") -> int:
        """Cancel every unfinished request: each one not yet answering gets a 503."""
        count = 0
        for entry in list(self.entries):
            if not entry.task.done():
                entry.aborted = True
                entry.scope.cancel(reason)
                entry.task.cancel()
                count += 1
        return count


class Admission:
    def __init__(self, app: ASGIApp, state: ServiceState):
        """``state``: the service state (keys, draining, in-flight requests)."""
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope.get("path", ""), scope.get("method", "GET")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        # Answered before its body is read: the connection is not kept (the rest of the
        # upload would have to be read and thrown away first).
        unread = {"connection": "close"} if has_body(headers) else {}
        if "content-length" in headers and "transfer-encoding" in headers:
            # Framed two ways: a proxy in front may have read another body than this
            # server did (request smuggling). RFC 9112 section 6.1: refuse, then close.
            await send_error(
                send,
                "malformed_request",
                "the request has both Content-Length and Transfer-Encoding; send one of them",
                headers={"connection": "close"},
            )
            return
        admin_port = self.state.settings.admin_port
        if admin_port is not None:
            # The admin API only on its own listener, and that listener only the admin API.
            on_admin_port = (scope.get("server") or (None, None))[1] == admin_port
            probe = on_admin_port and path in ("/health", "/ready")
            if path.startswith(ADMIN_PREFIX) != on_admin_port and not probe:
                said = (
                    "this port serves only the admin API (/v1/admin/); score on the service's port"
                    if on_admin_port
                    else "the admin API listens on its own port (admin_port), not this one"
                )
                await send_error(send, "not_found", f"{path}: {said}", headers=unread)
                return
        if path.startswith(ADMIN_PREFIX):
            refused = self._admin_refusal(headers.get("authorization"))
            if refused is not None:
                kind, message = refused
                extra = {"www-authenticate": "Bearer"} if kind == "authentication_error" else {}
                await send_error(send, kind, message, headers={**extra, **unread})
                return
            request_scope = RequestScope(None)
            scope.setdefault("state", {})["request_scope"] = request_scope
            await self._run(scope, receive, send, request_scope)
            return
        if path not in OPEN_PATHS and method != "OPTIONS":
            try:
                check_bearer(headers.get("authorization"), self.state.api_keys)
            except AuthError as exc:
                await send_error(
                    send, "authentication_error", str(exc), headers={"www-authenticate": "Bearer", **unread}
                )
                return
        tenant = (
            self.state.tenants.of_key(bearer_token(headers.get("authorization")))
            if self.state.tenants.enabled
            else None
        )
        who = label(tenant)
        counted = path not in OPEN_PATHS
        open_now = self.state.open_requests.get(who, 0)
        if counted and open_now >= self.state.settings.requests_per_tenant():
            # One tenant's requests (a flood of bodies sent a byte at a time, say) hold at
            # most this many connections: the others' requests still find one.
            self.state.tenants.rejected.labels(who, "open_requests").inc()
            await send_error(
                send,
                "overloaded",
                f"{named(tenant)} has {open_now} requests open, its limit; retry after 1s",
                headers={"retry-after": "1", **unread},
            )
            return
        if method == "POST" and self.state.draining:
            await send_error(
                send,
                "not_ready",
                "this replica is shutting down; send the request to another one",
                headers={"retry-after": "1", **unread},
            )
            return
        deadline = None
        if DEADLINE_HEADER in headers:
            try:
                ms = float(headers[DEADLINE_HEADER])
            except ValueError:
                ms = -1.0
            if not math.isfinite(ms) or ms < 0:
                await send_error(
                    send,
                    "invalid_request",
                    f"{DEADLINE_HEADER} must be a non-negative number of milliseconds",
                    param=DEADLINE_HEADER,
                    headers=unread,
                )
                return
            deadline = time.monotonic() + ms / 1000.0
        request_scope = RequestScope(deadline, tenant=tenant)
        scope.setdefault("state", {})["request_scope"] = request_scope
        if not counted:
            await self._run(scope, receive, send, request_scope)
            return
        self.state.open_requests[who] = open_now + 1
        try:
            await self._run(scope, receive, send, request_scope)
        finally:
            self.state.open_requests[who] -= 1

    def _admin_refusal(self, header: str | None) -> tuple[ErrorType, str] | None:
        """Why this request may not use the admin API (None: it may)."""
        admin_keys = self.state.settings.admin_keys
        if not admin_keys:
            return "permission_denied", "the admin API is off: start the service with REWARDSERVE_ADMIN_KEYS"
        try:
            check_bearer(header, admin_keys)
        except AuthError as exc:
            if self.state.api_keys and bearer_token(header) and has_valid_key(header, self.state.api_keys):
                return "permission_denied", "this key scores; the admin API takes an admin key (REWARDSERVE_ADMIN_KEYS)"
            return "authentication_error", str(exc)
        return None

    async def _run(self, scope: Scope, receive: Receive, send: Send, request_scope: RequestScope) -> None:
        loop = asyncio.get_running_loop()
        timer = None
        if request_scope.deadline is not None:
            delay = max(0.0, request_scope.deadline - time.monotonic())
            timer = loop.call_later(delay, request_scope.cancel, "deadline")
        watch = _DisconnectWatch(receive, request_scope)

        async def tracked_send(message: Message) -> None:
            if entry.aborted and not entry.started:
                return  # the app was given up on; our 503 answers instead
            if message["type"] == "http.response.start":
                entry.started = True
            await send(message)

        inner = asyncio.ensure_future(self.app(scope, watch.receive, tracked_send))
        entry = _InFlight(request_scope, inner)
        self.state.in_flight.entries.add(entry)
        try:
            await inner
        except asyncio.CancelledError:
            if not entry.aborted:
                raise
            if not entry.started:
                entry.started = True
                await send_error(
                    send,
                    "not_ready",
                    "the replica shut down before this request finished; retry it",
                    headers={"retry-after": "1"},
                )
        finally:
            self.state.in_flight.entries.discard(entry)
            if timer is not None:
                timer.cancel()
            watch.close()
            request_scope.cancel("finished")  # what the route left running is dropped


class _DisconnectWatch:
    """Passes the body through; once it has all arrived, listens for the client going
    away (cancelling the request's scope) and tells the app through its own receive."""

    def __init__(self, receive: Receive, request_scope: RequestScope):
        self._receive = receive
        self._scope = request_scope
        self._gone = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def receive(self) -> Message:
        if self._task is None:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self._gone.set()
                self._scope.cancel("disconnected")
            elif message["type"] == "http.request" and not message.get("more_body", False):
                self._task = asyncio.ensure_future(self._listen())
            return message
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def _listen(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        self._gone.set()
        self._scope.cancel("disconnected")

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
