"""Tenants: the training jobs that share one reward service, each by its API keys.

A tenant has a ``weight`` (its share of each model when several want more than the
model gives: the batchers take work across tenants by weighted fair queueing) and
optional limits: ``max_queued_tokens`` (its work waiting for one model; over it, 429 with
``retry-after``) and ``items_per_second`` (a token bucket over the items it sends; over
it, 429). Keys come from the config file's ``tenants:`` section or a tenants file
(``REWARDSERVE_TENANTS_FILE``), checked at start: a repeated key or name, a weight that
is not positive or an unknown field stops the service naming it. A key of ``api_keys``
belongs to no tenant: it is served as tenant ``default`` (weight 1) and sees every
tenant's metrics; a tenant's key sees only its own. Without tenants nothing changes.
"""

from __future__ import annotations

import asyncio
import hmac
import math
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from prometheus_client import Counter, Histogram
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rewardserve.engine.errors import TenantQueueFull
from rewardserve.engine.metrics import EngineMetrics
from rewardserve.engine.scheduler import FairScheduler, VirtualTimes
from rewardserve.models.yaml_files import load_yaml

# A batch's compute while several tenants use a model on a CPU (engine/batcher.py): a
# light tenant's item waits for at most about this long behind a flood. Longer lets the
# light tenant's tail grow; much shorter costs the flood throughput it is owed (figures:
# bench/results/issue-23-tenants.md).
BATCH_MS = 30.0

# The label of work no tenant owns (no tenants configured, or a key of no tenant):
# empty, which Prometheus reads as no label, so no tenant appears that nobody named.
NO_TENANT = ""


def label(tenant: str | None) -> str:
    return tenant or NO_TENANT


def named(tenant: str | None) -> str:
    """A tenant as an error message names it."""
    return f"tenant {tenant!r}" if tenant else "the requests of no tenant"


# A tenant that queued work this recently counts as using a model (for the batch cap).
ACTIVE_S = 5.0
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class TenantSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=64)
    keys: list[str] = Field(min_length=1)
    weight: float = Field(1.0, gt=0)
    max_queued_tokens: int | None = Field(None, gt=0)
    items_per_second: float | None = Field(None, gt=0)


class _TenantsFile(BaseModel):
    model_config = ConfigDict(extra="ignore")  # a config file also holds `models:`

    tenants: list[TenantSpec] = Field(default_factory=list)


def load_tenants(path: Path, only_tenants: bool = True) -> list[TenantSpec]:
    """The ``tenants:`` of a YAML file; ValueError naming the file and the entry."""
    data = load_yaml(path) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping with a 'tenants:' list")
    if only_tenants and set(data) - {"tenants"}:
        raise ValueError(
            f"{path}: unknown field(s) {', '.join(sorted(set(data) - {'tenants'}))}; "
            "a tenants file holds 'tenants:' only"
        )
    try:
        return _TenantsFile.model_validate(data).tenants
    except ValidationError as exc:
        problems = [
            f"tenants[{e['loc'][1]}].{'.'.join(map(str, e['loc'][2:]))}: {e['msg']}"
            if len(e["loc"]) > 2
            else f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
            for e in exc.errors()
        ]
        raise ValueError(f"{path}: " + "; ".join(problems)) from None


def check_tenants(specs: list[TenantSpec]) -> None:
    names = [t.name for t in specs]
    repeated_names = sorted({n for n in names if names.count(n) > 1} | ({NO_TENANT} & set(names)))
    if repeated_names:
        raise ValueError(f"tenant names must be unique and not empty: {', '.join(repeated_names)}")
    owners: dict[str, str] = {}
    for spec in specs:
        for key in spec.keys:
            if key in owners:
                where = (
                    f"twice in tenant {spec.name!r}"
                    if owners[key] == spec.name
                    else f"to two tenants: {owners[key]!r} and {spec.name!r}"
                )
                raise ValueError(f"an API key is given {where}")
            owners[key] = spec.name


class _Bucket:
    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.capacity = max(rate, 1.0)  # a second's worth may come at once
        self.level = self.capacity
        self.at = time.monotonic()

    def take(self, n: int) -> float | None:
        """None when ``n`` items may go now; else the seconds until they may."""
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
        self.at = now
        if n <= self.level or (self.level >= self.capacity and n > self.capacity):
            self.level -= n  # a request bigger than a second's worth waits for a full bucket
            return None
        return (min(n, self.capacity) - self.level) / self.rate


class Tenants:
    """Which tenant a key is, and each tenant's weight, limits and metrics."""

    def __init__(self, specs: list[TenantSpec], metrics: EngineMetrics, batch_ms: float = BATCH_MS) -> None:
        """``batch_ms``: a batch's compute while several tenants use a model (batcher.py)."""
        check_tenants(specs)
        self.batch_ms = batch_ms
        self.specs = {spec.name: spec for spec in specs}
        self._keys = [(key.encode(), spec.name) for spec in specs for key in spec.keys]
        self._buckets = {s.name: _Bucket(s.items_per_second) for s in specs if s.items_per_second is not None}
        self._lock = threading.Lock()
        r = metrics.registry
        self.requests = Counter("rewardserve_tenant_requests", "Scoring requests admitted", ["tenant"], registry=r)
        self.items = Counter("rewardserve_tenant_items", "Items sent", ["tenant"], registry=r)
        # What its requests made the service do: items, judge prompts, compared pairs, rule
        # calls and renders (what items_per_second is charged).
        self.work = Counter(
            "rewardserve_tenant_work", "Model inputs and rule calls its requests made", ["tenant"], registry=r
        )
        self.tokens = Counter("rewardserve_tenant_tokens", "Tokens queued", ["tenant"], registry=r)
        self.queue_seconds = Histogram(
            "rewardserve_tenant_queue_duration_seconds",
            "Time waiting for a batch",
            ["tenant"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        # Model time its work took (a batch's forward split by its items' tokens): each
        # job's use of a shared model, what a fleet charges for.
        self.model_seconds = Counter(
            "rewardserve_tenant_model_seconds", "Forward time its batches took", ["tenant"], registry=r
        )
        # Rule-pool worker time its calls and template renders took (engine/pools/pool.py).
        self.rule_seconds = Counter(
            "rewardserve_tenant_rule_seconds", "Rule-pool worker time its calls took", ["tenant"], registry=r
        )
        # What the one fair scheduler gave it, per resource, each in its own unit.
        self.scheduled = Counter(
            "rewardserve_tenant_scheduled_work",
            "Work the fair scheduler gave it: gate steps, forward tokens, rule-pool worker seconds",
            ["tenant", "resource"],
            registry=r,
        )
        self.scheduler = FairScheduler(self.weight, served=self._served)
        self.rejected = Counter("rewardserve_tenant_rejections", "Requests refused", ["tenant", "reason"], registry=r)

    @property
    def enabled(self) -> bool:
        return bool(self.specs)

    def keys(self) -> list[str]:
        return [key.decode() for key, _ in self._keys]

    def of_key(self, token: str | None) -> str | None:
        """The tenant a bearer token belongs to (every key compared, in constant time);
        None for a key of no tenant."""
        if token is None:
            return None
        given = token.encode()
        found = None
        for key, name in self._keys:
            if hmac.compare_digest(given, key):
                found = name
        return found

    def weight(self, tenant: str | None) -> float:
        spec = self.specs.get(tenant or "")
        return spec.weight if spec is not None else 1.0

    def _served(self, resource: str, tenant: str | None, work: float) -> None:
        if not self.enabled:
            return
        self.scheduled.labels(label(tenant), resource).inc(work)
        if resource == "rules":
            self.rule_seconds.labels(label(tenant)).inc(work)

    def queued_limit(self, tenant: str | None) -> int | None:
        spec = self.specs.get(tenant or "")
        return spec.max_queued_tokens if spec is not None else None

    def admit_items(self, tenant: str | None, n: int) -> int | None:
        """Count a request's items against its tenant's rate: None, or the whole seconds
        to wait (retry-after)."""
        name = label(tenant)
        self.requests.labels(name).inc()
        self.items.labels(name).inc(n)
        return self.charge(tenant, n)

    def charge(self, tenant: str | None, n: int) -> int | None:
        """Take ``n`` units of work from the tenant's items per second: None, or the
        whole seconds to wait (retry-after)."""
        name = label(tenant)
        self.work.labels(name).inc(n)
        bucket = self._buckets.get(name)
        if bucket is None:
            return None
        with self._lock:
            wait = bucket.take(n)
        if wait is None:
            return None
        self.rejected.labels(name, "items_per_second").inc()
        return max(1, math.ceil(wait))


class FairGate:
    """At most ``slots`` requests' CPU steps off the event loop (parsing a body, planning
    its work) at once, waiting ones let in tenant by tenant, weighted fair (a tenant's
    virtual time grows by 1/weight per step): a flood of one tenant's requests queues
    here, not in the shared thread pool ahead of everyone's. Open without tenants."""

    def __init__(self, tenants: Tenants, slots: int) -> None:
        self.tenants = tenants
        self._free = slots
        self._waiting: dict[str | None, deque[asyncio.Future[None]]] = {}
        self._turns = tenants.scheduler.turns("gate")

    @asynccontextmanager
    async def slot(self, tenant: str | None) -> AsyncIterator[None]:
        if not self.tenants.enabled:
            yield
            return
        if self._free > 0 and not any(self._waiting.values()):
            self._free -= 1
            self._turns.charge(tenant, {tenant: 1.0})
        else:
            if not self._waiting.get(tenant):
                self._turns.rejoin(tenant)
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.setdefault(tenant, deque()).append(future)
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self._release()  # handed a slot just as it was cancelled: pass it on
                else:
                    self._waiting[tenant].remove(future)
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        ready = [t for t, q in self._waiting.items() if q]
        if not ready:
            self._free += 1
            return
        tenant = self._turns.furthest_behind(ready)
        self._turns.charge(tenant, {tenant: 1.0})
        self._waiting[tenant].popleft().set_result(None)


class TenantShares:
    """One model's tenants (batcher.py): the tokens each has queued there, when each last
    sent work, and whose turn it is (``turns``). Without tenants it only counts tokens."""

    def __init__(self, tenants: Tenants | None, model: str) -> None:
        self.tenants = tenants
        self.model = model
        self.turns = tenants.scheduler.turns("forward", model) if tenants is not None else VirtualTimes(lambda _: 1.0)
        self._queued: dict[str | None, int] = {}
        self._last_seen: dict[str | None, float] = {}  # time.monotonic() of its last work

    def admit(self, tenant: str | None, tokens: int, retry_after: Callable[[int], int]) -> None:
        """TenantQueueFull where ``tokens`` more would pass the tenant's queued-token limit."""
        if self.tenants is None:
            return
        limit = self.tenants.queued_limit(tenant)
        queued = self._queued.get(tenant, 0)
        if limit is not None and queued + tokens > limit:
            self.tenants.rejected.labels(label(tenant), "queued_tokens").inc()
            wait = retry_after(queued + tokens - limit)
            raise TenantQueueFull(
                f"{named(tenant)} has {limit} tokens queued on model {self.model!r}, its limit; retry after {wait}s",
                retry_after_s=wait,
            )
        if not queued:
            self.turns.rejoin(tenant)
        self._last_seen[tenant] = time.monotonic()
        self.tenants.tokens.labels(label(tenant)).inc(tokens)

    def has_room(self, tenant: str | None, tokens: int, queue_tokens: int) -> bool:
        """Whether a model's queue of ``queue_tokens`` takes ``tokens`` more of ``tenant``'s:
        under its limit, or, with tenants, within the tenant's share of it by weight among
        the tenants active now. One tenant's flood that filled the queue does not shut out
        the others; the queue then holds up to twice its limit, never more."""
        total = sum(self._queued.values()) + tokens
        if total <= queue_tokens:
            return True
        if self.tenants is None or total > 2 * queue_tokens:
            return False
        weights = sum(self.tenants.weight(t) for t in self._active() | {tenant})
        return self._queued.get(tenant, 0) + tokens <= queue_tokens * self.tenants.weight(tenant) / weights

    def add(self, tenant: str | None, tokens: int) -> None:
        self._queued[tenant] = self._queued.get(tenant, 0) + tokens

    def _active(self) -> set[str | None]:
        now = time.monotonic()
        return {
            tenant
            for tenant, seen in self._last_seen.items()
            if now - seen < ACTIVE_S or self._queued.get(tenant, 0) > 0
        }

    def queued(self, tenant: str | None) -> int:
        """The tokens ``tenant`` has queued."""
        return self._queued.get(tenant, 0)

    def queued_tenants(self) -> list[str | None]:
        return [tenant for tenant, tokens in self._queued.items() if tokens > 0]

    def active(self) -> int:
        """Tenants with work queued or that queued some within ``ACTIVE_S`` (so will
        likely again)."""
        return len(self._active())
