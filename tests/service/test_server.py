"""The listening socket the service binds before its models load (service/server.py)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from rewardserve.service.server import bind


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
async def test_connections_on_the_bound_socket_send_without_nagle(host):
    """asyncio turns Nagle's algorithm off only on sockets that say they are TCP: on one
    made without the protocol, a response written as headers then body waited for the
    client's delayed ACK, ~40 ms on every request of a kept-alive connection."""
    try:
        sock = bind(host, 0)
    except Exception as exc:  # noqa: BLE001 - a machine without IPv6 loopback
        pytest.skip(f"cannot bind {host}: {exc}")
    seen: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handler, sock=sock)  # as uvicorn serves it
    async with server:
        reader, writer = await asyncio.open_connection(host, sock.getsockname()[1])
        assert await asyncio.wait_for(reader.read(), 5) == b"ok"
        writer.close()
    assert seen and seen[0] != 0
