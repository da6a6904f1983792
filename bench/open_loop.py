"""An open-loop HTTP load that costs its own machine little: requests sent on a fixed
schedule over raw asyncio streams (HTTP/1.1, kept-alive connections), whatever became of
the earlier ones.

On a 2-core machine the load generator shares the cores with the service it measures;
httpx at 100 requests/s with hundreds in flight took up to 0.8 of a core here, which
the service then lacked. This takes a few milliseconds of CPU a second. A request's
latency is counted from its scheduled time, so waiting for a free connection counts too.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class LoadResult:
    sent: int = 0
    latencies: list[float] = field(default_factory=list)  # of the 200s, seconds
    statuses: dict[int, int] = field(default_factory=dict)
    items: int = 0  # items in the answered requests
    elapsed: float = 0.0  # from the first scheduled request to the last answer

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")

    @property
    def items_per_s(self) -> float:
        return self.items / self.elapsed if self.elapsed else 0.0


# A kept-alive connection idle this long is not reused: the service closes one idle for
# its keep_alive_s (5 s by default), and a request sent as it does so is lost (a broken
# connection, counted as status 0, where the service did nothing wrong).
IDLE_REUSE_S = 2.0


class _Connections:
    def __init__(self, url: str, limit: int):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []
        self._slots = asyncio.Semaphore(limit)

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        while self._idle:
            reader, writer, since = self._idle.pop()
            if time.monotonic() - since < IDLE_REUSE_S:
                return reader, writer
            writer.close()
        return await asyncio.open_connection(self.host, self.port)

    async def request(self, head: bytes, body: bytes) -> tuple[int, bytes]:
        async with self._slots:
            reader, writer = await self._connection()
            try:
                writer.write(head + body)
                status, keep, payload = await _response(reader)
            except BaseException:
                writer.close()
                raise
            if keep:
                self._idle.append((reader, writer, time.monotonic()))
            else:
                writer.close()
            return status, payload

    def close(self) -> None:
        for _, writer, _ in self._idle:
            writer.close()


async def _response(reader: asyncio.StreamReader) -> tuple[int, bool, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    payload = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers.get("connection", "").lower() != "close", payload


async def open_loop(
    url: str,
    path: str,
    body: Callable[[], dict],
    rate: float,
    seconds: float,
    key: str | None = None,
    items_of: Callable[[dict], int] = lambda b: len(b["items"]),
    max_connections: int = 900,
) -> LoadResult:
    """POST ``body()`` to ``url + path`` every ``1 / rate`` s for ``seconds``; waits for
    every answer."""
    connections = _Connections(url, max_connections)
    result = LoadResult()
    auth = f"authorization: Bearer {key}\r\n" if key else ""

    async def one(scheduled: float, payload: dict) -> None:
        data = json.dumps(payload).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nhost: {connections.host}\r\ncontent-type: application/json\r\n"
            f"{auth}content-length: {len(data)}\r\n\r\n"
        ).encode()
        try:
            status, _ = await connections.request(head, data)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            status = 0  # the connection broke
        result.statuses[status] = result.statuses.get(status, 0) + 1
        if status == 200:
            result.latencies.append(time.perf_counter() - scheduled)
            result.items += items_of(payload)

    begin = time.perf_counter()
    tasks = []
    while (scheduled := begin + result.sent / rate) < begin + seconds:
        await asyncio.sleep(max(0.0, scheduled - time.perf_counter()))
        tasks.append(asyncio.ensure_future(one(scheduled, body())))
        result.sent += 1
    await asyncio.gather(*tasks)
    result.elapsed = time.perf_counter() - begin
    connections.close()
    return result
