"""Several service replicas behind one client: round-robin balancing, failover, and the
retry plan of one call (attempts, backoff, deadline), shared by the sync and async twins.

A replica that fails at the connection level (or answers 502 / 503) is skipped for
``cooldown_s`` and the call moves on to the next one at once; after the cooldown it is
tried again. 429 and timeouts keep the usual backoff, honouring ``retry-after``.
"""

from __future__ import annotations

import threading
import time

import httpx

from rewardserve.client._core import ClientConfig, attempt_error
from rewardserve.client.errors import APITimeoutError

REPLICA_TROUBLE = frozenset({502, 503})


def split_urls(base_url: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    given = base_url.split(",") if isinstance(base_url, str) else list(base_url)
    urls = tuple(u.strip().rstrip("/") for u in given if u.strip())
    if not urls:
        raise ValueError("no base URL given")
    return urls


class Replicas:
    def __init__(self, urls: tuple[str, ...], cooldown_s: float = 5.0):
        self.urls = urls
        self.cooldown_s = cooldown_s
        self._dead_until = dict.fromkeys(urls, 0.0)
        self._next = 0
        self._lock = threading.Lock()

    def pick(self) -> str:
        """The next live replica in turn; if all are cooling down, the one that has
        waited longest."""
        with self._lock:
            now = time.monotonic()
            for step in range(len(self.urls)):
                url = self.urls[(self._next + step) % len(self.urls)]
                if self._dead_until[url] <= now:
                    self._next = (self._next + step + 1) % len(self.urls)
                    return url
            return min(self.urls, key=self._dead_until.__getitem__)

    def failed(self, url: str) -> None:
        with self._lock:
            self._dead_until[url] = time.monotonic() + self.cooldown_s

    def succeeded(self, url: str) -> None:
        with self._lock:
            self._dead_until[url] = 0.0

    def another_alive(self, url: str) -> bool:
        now = time.monotonic()
        with self._lock:
            return any(u != url and t <= now for u, t in self._dead_until.items())


class CallPlan:
    """One call: which replica to try, how long each attempt may take, and what to do
    after it (return, fail, or wait and try again)."""

    def __init__(self, config: ClientConfig, replicas: Replicas, method: str, path: str):
        self.config, self.replicas = config, replicas
        self.method, self.path = method, path
        self.what = f"{method} {path}"
        self.attempt = 0
        self.deadline = time.monotonic() + config.deadline_s if config.deadline_s else None

    def timeout(self) -> float:
        if self.deadline is None:
            return self.config.timeout_s
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise APITimeoutError(f"{self.what}: the call's deadline of {self.config.deadline_s:g}s passed")
        return min(self.config.timeout_s, remaining)

    def headers(self, base: dict[str, str]) -> dict[str, str]:
        """The attempt's headers: with a deadline, the time left goes to the service as
        ``x-deadline-ms``, so it drops the work rather than compute what nobody awaits."""
        if self.deadline is None:
            return base
        left_ms = max(0.0, (self.deadline - time.monotonic()) * 1000.0)
        return {**base, "x-deadline-ms": f"{left_ms:.0f}"}

    def after(self, url: str, response: httpx.Response | None, exc: Exception | None) -> float | None:
        """None when the response is the answer; else the seconds to wait before the
        next attempt. Raises when the call is over."""
        error, retryable, retry_after = attempt_error(response, exc, f"{self.method} {url}{self.path}")
        if error is None:
            self.replicas.succeeded(url)
            return None
        if not retryable:
            raise error
        trouble = exc is not None or (response is not None and response.status_code in REPLICA_TROUBLE)
        if trouble:
            self.replicas.failed(url)
        if self.attempt >= self.config.max_retries:
            raise error
        self.attempt += 1
        if trouble and self.replicas.another_alive(url):
            return 0.0  # fail over to the next replica at once
        delay = self.config.backoff_s(self.attempt - 1, retry_after)
        if self.deadline is not None and time.monotonic() + delay >= self.deadline:
            raise APITimeoutError(f"{self.what}: no time left before the deadline to retry") from error
        return delay
