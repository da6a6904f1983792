"""The served models: each one's RewardModel, its batcher and its load state.

Models that compute with torch on this process's CPU are loaded, probed and run on one
thread, all of them. torch's CPU ops run on OpenMP, and OpenMP gives every thread that
calls into it a team of its own; libgomp counts all teams' threads, and once they
outnumber the cores its idle threads stop spinning and sleep between ops, to be woken
for the next one, which costs a large share of a forward's speed once a second thread
has called torch (figures: bench/results/design-measurements.md). One CPU's cores are busy with one forward anyway.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from rewardserve.models.cache import LRUCache
from rewardserve.models.reward_model import ModelContext, RewardModel
from rewardserve.models.kinds import build_model
from rewardserve.models.spec import ModelSpec
from rewardserve.service.batcher import Batcher
from rewardserve.service.errors import NotFound, NotReady
from rewardserve.service.metrics import Metrics

log = logging.getLogger(__name__)


@dataclass
class Served:
    model: RewardModel
    batcher: Batcher | None = None
    ready: bool = False
    error: str | None = None
    # Finished results by job key, lent to the model's plans.
    score_cache: LRUCache = field(default_factory=lambda: LRUCache(0))


class ModelRegistry:
    def __init__(self, specs: list[ModelSpec], metrics: Metrics, context: ModelContext | None = None,
                 after_batch=None):
        self._metrics = metrics
        self._after_batch = after_batch
        # Building a model reads only its preset and config.json; weights come in load().
        self._served = {spec.name: _served(build_model(spec, context)) for spec in specs}
        self.loaded = asyncio.Event()
        self._cpu_thread: ThreadPoolExecutor | None = None  # made with the first CPU model

    def _executor(self, model: RewardModel) -> ThreadPoolExecutor | None:
        """The shared CPU compute thread for a torch-on-CPU model; None: its own."""
        if not model.torch_on_cpu:
            return None
        if self._cpu_thread is None:
            self._cpu_thread = ThreadPoolExecutor(1, thread_name_prefix="rs-cpu")
        return self._cpu_thread

    async def _call(self, model: RewardModel, fn) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor(model), fn)

    def __iter__(self):
        return iter(self._served.values())

    @property
    def all_ready(self) -> bool:
        return bool(self._served) and all(s.ready for s in self._served.values())

    @property
    def failed(self) -> list[str]:
        return [f"{s.model.name}: {s.error}" for s in self._served.values() if s.error]

    async def load_all(self) -> None:
        """Load, probe with one real forward, then start batching: model by model."""
        try:
            # Models without weights first: they are ready in seconds.
            for served in sorted(self._served.values(), key=lambda s: s.model.runs_torch):
                await self._load(served)
        finally:
            self.loaded.set()

    async def _load(self, served: Served) -> None:
        model = served.model
        self._metrics.model_ready.labels(model.name).set(0)
        try:
            await self._call(model, model.load)
            await self._call(model, model.probe)
        except Exception as exc:
            log.exception("model %s failed to load", model.name)
            served.error = f"{type(exc).__name__}: {exc}"
            return
        served.batcher = Batcher(model.name, model.run, model.policy(), self._metrics, self._after_batch,
                                 executor=self._executor(model))
        served.batcher.start()
        served.ready = True
        self._metrics.model_ready.labels(model.name).set(1)
        log.info("model %s ready (%s, %s)", model.name, model.kind, model.backend_name)

    def get(self, name: str) -> Served:
        served = self._served.get(name)
        if served is None:
            known = ", ".join(sorted(self._served)) or "none"
            raise NotFound(f"model {name!r} is not served here; models: {known}", param="model")
        if not served.ready:
            state = f"failed to load ({served.error})" if served.error else "is still loading"
            raise NotReady(f"model {name!r} {state}")
        return served

    async def close(self) -> None:
        for served in self._served.values():
            served.ready = False
            if served.batcher is not None:
                await served.batcher.stop()
            await self._call(served.model, served.model.close)
        if self._cpu_thread is not None:
            self._cpu_thread.shutdown(wait=True)
            self._cpu_thread = None


def _served(model: RewardModel) -> Served:
    return Served(model, score_cache=LRUCache(model.options.score_cache_size))
