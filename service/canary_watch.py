"""Whether a canary is healthy enough to keep its share of a model's requests.

A canary passed its load probe, but a checkpoint can still be bad on real traffic: its
forwards fail, or its scores come out non-finite (invalid items). Each plan run on a
model with a canary is counted here, on the canary's side or the serving version's;
the canary is unhealthy when requests on it fail (server faults, not the caller's
input), or when, over its last items, its share of invalid items is well above the
serving version's on the same traffic. Then it gets 0% (service/lifecycle.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

# Items of the canary read before its invalid share is judged, and how much higher than
# the serving version's that share may be: the same callers send both their items, so
# the shares differ by sampling alone on a healthy canary.
CANARY_ITEMS = 20
INVALID_MARGIN = 0.25
FAILED_REQUESTS = 3  # requests on the canary that failed
ITEMS_KEPT = 200


class CanaryWatch:
    def __init__(self, version: str, serving_version: str):
        self.version = version
        self.serving_version = serving_version
        self.canary: deque[bool] = deque(maxlen=ITEMS_KEPT)  # valid or not, per item
        self.serving: deque[bool] = deque(maxlen=ITEMS_KEPT)
        self.failed = 0

    def observe(self, on_canary: bool, valid: Iterable[bool]) -> None:
        (self.canary if on_canary else self.serving).extend(valid)

    def observe_failure(self) -> None:
        self.failed += 1

    def verdict(self) -> str | None:
        """Why the canary is unhealthy, or None while it is not (or too little is known)."""
        if self.failed >= FAILED_REQUESTS:
            return f"{FAILED_REQUESTS} requests failed on version {self.version!r}"
        recent = list(self.canary)[-CANARY_ITEMS * 5 :]
        if len(recent) < CANARY_ITEMS:
            return None
        invalid = recent.count(False) / len(recent)
        baseline = self.serving.count(False) / len(self.serving) if self.serving else 0.0
        if invalid - baseline > INVALID_MARGIN:
            return (
                f"{invalid:.0%} of version {self.version!r}'s last {len(recent)} items were invalid, "
                f"against {baseline:.0%} on version {self.serving_version!r}"
            )
        return None
