"""``create_app(settings)``: the FastAPI application and its lifespan.

Building the app reads presets and config files and checks that every model's weights
can be found (a model that cannot be built stops here, naming itself); the lifespan
starts the rule pools, then loads the weights in the background, rules first, so /health
answers at once and /ready turns 200 when every model has passed a real probe forward.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import Response
from fastapi_offline import FastAPIOffline

from rewardserve.client import __version__
from rewardserve.engine.errors import ClientGone
from rewardserve.engine.executor import Engine
from rewardserve.engine.pools.runner import RuleRunner
from rewardserve.engine.registry import ModelRegistry
from rewardserve.engine.tenants import FairGate, Tenants
from rewardserve.models.kinds import build_checked
from rewardserve.models.policy_tokenizers import PolicyTokenizers
from rewardserve.models.reward_model import ModelContext
from rewardserve.models.spec import ModelSpec
from rewardserve.models.startup_phases import log as startup_log
from rewardserve.service.api.admin.routes import router as admin_routes
from rewardserve.service.api.code.routes import router as code_routes
from rewardserve.service.api.info.routes import open_routes
from rewardserve.service.api.info.routes import router as info_routes
from rewardserve.service.api.judging.routes import router as judging_routes
from rewardserve.service.api.peers.routes import router as peer_routes
from rewardserve.service.api.scoring.routes import router as scoring_routes
from rewardserve.service.errors import install_error_handlers
from rewardserve.service.http.admission import Admission, InFlightRequests
from rewardserve.service.http.middleware import BodyLimit, RequestLog, RequestMetrics
from rewardserve.service.observability.metrics import Metrics
from rewardserve.service.observability.reward_health import RewardHealth
from rewardserve.service.observability.shadow import Shadowing
from rewardserve.service.ops.lifecycle import Lifecycle
from rewardserve.service.ops.malloc_trim import MallocTrim, freeze_loaded_objects
from rewardserve.service.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class ServiceState:
    settings: Settings
    metrics: Metrics
    api_keys: list[str]
    engine: Engine
    health: RewardHealth
    shadowing: Shadowing
    lifecycle: Lifecycle
    draining: bool = False
    in_flight: InFlightRequests = field(default_factory=InFlightRequests)
    # Requests open now per tenant ("": keys of no tenant, or no key).
    open_requests: dict[str, int] = field(default_factory=dict)
    warned: set[str] = field(default_factory=set)  # request warnings already logged once
    policy_tokenizers: PolicyTokenizers = field(default_factory=lambda: PolicyTokenizers({}))

    # The engine's, read through it: one of each per app.
    @property
    def registry(self) -> ModelRegistry:
        return self.engine.registry

    @property
    def tenants(self) -> Tenants:
        return self.engine.tenants


def access_summary(state: ServiceState, specs: list[ModelSpec]) -> str:
    """Who may call, and what is shadowed: the operator's first questions at start."""
    tenants = state.tenants.specs
    if not state.api_keys:
        auth = "auth off: any caller is served (set REWARDSERVE_API_KEYS or REWARDSERVE_API_KEYS_FILE)"
    else:
        operator = len(state.api_keys) - len(state.tenants.keys())
        auth = f"auth on: {operator} operator key(s)"
    if tenants:
        named = ", ".join(f"{name} (weight {spec.weight:g})" for name, spec in tenants.items())
        auth += f"; {len(tenants)} tenant(s): {named}"
    shadows = [f"{s.name} -> {s.shadow.model} ({s.shadow.fraction:.0%})" for s in specs if s.shadow]
    return auth + ("; shadows: " + ", ".join(shadows) if shadows else "; no shadows")


def create_app(settings: Settings | None = None, url: str | None = None) -> FastAPI:
    """The app; ``url`` (where it listens) only for the start-up log."""
    settings = settings or Settings()
    specs = settings.model_specs()
    metrics = Metrics()
    tenants = Tenants(settings.tenant_specs(), metrics, batch_ms=settings.tenant_batch_ms)
    rule_runner = RuleRunner(settings.rule_limits(), scheduler=tenants.scheduler)
    context = ModelContext(image_policy=settings.image_policy(), rules=rule_runner, compile=settings.compile)
    registry = ModelRegistry(
        specs,
        metrics,
        build_checked,
        context,
        after_batch=MallocTrim(settings.malloc_trim_seconds),
        keep_going=settings.keep_going,
        tenants=tenants,
    )
    lifecycle = Lifecycle(registry, settings, metrics)
    engine = Engine(
        registry=registry,
        gate=FairGate(tenants, slots=max(2, os.cpu_count() or 2)),
        tenants=tenants,
        rules=rule_runner,
        metrics=metrics,
        max_work_per_request=settings.max_work_per_request,
        observer=lifecycle.canaries,
    )
    state = ServiceState(
        settings=settings,
        metrics=metrics,
        api_keys=settings.accepted_keys() + tenants.keys(),
        engine=engine,
        health=RewardHealth(metrics),
        shadowing=Shadowing(metrics),
        lifecycle=lifecycle,
        policy_tokenizers=PolicyTokenizers(settings.policy_tokenizers),
    )

    startup_log.info("%s", access_summary(state, specs))

    async def load_and_announce(app: FastAPI) -> None:
        if state.policy_tokenizers.sources:
            await asyncio.to_thread(state.policy_tokenizers.load)
        await state.registry.load_all()
        if settings.gc_freeze:
            frozen = freeze_loaded_objects()
            startup_log.info("garbage collector: %d objects of the loaded models left out of its scans", frozen)
        ready = [s.model.name for s in state.registry if s.ready]
        if ready:
            routes = sorted(app.openapi().get("paths", {}))
            startup_log.info("serving %s at %s; routes: %s", ", ".join(ready), url or "(in process)", " ".join(routes))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        rule_runner.start()
        loading = asyncio.create_task(load_and_announce(app), name="load-models")
        try:
            yield
        finally:
            state.draining = True
            loading.cancel()
            await asyncio.gather(loading, return_exceptions=True)
            await state.shadowing.close()
            await state.lifecycle.close()  # async admin calls still running: cancelled, awaited
            await state.registry.close()
            await asyncio.to_thread(rule_runner.close)

    common: dict[str, Any] = dict(
        title="rewardserve",
        version=__version__,
        lifespan=lifespan,
        # No redirects: a slash-less path is a 404 here, never a redirect built from the
        # request's Host header.
        redirect_slashes=False,
    )
    if settings.docs:
        # Swagger UI and ReDoc with their scripts served from here (fastapi-offline's
        # copies), so the docs work offline; behind the key like every other route.
        app = FastAPIOffline(docs_url="/docs", redoc_url="/redoc", static_url="/docs/assets", **common)
    else:
        app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, **common)
    app.router.redirect_slashes = False
    app.state.svc = state
    install_error_handlers(app)

    @app.exception_handler(ClientGone)
    async def _gone(_: Request, __: ClientGone) -> Response:
        return Response(status_code=499)  # nginx's "client closed request"; nobody reads it

    app.include_router(open_routes)
    app.include_router(scoring_routes)
    app.include_router(info_routes)
    app.include_router(judging_routes)
    app.include_router(peer_routes)
    app.include_router(code_routes)
    app.include_router(admin_routes)
    # The last added runs outermost: the request log and metrics see every response
    # (CORS preflights included); keys are checked before the size limit's 413 and
    # before any byte of the body is read.
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(Admission, state=state)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type", "x-request-id", "x-deadline-ms"],
            expose_headers=["x-request-id", "x-queue-time", "x-inference-time"],
            max_age=600,
        )
    app.add_middleware(RequestMetrics, metrics=metrics)
    app.add_middleware(RequestLog)
    return app
