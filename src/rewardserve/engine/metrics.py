"""The engine's Prometheus families: queues, batches, forwards, caches, refusals and
each model's readiness and version. The service's Metrics (service/observability/
metrics.py) adds its own to the same registry; one registry per app.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_TOKEN_BUCKETS = (64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
_RATIO_BUCKETS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)


class EngineMetrics:
    def __init__(self, r: CollectorRegistry) -> None:
        self.registry = r
        self.queue_items = Gauge("rewardserve_queue_items", "Items waiting for a batch", ["model"], registry=r)
        self.queue_tokens = Gauge("rewardserve_queue_tokens", "Tokens waiting for a batch", ["model"], registry=r)
        self.queue_seconds = Histogram(
            "rewardserve_queue_duration_seconds",
            "Time an item waited before its batch started",
            ["model"],
            buckets=LATENCY_BUCKETS,
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
            buckets=LATENCY_BUCKETS,
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
        self.model_version = Gauge(
            "rewardserve_model_version_info", "1 for the version each model serves", ["model", "version"], registry=r
        )
