"""Weighted fair queueing's books, one kind for every queue that shares capacity between
tenants: a model's batches (service/batcher.py, work in tokens), the CPU steps of
requests (service/tenants.py ``FairGate``, work in steps) and the rule pool's workers
(models/rules/pool.py, work in worker seconds)."""

from __future__ import annotations

from collections.abc import Callable, Iterable


class VirtualTimes:
    """Weighted fair queueing's books: each tenant's virtual time grows by the work it
    was served over its weight, and the tenant furthest behind goes next. A tenant back
    from idle starts at the current virtual time (``rejoin``), not with credit for the
    time it was away."""

    def __init__(self, weight: Callable[[str | None], float]) -> None:
        self._weight = weight
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

    def account(self, tenant: str | None, work: float) -> None:
        """Work ``tenant`` was served, known only once it is done (a rule call's worker time)."""
        self._virtual[tenant] = self._virtual.get(tenant, self._clock) + work / self._weight(tenant)
