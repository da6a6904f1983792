"""Prometheus metrics, one registry per app (no process-global collectors)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric

from rewardserve.engine.metrics import LATENCY_BUCKETS, EngineMetrics

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics(EngineMetrics):
    """The engine's families (engine/metrics.py) and the service's own, in one registry."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.started = time.time()
        self.requests = Counter("rewardserve_requests", "HTTP requests", ["route", "model", "status"], registry=r)
        self.request_seconds = Histogram(
            "rewardserve_request_duration_seconds",
            "HTTP request latency",
            ["route", "model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        super().__init__(r)
        # The admin API (service/ops/lifecycle.py).
        self.lifecycle_seconds = Histogram(
            "rewardserve_model_lifecycle_duration_seconds",
            "Time of one admin lifecycle call (sleep, wake_up, load)",
            ["model", "operation", "outcome"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.model_asleep = Gauge(
            "rewardserve_model_asleep", "The sleep level the model is at (0: awake)", ["model"], registry=r
        )
        self.model_memory = Gauge(
            "rewardserve_model_memory_bytes", "Bytes of weights and buffers the model holds", ["model"], registry=r
        )
        self.canary_stopped = Counter(
            "rewardserve_canary_stopped_total",
            "Canaries stopped (0%) for being unhealthy on real traffic",
            ["model"],
            registry=r,
        )

    def render(self, by_model: bool = True, tenant: str | None = None) -> bytes:
        """The exposition text; ``by_model=False`` sums every series over its ``model``
        label, so the served models' names do not show; ``tenant``: the view of one
        tenant ("" of none): its own tenant-labelled series and the SHARED families, no
        series that sums other tenants' work (their rewards, cache hits, requests)."""
        source = self.registry if by_model else _WithoutModel(self.registry)
        text: bytes = generate_latest(source if tenant is None else _OneTenant(source, tenant))
        return text


# The families that are not about any tenant's work: what every tenant may read.
SHARED = frozenset(
    {
        "rewardserve_model_ready",
        "rewardserve_model_asleep",
        "rewardserve_model_memory_bytes",
        "rewardserve_model_version_info",
        "rewardserve_canary_stopped_total",
    }
)


class _OneTenant:
    """A view of a registry with one tenant's series and the SHARED families only."""

    def __init__(self, source: CollectorRegistry | _WithoutModel, tenant: str):
        self.source = source
        self.tenant = tenant

    def collect(self) -> Iterator[Metric]:
        for family in self.source.collect():
            tenant_labelled = any("tenant" in s.labels for s in family.samples)
            if (not tenant_labelled or not self.tenant) and family.name not in SHARED:
                continue  # "" (no key): the work of no one, not even of no tenant
            samples = [s for s in family.samples if s.labels.get("tenant", self.tenant) == self.tenant]
            if len(samples) != len(family.samples):
                out = Metric(family.name, family.documentation, family.type, family.unit)
                out.samples = samples
                family = out
            yield family


class _WithoutModel:
    """A view of a registry with the ``model`` label summed away."""

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            out = Metric(family.name, family.documentation, family.type, family.unit)
            sums: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue  # a creation time per model; its sum means nothing
                labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "model"))
                sums[(sample.name, labels)] = sums.get((sample.name, labels), 0.0) + sample.value
            for (name, labels), value in sums.items():
                out.add_sample(name, dict(labels), value)
            yield out
