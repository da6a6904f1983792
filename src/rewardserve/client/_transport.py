"""What bounds one HTTP attempt whatever the server does: a deadline on the whole attempt
(connect, headers, body) and a cap on the body's decoded size.

httpx's timeouts bound each socket read, so a server that drips its headers or body a
byte at a time keeps an attempt alive for ever. Here every read and write of the
connection's socket waits at most what is left of the attempt's deadline (a context
variable set around the attempt: per thread for the blocking client, per task for the
async one), so the attempt ends at its deadline however the bytes come. The body is
read as it arrives, decoded chunk by chunk, and given up on past ``max_bytes``: a gzip
bomb costs one network chunk's expansion, not its whole.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import httpcore
import httpx

from rewardserve.client.errors import ResponseTooLargeError

_deadline: ContextVar[float | None] = ContextVar("rewardserve_attempt_deadline", default=None)
_DROPPED_HEADERS = ("content-encoding", "content-length", "transfer-encoding")


@contextmanager
def attempt_deadline(seconds: float) -> Iterator[None]:
    """Every socket operation inside the block ends by ``seconds`` from now."""
    token = _deadline.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def _left(timeout: float | None) -> float | None:
    deadline = _deadline.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("the attempt's deadline passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream):
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, _left(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _AsyncStream(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream):
        self._inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, _left(timeout))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, _left(timeout))

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        return _AsyncStream(await self._inner.start_tls(ssl_context, server_hostname, _left(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend):
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_tcp(host, port, _left(timeout), local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_unix_socket(path, _left(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _AsyncBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, inner: httpcore.AsyncNetworkBackend):
        self._inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return _AsyncStream(await self._inner.connect_tcp(host, port, _left(timeout), local_address, socket_options))

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        return _AsyncStream(await self._inner.connect_unix_socket(path, _left(timeout), socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def _bound(pool: Any, wrap: Any) -> None:
    # httpx builds its httpcore pool itself and takes no network backend: wrapped in place.
    if not hasattr(pool, "_network_backend"):
        raise RuntimeError("this httpx/httpcore has no network backend to bound; pin httpcore>=1.0")
    pool._network_backend = wrap(pool._network_backend)


def bounded_client(limits: httpx.Limits) -> httpx.Client:
    transport = httpx.HTTPTransport(limits=limits)
    _bound(transport._pool, _Backend)
    return httpx.Client(transport=transport)


def bounded_async_client(limits: httpx.Limits) -> httpx.AsyncClient:
    transport = httpx.AsyncHTTPTransport(limits=limits)
    _bound(transport._pool, _AsyncBackend)
    return httpx.AsyncClient(transport=transport)


def _too_large(response: httpx.Response, max_bytes: int) -> ResponseTooLargeError:
    return ResponseTooLargeError(
        f"{response.request.method} {response.request.url}: the response is over "
        f"{max_bytes} bytes, the client's limit (max_response_bytes)"
    )


def _checked_length(response: httpx.Response, max_bytes: int) -> None:
    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise _too_large(response, max_bytes)


def _whole(response: httpx.Response, body: bytes) -> httpx.Response:
    """The response with its (decoded) body read."""
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _DROPPED_HEADERS]
    return httpx.Response(
        response.status_code, headers=headers, content=body, request=response.request, extensions=response.extensions
    )


def read_capped(response: httpx.Response, max_bytes: int) -> httpx.Response:
    _checked_length(response, max_bytes)
    chunks, size = [], 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(response, max_bytes)
        chunks.append(chunk)
    return _whole(response, b"".join(chunks))


async def aread_capped(response: httpx.Response, max_bytes: int) -> httpx.Response:
    _checked_length(response, max_bytes)
    chunks, size = [], 0
    body: AsyncIterator[bytes] = response.aiter_bytes()
    async for chunk in body:
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(response, max_bytes)
        chunks.append(chunk)
    return _whole(response, b"".join(chunks))
