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
import contextvars
import logging
import math
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from rewardserve.engine.batcher import Batcher
from rewardserve.engine.metrics import EngineMetrics
from rewardserve.engine.tenants import Tenants
from rewardserve.models.cache import LRUCache, TenantCache
from rewardserve.models.checkpoints import go_offline_if_unreachable
from rewardserve.models.errors import ModelAsleep, NotFound, NotReady, RequestError, StartupError, one_line
from rewardserve.models.operations.scales import RunningScore
from rewardserve.models.plan import Peer, PeerLookup
from rewardserve.models.reward_model import ModelContext, RewardModel
from rewardserve.models.spec import ModelSpec, ShadowSpec
from rewardserve.models.startup_phases import log as startup_log
from rewardserve.models.startup_phases import timed_phase

log = logging.getLogger(__name__)
T = TypeVar("T")
# What builds a model of a spec (service/app.py gives models/kinds' build_checked): the
# engine never imports a kind.
Builder = Callable[[ModelSpec, ModelContext], RewardModel]
# The served models the running request holds (its task's, copied into the tasks it starts).
_HELD: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar("held_models", default=frozenset())


def import_torch() -> None:
    import torch  # noqa: F401
    import transformers  # noqa: F401


@dataclass(eq=False)
class Served:
    model: RewardModel
    batcher: Batcher | None = None
    ready: bool = False
    error: str | None = None
    # Its lifecycle (service/ops/lifecycle.py): the version results name, whether it serves
    # ("awake"), sleeps, or drains after a newer version replaced it, and the requests
    # using it now (a sleep or a drain waits for them).
    version: str = "0"
    state: str = "awake"
    sleep_level: int | None = None
    sleep_mode: str | None = None  # while sleeping: what its sleep freed, and how
    retired: bool = False  # drained and closed: a newer version serves
    in_flight: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    # Cleared while its weights are rewritten in place: new requests wait (not a 503).
    resumed: asyncio.Event = field(default_factory=lambda: _set_event())
    last_operation_s: float | None = None
    # What its checkpoint folder held when its weights were read (weights_update.py), for rollback.
    fingerprint: str | None = None
    # Finished results by job key, lent to the model's plans, each tenant its own part.
    score_cache: LRUCache = field(default_factory=lambda: LRUCache(0))
    # Its scores' running mean and variance per tenant, for plans that normalise against
    # them: one tenant's scores never move another's normalisation.
    running_by_tenant: dict[str | None, RunningScore] = field(default_factory=dict)

    def running(self, tenant: str | None) -> RunningScore:
        return self.running_by_tenant.setdefault(tenant, RunningScore())

    def cache(self, tenant: str | None) -> LRUCache:
        """The score cache as ``tenant`` sees it."""
        return TenantCache(self.score_cache, tenant)


def _set_event() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


class ModelRegistry:
    """``keep_going``: serve the models that build and load, leaving out the others (a
    model that fails to load answers 503 with its error); without it a model that cannot
    be built raises StartupError here and one that fails to load calls ``on_failure``."""

    def __init__(
        self,
        specs: list[ModelSpec],
        metrics: EngineMetrics,
        build: Builder,
        context: ModelContext | None = None,
        after_batch: Callable[[], None] | None = None,
        keep_going: bool = True,
        tenants: Tenants | None = None,
    ):
        self._metrics = metrics
        self._tenants = tenants
        self._after_batch = after_batch
        self.keep_going = keep_going
        self.on_failure: Callable[[str], None] | None = None
        # Building a model reads only its preset and config.json; weights come in load().
        self._served: dict[str, Served] = {}
        problems = []
        context = context or ModelContext()
        self._build = build
        # Wakes a model asleep for a request that may wake it (service/ops/lifecycle.py).
        self.waker: Callable[[Served], Awaitable[None]] | None = None
        for spec in specs:
            try:
                model = build(spec, context)
            except ValueError as exc:
                problems.append(str(exc))
                continue
            self._served[spec.name] = _served(model)
        for served in list(self._served.values()):
            shadow = served.model.spec.shadow
            if shadow is not None and (shadow.model not in self._served or shadow.model == served.model.name):
                problems.append(
                    f"model {served.model.name!r}: its shadow {shadow.model!r} must be another "
                    f"served model; models: {', '.join(sorted(self._served))}"
                )
            missing = [name for name in served.model.depends_on if name not in self._served]
            if missing:
                problems.append(
                    f"model {served.model.name!r} needs {', '.join(map(repr, missing))}, which "
                    f"{'is' if len(missing) == 1 else 'are'} not served here; models: "
                    f"{', '.join(sorted(self._served))}"
                )
                del self._served[served.model.name]
        if problems and not keep_going:
            raise StartupError(problems)
        for problem in problems:
            log.error("%s (left out: --keep-going)", problem)
        if not self._served:
            raise StartupError(
                ["no models to serve: name some (--model NAME=SOURCE[:KIND], --config) or keep the built-in rules"]
            )
        go_offline_if_unreachable([s.model.spec.source for s in self._served.values() if s.model.runs_torch])
        self.loaded = asyncio.Event()
        self._cpu_thread: ThreadPoolExecutor | None = None  # made with the first CPU model
        self.context = context
        # name -> (a version loaded beside the serving one, the share of requests it gets)
        self.canaries: dict[str, tuple[Served, float]] = {}
        self._canary_seen: dict[str, int] = {}

    def _executor(self, model: RewardModel) -> ThreadPoolExecutor | None:
        """The shared CPU compute thread for a torch-on-CPU model; None: its own."""
        if not model.torch_on_cpu:
            return None
        if self._cpu_thread is None:
            self._cpu_thread = ThreadPoolExecutor(1, thread_name_prefix="rs-cpu")
        return self._cpu_thread

    async def _call(self, model: RewardModel, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor(model), fn)

    def __iter__(self) -> Iterator[Served]:
        return iter(self._served.values())

    @property
    def all_ready(self) -> bool:
        """Every model ready; with ``keep_going``, every model that did not fail."""
        kept = [s for s in self._served.values() if not (self.keep_going and s.error)]
        return bool(kept) and all(s.ready for s in kept)

    @property
    def failed(self) -> list[str]:
        return [f"{s.model.name}: {s.error}" for s in self._served.values() if s.error]

    @property
    def unhealthy(self) -> list[str]:
        """Failures a restart could cure: none when ``keep_going`` chose to serve without
        them (a restart loop would not load them either)."""
        return [] if self.keep_going else self.failed

    async def load_all(self) -> None:
        """Load, probe with one real forward, then start batching: model by model."""
        try:
            # Models without weights first: they are ready in seconds; a model that needs
            # others once they have loaded.
            for served in self._load_order():
                failed = [
                    f"{name} ({self._served[name].error})"
                    for name in served.model.depends_on
                    if not self._served[name].ready
                ]
                if failed:
                    self._failed(served, f"needs {', '.join(failed)}, which did not load")
                    continue
                await self._load(served)
        finally:
            self.loaded.set()

    def _load_order(self) -> list[Served]:
        order: list[Served] = []
        placed: set[str] = set()
        waiting = sorted(self._served.values(), key=lambda s: s.model.runs_torch)
        while waiting:
            ready = [s for s in waiting if set(s.model.depends_on) <= placed]
            if not ready:  # a cycle: loaded last, each finding the other not ready
                ready = waiting
            order += ready
            placed |= {s.model.name for s in ready}
            waiting = [s for s in waiting if s.model.name not in placed]
        return order

    def _failed(self, served: Served, error: str) -> None:
        served.error = error
        log.error("model %s failed to load: %s", served.model.name, error)
        if not self.keep_going and self.on_failure is not None:
            self.on_failure(f"model {served.model.name!r} failed to load: {error}")

    async def _load(self, served: Served) -> None:
        model = served.model
        self._metrics.model_ready.labels(model.name).set(0)
        start = time.perf_counter()
        try:
            if model.runs_torch and "torch" not in sys.modules:
                with timed_phase(model.name, "import", "torch, transformers"):
                    await self._call(model, import_torch)
            startup_log.info("model %s: %s", model.name, await self._call(model, model.describe))
            with timed_phase(model.name, "load"):
                await self._call(model, model.pin_revision)
                await self._call(model, model.load)
            with timed_phase(model.name, "probe"):
                await self._call(model, model.probe)
        except Exception as exc:
            log.debug("model %s failed to load", model.name, exc_info=True)
            self._failed(served, one_line(exc))
            return
        self.start_batching(served)
        served.ready = True
        self._metrics.model_ready.labels(model.name).set(1)
        self._metrics.model_version.labels(model.name, served.version).set(1)
        limit = f", max_tokens {model.max_tokens}" if model.max_tokens else ""
        startup_log.info(
            "model %s: ready in %.1fs (%s, %s backend%s)",
            model.name,
            time.perf_counter() - start,
            model.kind,
            model.backend_name,
            limit,
        )

    def start_batching(self, served: Served) -> None:
        """A batcher for a loaded model: what runs its forwards from now on."""
        model = served.model
        served.batcher = Batcher(
            model.name,
            model.run,
            model.policy(),
            self._metrics,
            self._after_batch,
            executor=self._executor(model),
            tenants=self._tenants,
            between_layers=model.between_layers,
        )
        served.batcher.start()

    def build(self, spec: ModelSpec) -> RewardModel:
        """A model of ``spec`` built as at start (its weights not loaded); ValueError."""
        return self._build(spec, self.context)

    @asynccontextmanager
    async def hold(self, served: Served) -> AsyncIterator[RewardModel]:
        """Hold ``served`` for a request's plan, and give the model object to plan with.
        Awake (or draining, still batching), it is held at once, with no await before (a
        sleep that starts after cannot miss it). Held already by this request (a part of
        its plan on its own model), it is held again at once: waiting then for weights
        being written would wait for itself. Asleep, it is woken when its spec says
        ``wake_on_request``, else refused (``model_asleep``)."""
        held = _HELD.get()
        while id(served) not in held and not is_open(served):
            if not served.resumed.is_set():  # its weights are being rewritten: wait, then look again
                await served.resumed.wait()
                continue
            name = served.model.name
            self._metrics.rejected.labels(name, "replaced" if served.retired else "asleep").inc()
            if served.retired:
                raise ModelAsleep(f"model {name!r} was replaced while this request waited; retry it", retry_after_s=1)
            if not served.model.spec.wake_on_request or self.waker is None:
                raise ModelAsleep(
                    f"model {name!r} is asleep (level {served.sleep_level}); retry, or wake it "
                    f"(POST /v1/admin/models/{name}/wake_up; wake_on_request: true wakes it on a request)",
                    retry_after_s=1,
                )
            await self.waker(served)
        served.in_flight += 1
        served.idle.clear()
        token = _HELD.set(held | {id(served)})
        try:
            yield served.model
        finally:
            _HELD.reset(token)
            served.in_flight -= 1
            if served.in_flight == 0:
                served.idle.set()

    def current(self, name: str) -> Served:
        """The version of ``name`` that new requests get (404 when none is served)."""
        served = self._served.get(name)
        if served is None:
            raise NotFound(self._not_served(name), param="name")
        return served

    def _not_served(self, name: str) -> str:
        return f"model {name!r} is not served here; models: {', '.join(sorted(self._served)) or 'none'}"

    def replace(self, name: str, served: Served) -> Served:
        """``served`` takes ``name``'s place for new requests; the one it replaces is returned."""
        old = self._served[name]
        self._served[name] = served
        return old

    def get(self, name: str) -> Served:
        served = self._served.get(name)
        if served is None:
            raise NotFound(self._not_served(name), param="model")
        if not served.ready:
            state = f"failed to load ({served.error})" if served.error else "is still loading"
            raise NotReady(f"model {name!r} {state}")
        canary = self.canaries.get(name)
        if canary is not None:
            candidate, share = canary
            seen = self._canary_seen.get(name, 0)
            self._canary_seen[name] = seen + 1
            if math.floor((seen + 1) * share) > math.floor(seen * share):  # an exact share, no randomness
                return candidate
        return served

    def shadow_of(self, name: str) -> ShadowSpec | None:
        """The model's shadow candidate, when it names one that is ready."""
        served = self._served.get(name)
        shadow = served.model.spec.shadow if served is not None else None
        if shadow is None or shadow.model not in self._served:
            return None
        return shadow

    def peer(self, name: str, param: str | None = None, tenant: str | None = None) -> Peer:
        """The served model ``name`` as another model's plan uses it for ``tenant``: a
        422 naming ``param`` when no such model is served, 503 while it is not ready."""
        if name not in self._served:
            raise RequestError(self._not_served(name), param=param)
        served = self.get(name)
        return Peer(served.model, served.cache(tenant), served.running(tenant))

    def lend(self, names: Iterable[str], tenant: str | None) -> PeerLookup:
        """The served models ``names`` (and those they depend on, an ensemble's members) as
        ``tenant``'s plans use them, looked up now: a plan reads what it was lent and
        never calls back into the service. A name not served is refused when a plan asks
        for it, naming the field that gave it (422); one not ready, here (503)."""
        lent: dict[str, Peer] = {}
        todo = [name for name in names if name in self._served]
        while todo:
            name = todo.pop()
            if name not in lent:
                lent[name] = self.peer(name, tenant=tenant)
                todo += [n for n in lent[name].model.depends_on if n in self._served]

        def lookup(name: str, param: str | None = None) -> Peer:
            if name not in lent:
                raise RequestError(self._not_served(name), param=param)
            return lent[name]

        return lookup

    async def close(self) -> None:
        for served in [*self._served.values(), *(c for c, _ in self.canaries.values())]:
            served.ready = False
            if served.batcher is not None:
                await served.batcher.stop()
        # Side by side: a vLLM engine's process takes ~3 s to go, one model after another
        # would add them up (torch-on-CPU models still close one by one on their thread).
        closing = [*self._served.values(), *(c for c, _ in self.canaries.values())]
        await asyncio.gather(*(self._call(s.model, s.model.close) for s in closing))
        if self._cpu_thread is not None:
            self._cpu_thread.shutdown(wait=True)
            self._cpu_thread = None


def _served(model: RewardModel) -> Served:
    served = Served(model, score_cache=LRUCache(model.options.score_cache_size), version=initial_version(model.spec))
    served.idle.set()
    return served


def initial_version(spec: ModelSpec) -> str:
    return spec.version or spec.revision or "0"


def is_open(served: Served) -> bool:
    """A request may hold it now: awake (or draining, still batching), its weights whole."""
    awake = served.state == "awake" or (served.state == "draining" and not served.retired)
    return awake and served.resumed.is_set()
