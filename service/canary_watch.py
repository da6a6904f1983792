"""Whether a canary is healthy enough to keep its share of a model's requests.

A canary passed its load probe, but a checkpoint can still be bad on real traffic: its
forwards fail, or its scores come out non-finite (invalid items). Each plan run on a
model with a canary is counted here, on the canary's side or the serving version's;
the canary is unhealthy when requests on it fail (server faults, not the caller's
input), or when nearly all of its last items are invalid while well fewer of the serving
version's are, on the same traffic. Then it gets 0% (service/lifecycle.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

# A canary is judged by its invalid items only when it has this many, and the serving
# version as many on the same callers' traffic; it is unhealthy when nearly all of its
# items are invalid and well fewer of the serving version's are. Invalid items that come
# of the callers' input (an item over the length) come in whole requests, to either side:
# the bar is set where a healthy canary does not reach it by chance.
CANARY_ITEMS = 20
CANARY_REQUESTS = 10  # over at least this many of its requests: a few requests' worth can be one caller's
REQUESTS_KEPT = 50
SERVING_ITEMS = 20
INVALID_CANARY = 0.9  # its share of invalid items at least this
INVALID_SERVING = 0.5  # the serving version's at most this
FAILED_REQUESTS = 3  # requests on the canary that failed with a server fault
ITEMS_KEPT = 200


class CanaryWatch:
    def __init__(self, version: str, serving_version: str):
        self.version = version
        self.serving_version = serving_version
        self.canary: deque[list[bool]] = deque(maxlen=REQUESTS_KEPT)  # per request, valid or not per item
        self.serving: deque[bool] = deque(maxlen=ITEMS_KEPT)
        self.failed = 0

    def observe(self, on_canary: bool, valid: Iterable[bool]) -> None:
        if on_canary:
            self.canary.append(list(valid))
        else:
            self.serving.extend(valid)

    def observe_failure(self) -> None:
        self.failed += 1

    def verdict(self) -> str | None:
        """Why the canary is unhealthy, or None while it is not (or too little is known)."""
        if self.failed >= FAILED_REQUESTS:
            return f"{FAILED_REQUESTS} requests failed on version {self.version!r}"
        recent = [v for request in self.canary for v in request]
        if len(self.canary) < CANARY_REQUESTS or len(recent) < CANARY_ITEMS or len(self.serving) < SERVING_ITEMS:
            return None  # too little to tell (a canary taking every request is judged by its failures)
        invalid = recent.count(False) / len(recent)
        baseline = self.serving.count(False) / len(self.serving)
        if invalid >= INVALID_CANARY and baseline <= INVALID_SERVING:
            return (
                f"{invalid:.0%} of version {self.version!r}'s items over its last {len(self.canary)} requests "
                f"were invalid, against {baseline:.0%} on version {self.serving_version!r}"
            )
        return None
