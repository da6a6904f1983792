"""Whether a canary is healthy enough to keep its share of a model's requests.

A canary passed its load probe, but a checkpoint can still be bad on real traffic: its
forwards fail, or its scores come out non-finite (invalid items). Each plan run on a
model with a canary is counted here, on the canary's side or the serving version's;
the canary is unhealthy when requests on it fail (server faults, not the caller's
input), or when nearly all of its last items are invalid while well fewer of the serving
version's are, on the same traffic. Then it gets 0% (service/ops/lifecycle.py).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rewardserve.engine.registry import ModelRegistry, Served
    from rewardserve.service.observability.metrics import Metrics

log = logging.getLogger(__name__)

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


class Canaries:
    """Each model's canary watch. A plan's results on a model with a canary are counted
    on one side or the other; an unhealthy canary is taken out of the registry at once
    (0% of the requests from there, no await between the verdict and the removal) and
    handed to ``retire`` to be drained and closed."""

    def __init__(self, registry: ModelRegistry, metrics: Metrics, retire: Callable[[str, Served], None]):
        self.registry, self.metrics, self._retire = registry, metrics, retire
        self._watches: dict[str, CanaryWatch] = {}  # name -> its canary's health
        self._stopped: dict[str, str] = {}  # name -> why its last canary was stopped

    def start(self, name: str, version: str, serving_version: str) -> None:
        self._stopped.pop(name, None)
        self._watches[name] = CanaryWatch(version, serving_version)

    def end(self, name: str) -> None:
        self._watches.pop(name, None)

    def stopped(self, name: str) -> str | None:
        """Why the model's last canary was stopped, if it was."""
        return self._stopped.get(name)

    def observe(self, served: Served, valid: Iterable[bool]) -> None:
        """A plan's results on a model with a canary, counted on the canary's side or the
        serving version's; an unhealthy canary is stopped here."""
        name = served.model.name
        watch, canary = self._watches.get(name), self.registry.canaries.get(name)
        if watch is None or canary is None:
            return
        watch.observe(served is canary[0], valid)
        self._judge(name, watch)

    def observe_failure(self, served: Served) -> None:
        """A plan that failed with a server fault (not the caller's input)."""
        name = served.model.name
        watch, canary = self._watches.get(name), self.registry.canaries.get(name)
        if watch is not None and canary is not None and served is canary[0]:
            watch.observe_failure()
            self._judge(name, watch)

    def _judge(self, name: str, watch: CanaryWatch) -> None:
        reason = watch.verdict()
        if reason is None:
            return
        stopped, _ = self.registry.canaries.pop(name)
        self._watches.pop(name, None)
        self._stopped[name] = reason
        self.metrics.canary_stopped.labels(name).inc()
        log.warning("model %s: canary stopped, %s", name, reason)
        self._retire(name, stopped)
