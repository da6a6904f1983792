"""Shadow scoring: a candidate model scores a share of a served model's requests off the
response path, and the service reports how far the candidate would change training.

A model spec's ``shadow: {model: CANDIDATE, fraction: F}`` picks every request whose
running count crosses a multiple of 1/F (an exact share, no randomness), after its
answer is computed: the same items, the candidate's own plan, its own batcher, under a
scope of its own (the caller may hang up; the shadow goes on, within SHADOW_DEADLINE_S).
The answer never waits for it. At most MAX_IN_FLIGHT shadow requests run per model; one
arriving beyond that, or refused by the candidate's full queue, is skipped and counted.
A shadow runs as the tenant whose request it copies: its work is charged to that tenant,
under its weight and limits, and each tenant's report reads only its own items (the
operator's, every tenant's).

Over the last WINDOW items (and their GRPO groups, items sharing a group_id):
  spearman           rank correlation of the candidate's scores with the served model's
  best_changed       share of groups whose best completion is another one
  sign_flips         share of items whose group advantage changes sign
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

from prometheus_client import Counter, Gauge

from rewardserve.engine.tenants import label
from rewardserve.models.operations.groups import normalized
from rewardserve.protocol import Item, ItemResult, ScoreOptions, ShadowReport
from rewardserve.service.context import RequestContext
from rewardserve.service.observability.metrics import Metrics

log = logging.getLogger(__name__)

WINDOW = 2000
ALL = "*"  # the window of every tenant's items (not a tenant name: names start alphanumeric)
GROUP_WINDOW = 500
MAX_IN_FLIGHT = 4
SHADOW_DEADLINE_S = 120.0


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties given their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    at = 0
    while at < len(order):
        end = at
        while end + 1 < len(order) and values[order[end + 1]] == values[order[at]]:
            end += 1
        for k in range(at, end + 1):
            out[order[k]] = (at + end) / 2 + 1
        at = end + 1
    return out


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    if len(a) < 3:
        return None
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va, vb = sum((x - ma) ** 2 for x in ra), sum((y - mb) ** 2 for y in rb)
    return cov / math.sqrt(va * vb) if va > 0 and vb > 0 else None


class ShadowWindow:
    """What one served model's shadow has shown, over the last WINDOW items."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pairs: deque[tuple[float, float]] = deque(maxlen=WINDOW)
        self.best_changed: deque[bool] = deque(maxlen=GROUP_WINDOW)
        self.flips: deque[bool] = deque(maxlen=WINDOW)
        self.requests = 0
        self.skipped = 0
        self.failed = 0

    def add(self, items: Sequence[Item], served: Sequence[ItemResult], candidate: Sequence[ItemResult]) -> None:
        groups: dict[str, list[tuple[float, float]]] = {}
        with self._lock:
            self.requests += 1
            for item, s, c in zip(items, served, candidate):
                if s.valid and c.valid and s.score is not None and c.score is not None:
                    self.pairs.append((s.score, c.score))
                    if item.group_id is not None:
                        groups.setdefault(item.group_id, []).append((s.score, c.score))
            for members in groups.values():
                if len(members) < 2:
                    continue
                ours, theirs = [m[0] for m in members], [m[1] for m in members]
                self.best_changed.append(ours.index(max(ours)) != theirs.index(max(theirs)))
                for x, y in zip(normalized(ours), normalized(theirs)):
                    self.flips.append((x > 0) != (y > 0) and abs(x) > 1e-9 and abs(y) > 1e-9)

    def report(self, model: str, candidate: str, fraction: float) -> ShadowReport:
        with self._lock:
            pairs = list(self.pairs)
            best = list(self.best_changed)
            flips = list(self.flips)
            counts = (self.requests, self.skipped, self.failed)
        return ShadowReport(
            model=model,
            candidate=candidate,
            fraction=fraction,
            requests=counts[0],
            skipped=counts[1],
            failed=counts[2],
            items=len(pairs),
            groups=len(best),
            spearman=spearman([p[0] for p in pairs], [p[1] for p in pairs]),
            best_changed=sum(best) / len(best) if best else None,
            sign_flips=sum(flips) / len(flips) if flips else None,
        )


class Shadowing:
    """Every served model's shadow: which requests it takes, and what it has shown."""

    def __init__(self, metrics: Metrics) -> None:
        r = metrics.registry
        self.windows: dict[tuple[str, str | None], ShadowWindow] = {}
        self._seen: dict[str, int] = {}
        self._in_flight: dict[str, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.items = Counter(
            "rewardserve_shadow_items", "Items a shadow candidate scored", ["model", "candidate"], registry=r
        )
        self.skipped = Counter(
            "rewardserve_shadow_skipped",
            "Shadow requests skipped (busy, failed)",
            ["model", "candidate", "reason"],
            registry=r,
        )
        self.gauges = {
            name: Gauge(
                f"rewardserve_shadow_{name}",
                f"Shadow candidate vs served model: {what}",
                ["model", "candidate"],
                registry=r,
            )
            for name, what in (
                ("spearman", "rank correlation of scores"),
                ("best_changed_ratio", "share of groups whose best completion changes"),
                ("sign_flip_ratio", "share of group advantages that change sign"),
            )
        }

    def window(self, model: str, tenant: str | None = ALL) -> ShadowWindow:
        """What the shadow showed on ``tenant``'s items (ALL: everyone's)."""
        return self.windows.setdefault((model, tenant), ShadowWindow())

    def picked(self, model: str, fraction: float) -> bool:
        seen = self._seen.get(model, 0)
        self._seen[model] = seen + 1
        return math.floor((seen + 1) * fraction) > math.floor(seen * fraction)

    def maybe_shadow(
        self, ctx: RequestContext, model: str, items: list[Item], options: ScoreOptions, results: list[Any]
    ) -> None:
        """Start the candidate on these items when this request is picked; never waits."""
        spec = ctx.svc.registry.shadow_of(model)
        if spec is None or not self.picked(model, spec.fraction):
            return
        tenant = ctx.tenant
        if self._in_flight.get(model, 0) >= MAX_IN_FLIGHT:
            for window in self._windows(model, tenant):
                window.skipped += 1
            self.skipped.labels(model, spec.model, "busy").inc()
            return
        self._in_flight[model] = self._in_flight.get(model, 0) + 1
        task = asyncio.ensure_future(self._run(ctx.svc, model, spec.model, items, options, results, tenant))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _windows(self, model: str, tenant: str | None) -> list[ShadowWindow]:
        return [self.window(model), self.window(model, tenant)]

    async def _run(
        self,
        svc: Any,
        model: str,
        candidate: str,
        items: list[Item],
        options: ScoreOptions,
        results: list[Any],
        tenant: str | None,
    ) -> None:
        from rewardserve.service.api.scoring import usecases

        # The same use case as a request's, as the same tenant: its weight, limits and bill.
        ctx = RequestContext.detached_for(svc, tenant, SHADOW_DEADLINE_S, f"shadow-{model}")
        try:
            done = await usecases.score(ctx, candidate, items, options)
        except Exception as exc:  # the shadow's failure is the shadow's alone
            for window in self._windows(model, tenant):
                window.failed += 1
            self.skipped.labels(model, candidate, "failed").inc()
            log.debug("shadow %s of %s failed: %s", candidate, model, exc)
            return
        finally:
            self._in_flight[model] -= 1
            ctx.scope.cancel("shadow done")
        for window in self._windows(model, tenant):
            window.add(items, results, done.results)
        self.items.labels(model, candidate).inc(len(items))
        # The candidate as a frozen reference: the served model's drift alarm reads it.
        svc.health.reference(model, label(tenant), results, done.results)

    def refresh_gauges(self, registry: Any) -> None:
        """The windows' figures on the gauges: computed when /metrics is read (sorting a
        window's scores), not on every shadowed request."""
        for (model, tenant), window in list(self.windows.items()):
            spec = registry.shadow_of(model)
            if spec is None or tenant != ALL:
                continue
            report = window.report(model, spec.model, spec.fraction)
            for name, value in (
                ("spearman", report.spearman),
                ("best_changed_ratio", report.best_changed),
                ("sign_flip_ratio", report.sign_flips),
            ):
                if value is not None:
                    self.gauges[name].labels(model, spec.model).set(value)

    async def settled(self) -> None:
        """Once every shadow started so far has finished."""
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
