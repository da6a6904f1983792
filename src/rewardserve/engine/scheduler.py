"""The service's one tenant-fair scheduler (``FairScheduler``) and the weighted fair
queueing books each resource keeps in it (``VirtualTimes``).

Everything that spends capacity takes its turns from the one scheduler: the CPU steps
of requests (engine/tenants.py ``FairGate``, work in steps), each model's batches
(engine/batcher.py, work in tokens) and each rule pool's workers (engine/pools/pool.py,
work in worker seconds). They share its weights, and each is charged by the work it did.
A resource keeps virtual times of its own: work of one kind is not paid for with turns
at another (a tenant whose rules are slow is not owed forward batches for it), which is
what a shared clock across unlike units would do."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

Weight = Callable[[str | None], float]
# (resource, tenant, work): told of every charge, for the tenants' metrics.
Served = Callable[[str, str | None, float], None]


class VirtualTimes:
    """Weighted fair queueing's books: each tenant's virtual time grows by the work it
    was served over its weight, and the tenant furthest behind goes next. A tenant back
    from idle starts at the current virtual time (``rejoin``), not with credit for the
    time it was away."""

    def __init__(self, weight: Weight, on_served: Callable[[str | None, float], None] | None = None) -> None:
        self._weight = weight
        self._on_served = on_served
        self._virtual: dict[str | None, float] = {}
        self._clock = 0.0  # the virtual time of the last tenant served first

    def rejoin(self, tenant: str | None) -> None:
        self._virtual[tenant] = max(self._virtual.get(tenant, 0.0), self._clock)

    def furthest_behind(self, tenants: Iterable[str | None]) -> str | None:
        return min(tenants, key=self._place)

    def in_turn(self, tenants: Iterable[str | None]) -> list[str | None]:
        """``tenants``, the furthest behind first."""
        return sorted(tenants, key=self._place)

    def _place(self, tenant: str | None) -> tuple[float, str]:
        return self._virtual.get(tenant, self._clock), tenant or ""

    def before(self, tenant: str | None, other: str | None) -> bool:
        """Whether ``tenant`` is behind ``other`` (one unseen at the current virtual time)."""
        return self._virtual.get(tenant, self._clock) < self._virtual.get(other, self._clock)

    def charge(self, first: str | None, served: dict[str | None, float]) -> None:
        """``first`` was chosen (``furthest_behind``) and ``served`` the work each tenant
        got with it (a batch led by one tenant's work may carry others')."""
        self._clock = max(self._virtual.get(first, 0.0), self._clock)
        for tenant, work in served.items():
            self._virtual[tenant] = max(self._virtual.get(tenant, 0.0), self._clock) + work / self._weight(tenant)
            self._told(tenant, work)

    def account(self, tenant: str | None, work: float) -> None:
        """Work ``tenant`` was served, known only once it is done (a rule call's worker time)."""
        self._virtual[tenant] = self._virtual.get(tenant, self._clock) + work / self._weight(tenant)
        self._told(tenant, work)

    def _told(self, tenant: str | None, work: float) -> None:
        if self._on_served is not None and work:
            self._on_served(tenant, work)


class FairScheduler:
    """One per service: the tenants' weights, and the books of every resource that
    spends capacity (``turns``), made once per resource and kept for the service's life.
    ``served`` (optional) is told every charge as (resource, tenant, work)."""

    def __init__(self, weight: Weight | None = None, served: Served | None = None) -> None:
        self.weight: Weight = weight or (lambda _tenant: 1.0)
        self._served = served
        self._books: dict[tuple[str, str], VirtualTimes] = {}
        self._lock = threading.Lock()

    def turns(self, resource: str, part: str = "") -> VirtualTimes:
        """The books of ``resource`` (``gate``, ``forward``, ``rules``), one per ``part``
        of it (a model's batcher, a rule pool), in the resource's unit of work."""
        with self._lock:
            books = self._books.get((resource, part))
            if books is None:
                told = None
                if self._served is not None:
                    served = self._served
                    told = lambda tenant, work: served(resource, tenant, work)  # noqa: E731
                books = self._books[(resource, part)] = VirtualTimes(self.weight, told)
            return books

    def resources(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(self._books)
