"""Prometheus metrics, one registry per app (no process-global collectors)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_TOKEN_BUCKETS = (64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
_RATIO_BUCKETS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.started = time.time()
        self.requests = Counter("rewardserve_requests", "HTTP requests", ["route", "model", "status"], registry=r)
        self.request_seconds = Histogram(
            "rewardserve_request_duration_seconds",
            "HTTP request latency",
            ["route", "model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_items = Gauge("rewardserve_queue_items", "Items waiting for a batch", ["model"], registry=r)
        self.queue_tokens = Gauge("rewardserve_queue_tokens", "Tokens waiting for a batch", ["model"], registry=r)
        self.queue_seconds = Histogram(
            "rewardserve_queue_duration_seconds",
            "Time an item waited before its batch started",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.batches = Counter("rewardserve_batches", "Batches run", ["model"], registry=r)
        self.batch_size = Histogram(
            "rewardserve_batch_size", "Items per batch", ["model"], buckets=_SIZE_BUCKETS, registry=r
        )
        self.batch_tokens = Histogram(
            "rewardserve_batch_tokens",
            "Tokens per batch, padding included",
            ["model"],
            buckets=_TOKEN_BUCKETS,
            registry=r,
        )
        self.padding_ratio = Histogram(
            "rewardserve_batch_padding_ratio",
            "Share of a batch's tokens that are padding",
            ["model"],
            buckets=_RATIO_BUCKETS,
            registry=r,
        )
        self.forward_seconds = Histogram(
            "rewardserve_forward_duration_seconds",
            "Time of one batch's forward pass and readout",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.items = Counter(
            "rewardserve_items_scored",
            "Items the model computed (answered from the cache: rewardserve_cache_hits_total)",
            ["model", "valid"],
            registry=r,
        )
        self.dropped = Counter(
            "rewardserve_items_dropped",
            "Items dropped before compute",
            ["model", "reason"],
            registry=r,
        )
        self.rejected = Counter(
            "rewardserve_requests_rejected",
            "Requests refused before queueing",
            ["model", "reason"],
            registry=r,
        )
        self.cache_hits = Counter(
            "rewardserve_cache_hits", "Items answered from the score cache", ["model"], registry=r
        )
        self.cache_misses = Counter(
            "rewardserve_cache_misses", "Items the score cache did not know", ["model"], registry=r
        )
        self.deduplicated = Counter(
            "rewardserve_items_deduplicated",
            "Items computed once for another identical item",
            ["model"],
            registry=r,
        )
        self.model_ready = Gauge(
            "rewardserve_model_ready", "1 when the model is loaded and probed", ["model"], registry=r
        )
        # The admin API (service/ops/lifecycle.py).
        self.lifecycle_seconds = Histogram(
            "rewardserve_model_lifecycle_duration_seconds",
            "Time of one admin lifecycle call (sleep, wake_up, load)",
            ["model", "operation", "outcome"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.model_asleep = Gauge(
            "rewardserve_model_asleep", "The sleep level the model is at (0: awake)", ["model"], registry=r
        )
        self.model_memory = Gauge(
            "rewardserve_model_memory_bytes", "Bytes of weights and buffers the model holds", ["model"], registry=r
        )
        self.model_version = Gauge(
            "rewardserve_model_version_info", "1 for the version each model serves", ["model", "version"], registry=r
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
