"""Running the app under uvicorn: connection limits, a drain phase on SIGTERM, and a
shutdown that answers every request it gives up on.

Connections: at most ``max_connections`` open (one more is answered 503 with
``retry-after`` and closed at once, before it can hold a file descriptor for long), a
request's headers must arrive within ``header_timeout_s`` of the connection opening or
of the previous response (half-sent headers cannot hold a connection open), its body
within ``body_timeout_s`` of its headers (a 408, and the connection closed: a body sent
a byte at a time cannot hold one either), idle keep-alive connections close after
``keep_alive_s``, and a request refused before its body was read (401, 413, 429) gets
its answer followed by a lingering close (the rest of the upload is thrown away
unparsed while it keeps coming, for a few seconds at most) rather than a reset that
could lose the answer. How many requests one tenant has open at once is capped in
service/http/admission.py. The open-file limit is raised to its hard limit at start. Repeated log lines
(a flood of refused connections, accept errors) are rate-limited (service/observability/logs.py).

On SIGTERM (or Ctrl-C) the replica first turns not-ready: /ready answers 503 and new
scoring requests get 503 (a load balancer sends them to another replica, nginx with
``proxy_next_upstream http_503``), while requests already in flight finish. After
``drain_seconds`` uvicorn stops taking connections and waits for the last requests; at
``graceful_seconds`` the ones still unfinished are answered with our JSON 503 and
``retry-after`` (service/http/admission.py) and their work is dropped, the lifespan stops
the batchers and pools, and the process exits 0. A second signal stops at once.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
from types import FrameType
from typing import Any, Protocol, cast

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from rewardserve.models.errors import StartupError
from rewardserve.service.app import ServiceState, create_app
from rewardserve.service.settings import Settings

log = logging.getLogger(__name__)

_REFUSAL = b'{"error":{"type":"overloaded","message":"too many open connections; retry shortly"}}'


LINGER_S = 5.0
LINGER_IDLE_S = 1.0  # a lingering client that stops sending is closed this soon
LINGER_BYTES = 64 * 1024 * 1024
_TOO_SLOW = b'{"error":{"type":"deadline_exceeded","message":"the request body did not arrive in time"}}'


class _Lingering(Protocol):
    """What a lingering close needs of its connection's protocol (GuardedH11Protocol)."""

    discarding: int | None
    conn: h11.Connection
    loop: asyncio.AbstractEventLoop

    def still_sending(self) -> None: ...


class _LingeringTransport:
    """The connection's transport, whose ``close`` lingers while the client is still
    sending a body the server refused without reading: the response is followed by a
    FIN and what still arrives is thrown away unparsed, for at most LINGER_S seconds or
    LINGER_BYTES, so the client reads the refusal instead of a connection reset."""

    def __init__(self, transport: asyncio.Transport, protocol: _Lingering):
        self._transport = transport
        self._protocol = protocol

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def close(self) -> None:
        protocol = self._protocol
        if (
            protocol.discarding is None
            and protocol.conn.their_state is h11.SEND_BODY
            and self._transport.can_write_eof()
            and not self._transport.is_closing()
        ):
            protocol.discarding = 0
            self._transport.write_eof()
            protocol.loop.call_later(LINGER_S, self._transport.close)
            protocol.still_sending()
            self._transport.resume_reading()
            return
        self._transport.close()


def guarded_protocol(max_connections: int, header_timeout_s: float, body_timeout_s: float = 30.0) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a connection cap, header- and body-read timeouts, and
    a lingering close after a refusal sent before the body was read."""

    class GuardedH11Protocol(H11Protocol):
        discarding: int | None = None  # bytes thrown away since a lingering close
        _linger_timer: asyncio.TimerHandle | None = None
        _body_timer: asyncio.TimerHandle | None = None

        # Typed asyncio.Transport, narrower than asyncio's BaseTransport: as uvicorn's own override.
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            # A stand-in, not a subclass: every attribute but close is the wrapped transport's.
            super().connection_made(cast(asyncio.Transport, _LingeringTransport(transport, self)))
            self._header_timer: asyncio.TimerHandle | None = None
            if len(self.connections) > max_connections:
                log.warning(
                    "refused a connection: %d open, the limit is %d", len(self.connections) - 1, max_connections
                )
                transport.write(
                    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                    b"retry-after: 1\r\nconnection: close\r\ncontent-length: "
                    + str(len(_REFUSAL)).encode()
                    + b"\r\n\r\n"
                    + _REFUSAL
                )
                transport.close()
                return
            self._arm_header_timer()

        def data_received(self, data: bytes) -> None:
            if self.discarding is not None:
                self.discarding += len(data)
                if self.discarding > LINGER_BYTES:
                    cast(_LingeringTransport, self.transport)._transport.close()
                else:
                    self.still_sending()
                return
            super().data_received(data)
            if self.cycle is not None and not self.cycle.response_complete:
                self._disarm_header_timer()  # a request is in progress: headers done
            else:
                self._arm_header_timer()
            self._watch_body()

        def still_sending(self) -> None:
            """Data came while lingering: close when it stops coming for LINGER_IDLE_S."""
            if self._linger_timer is not None:
                self._linger_timer.cancel()
            self._linger_timer = self.loop.call_later(
                LINGER_IDLE_S, cast(_LingeringTransport, self.transport)._transport.close
            )

        def _watch_body(self) -> None:
            """A timer from the headers to the end of the body."""
            if self.conn.their_state is h11.SEND_BODY:
                if self._body_timer is None and not self.transport.is_closing():
                    self._body_timer = self.loop.call_later(body_timeout_s, self._body_too_slow)
            elif self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _body_too_slow(self) -> None:
            self._body_timer = None
            if self.conn.their_state is not h11.SEND_BODY or self.transport.is_closing():
                return
            if self.cycle is not None and not self.cycle.response_started:
                self.cycle.disconnected = True  # the app's own answer, if any, goes nowhere
                self.cycle.message_event.set()  # and its wait for the body ends now
                self.transport.write(
                    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
                    b"content-length: " + str(len(_TOO_SLOW)).encode() + b"\r\n\r\n" + _TOO_SLOW
                )
            cast(_LingeringTransport, self.transport)._transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_header_timer()
            for timer in (self._body_timer, self._linger_timer):
                if timer is not None:
                    timer.cancel()
            super().connection_lost(exc)

        def _arm_header_timer(self) -> None:
            if getattr(self, "_header_timer", None) is None and not self.transport.is_closing():
                self._header_timer = self.loop.call_later(header_timeout_s, self._headers_too_slow)

        def _disarm_header_timer(self) -> None:
            if getattr(self, "_header_timer", None) is not None:
                assert self._header_timer is not None  # what getattr just read
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.cycle is None or self.cycle.response_complete:
                if not self.transport.is_closing():
                    self.transport.close()

    return GuardedH11Protocol


def raise_open_file_limit(wanted: int) -> int:
    """Raise the soft open-file limit to the hard one; returns the limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, wanted)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, state: ServiceState, drain_seconds: float, graceful_seconds: float):
        super().__init__(config)
        self.state = state
        self.drain_seconds = drain_seconds
        self.graceful_seconds = graceful_seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not uvicorn's handler: it records the signal to raise it again after shutdown,
        # so the process would die of SIGTERM instead of exiting 0 after draining.
        if self._stopping or self._loop is None:
            self.force_exit = self._stopping  # a second signal stops at once
            self.should_exit = True
            return
        self._stopping = True
        self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        log.info(
            "draining for %.1fs, then at most %.1fs for requests in flight", self.drain_seconds, self.graceful_seconds
        )
        self.state.draining = True
        assert self._loop is not None
        self._loop.call_later(self.drain_seconds, self._stop)

    def _stop(self) -> None:
        self.should_exit = True
        assert self._loop is not None
        self._loop.call_later(max(0.0, self.graceful_seconds - 0.5), self._give_up)

    def _give_up(self) -> None:
        aborted = self.state.in_flight.abort_all("shutdown")
        if aborted:
            log.warning("answered %d unfinished request(s) with 503 at shutdown", aborted)


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before any model loads: a busy port fails in a second
    with one line, not after the models have loaded."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # The protocol named: asyncio turns Nagle's algorithm off only on sockets that say
    # they are TCP, and a response goes out as two writes (headers, body).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise StartupError(
            [f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another port (--port) or stop what holds it"]
        ) from None
    sock.set_inheritable(True)
    return sock


def base_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def run(settings: Settings) -> int:
    """Serve until stopped; the exit code (1: a model failed to load without
    ``keep_going``)."""
    sock = bind(settings.host, settings.port)
    if settings.malloc_keep_activations:
        from rewardserve.service.ops.malloc_trim import keep_activation_memory

        keep_activation_memory()  # process-wide: only for the process that serves
    files = raise_open_file_limit(settings.max_connections + 256)
    max_connections = min(settings.max_connections, max(16, files - 256))
    if max_connections < settings.max_connections:
        log.warning("max_connections lowered to %d: the open-file limit is %d", max_connections, files)
    app = create_app(settings, url=base_url(sock))
    config = uvicorn.Config(
        app,
        log_level=settings.log_level,
        log_config=None,
        access_log=False,
        http=guarded_protocol(max_connections, settings.header_timeout_s, settings.body_timeout_s),
        timeout_keep_alive=int(max(1, settings.keep_alive_s)),
        # A backstop only: the server answers what is unfinished half a second before.
        timeout_graceful_shutdown=int(settings.graceful_seconds + 5),
    )
    state = app.state.svc
    server = DrainingServer(config, state, settings.drain_seconds, settings.graceful_seconds)
    failures: list[str] = []

    def stop_on_failure(message: str) -> None:
        failures.append(message)
        log.error("stopping: %s (--keep-going serves the other models)", message)
        server.should_exit = True

    state.registry.on_failure = stop_on_failure
    sockets = [sock]
    if settings.admin_port is not None:
        if settings.admin_port == sock.getsockname()[1]:
            raise StartupError([f"admin_port {settings.admin_port} is the scoring port: give the admin API another"])
        sockets.append(bind(settings.admin_host, settings.admin_port))
        log.info("admin API at http://%s:%d (only there)", settings.admin_host, settings.admin_port)
    server.run(sockets=sockets)
    return 1 if failures else 0
