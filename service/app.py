"""``create_app(settings)``: the FastAPI application and its lifespan.

Building the app reads presets and config files only; the lifespan loads the weights in
the background, so /health answers at once and /ready turns 200 when every model has
passed a real probe forward.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import Response

from rewardserve.client import __version__
from rewardserve.models.rubric import RuleRunner
from rewardserve.service.errors import install_error_handlers
from rewardserve.service.memory import MallocTrim
from rewardserve.service.compat import router as compat_routes
from rewardserve.service.judging import router as judging_routes
from rewardserve.service.metrics import Metrics
from rewardserve.service.middleware import BodyLimit, RequestMetrics
from rewardserve.service.registry import ModelRegistry
from rewardserve.service.routes import open_routes, scoring_routes
from rewardserve.service.scoring import ClientGone
from rewardserve.service.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class ServiceState:
    settings: Settings
    metrics: Metrics
    registry: ModelRegistry
    api_keys: list[str]
    rule_runner: RuleRunner
    draining: bool = False


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    metrics = Metrics()
    state = ServiceState(
        settings=settings,
        metrics=metrics,
        registry=ModelRegistry(settings.model_specs(), metrics, settings.image_policy(),
                               after_batch=MallocTrim(settings.malloc_trim_seconds)),
        api_keys=settings.accepted_keys(),
        rule_runner=RuleRunner(),
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        loading = asyncio.create_task(state.registry.load_all(), name="load-models")
        try:
            yield
        finally:
            state.draining = True
            loading.cancel()
            await asyncio.gather(loading, return_exceptions=True)
            await state.registry.close()
            await asyncio.to_thread(state.rule_runner.close)

    app = FastAPI(title="rewardserve", version=__version__, lifespan=lifespan)
    app.state.svc = state
    install_error_handlers(app)

    @app.exception_handler(ClientGone)
    async def _gone(_: Request, __: ClientGone) -> Response:
        return Response(status_code=499)  # nginx's "client closed request"; nobody reads it

    app.include_router(open_routes)
    app.include_router(scoring_routes)
    app.include_router(judging_routes)
    app.include_router(compat_routes)
    # The last added runs outermost: metrics see every response, the size limit's 413 too.
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(RequestMetrics, metrics=metrics)
    return app
