"""What the sync and async clients share: retry timing, chunk planning, merging."""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, TypeVar

from rewardserve.client.protocol import Item, ItemResult, Usage

R = TypeVar("R")

RETRY_STATUSES = frozenset({429, 502, 503})


@dataclass(frozen=True)
class ClientConfig:
    base_url: str
    api_key: str | None = None
    timeout_s: float = 300.0
    max_retries: int = 3
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    max_retry_after_s: float = 60.0
    chunk_size: int = 256
    max_concurrency: int = 8
    headers: Mapping[str, str] = field(default_factory=dict)

    def with_changes(self, **changes: Any) -> ClientConfig:
        return replace(self, **changes)

    def request_headers(self) -> dict[str, str]:
        headers = {"user-agent": "rewardserve-client", **self.headers}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        return headers

    def backoff_s(self, attempt: int, retry_after: str | None) -> float:
        """Seconds to wait before retry ``attempt`` (0-based): the server's retry-after
        when it sent one, else exponential backoff with jitter."""
        hinted = parse_retry_after(retry_after)
        if hinted is not None:
            return min(hinted, self.max_retry_after_s)
        base = min(self.initial_backoff_s * 2**attempt, self.max_backoff_s)
        return base * (1 - 0.25 * random.random())


def parse_retry_after(value: str | None) -> float | None:
    """``retry-after`` as seconds: a number, or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def as_items(items: Iterable[Any], item_class: type = Item) -> list:
    return [i if isinstance(i, item_class) else item_class.model_validate(i) for i in items]


def plan_chunks(items: list, chunk_size: int) -> list[list[int]]:
    """Indices of each request to send. A group (same group_id) never spans two
    requests, so group normalisation sees whole groups; order is restored on merge."""
    groups: dict[object, list[int]] = {}
    for index, item in enumerate(items):
        group = getattr(item, "group_id", None)
        key = group if group is not None else ("", index)
        groups.setdefault(key, []).append(index)
    chunks: list[list[int]] = []
    current: list[int] = []
    for members in groups.values():
        if current and len(current) + len(members) > chunk_size:
            chunks.append(current)
            current = []
        current.extend(members)
    if current:
        chunks.append(current)
    return chunks


def merge_responses(n_items: int, chunks: list[list[int]], responses: list[R]) -> R:
    """One response with every chunk's results back at their items' places."""
    results: list[ItemResult | None] = [None] * n_items
    usage = Usage()
    for indices, response in zip(chunks, responses):
        if len(response.results) != len(indices):
            raise ValueError("the service returned a different number of results than items")
        for index, result in zip(indices, response.results):
            results[index] = result
        usage = Usage(
            items=usage.items + response.usage.items,
            prompt_tokens=usage.prompt_tokens + response.usage.prompt_tokens,
            cached_tokens=usage.cached_tokens + response.usage.cached_tokens,
        )
    return responses[0].model_copy(update={"results": results, "usage": usage})
