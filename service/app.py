"""``create_app(settings)``: the FastAPI application and its lifespan.

Building the app reads presets and config files only; the lifespan starts the rule
pools, then loads the weights in the background, so /health answers at once and /ready
turns 200 when every model has passed a real probe forward.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.responses import Response

from rewardserve.client import __version__
from rewardserve.models.reward_model import ModelContext
from rewardserve.models.rules.runner import RuleRunner
from rewardserve.service.admission import Admission, InFlightRequests
from rewardserve.service.compat import router as compat_routes
from rewardserve.service.errors import install_error_handlers
from rewardserve.service.judge_routes import router as judging_routes
from rewardserve.service.memory import MallocTrim
from rewardserve.service.metrics import Metrics
from rewardserve.service.middleware import BodyLimit, RequestMetrics
from rewardserve.service.served_models import ModelRegistry
from rewardserve.service.routes import open_routes, scoring_routes
from rewardserve.service.dispatch import ClientGone
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
    in_flight: InFlightRequests = field(default_factory=InFlightRequests)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    metrics = Metrics()
    rule_runner = RuleRunner(settings.rule_limits())
    context = ModelContext(image_policy=settings.image_policy(), rules=rule_runner)
    state = ServiceState(
        settings=settings,
        metrics=metrics,
        registry=ModelRegistry(settings.model_specs(), metrics, context,
                               after_batch=MallocTrim(settings.malloc_trim_seconds)),
        api_keys=settings.accepted_keys(),
        rule_runner=rule_runner,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        rule_runner.start()
        loading = asyncio.create_task(state.registry.load_all(), name="load-models")
        try:
            yield
        finally:
            state.draining = True
            loading.cancel()
            await asyncio.gather(loading, return_exceptions=True)
            await state.registry.close()
            await asyncio.to_thread(rule_runner.close)

    docs = settings.docs
    app = FastAPI(
        title="rewardserve", version=__version__, lifespan=lifespan,
        # No redirects: a slash-less path is a 404 here, never a redirect built from the
        # request's Host header.
        redirect_slashes=False,
        docs_url="/docs" if docs else None, redoc_url="/redoc" if docs else None,
        openapi_url="/openapi.json" if docs else None,
    )
    app.router.redirect_slashes = False
    app.state.svc = state
    install_error_handlers(app)

    @app.exception_handler(ClientGone)
    async def _gone(_: Request, __: ClientGone) -> Response:
        return Response(status_code=499)  # nginx's "client closed request"; nobody reads it

    app.include_router(open_routes)
    app.include_router(scoring_routes)
    app.include_router(judging_routes)
    app.include_router(compat_routes)
    # The last added runs outermost: metrics see every response; keys are checked before
    # the size limit's 413 and before any byte of the body is read.
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(Admission, state=state)
    app.add_middleware(RequestMetrics, metrics=metrics)
    return app
