"""The same service as a Ray Serve application, inside a trainer's Ray cluster.

    serve run rewardserve.service.ray_serve:app config=/path/models.yaml replicas=2 num_gpus=1

or ``serve deploy deploy/ray/serve.yaml``. Each replica is this app (``create_app``)
in a Ray actor, its models loaded by the app's own lifespan; Ray Serve routes requests
between the replicas and restarts one that dies. Settings come from the arguments
(``config``, and any ``REWARDSERVE_*`` variable passed in the application's
``runtime_env``). ``replicas`` fixes their number; without it they autoscale on
ongoing requests per replica between ``min_replicas`` and ``max_replicas``.
``ray`` is the optional extra ``rewardserve[ray]``.
"""

from __future__ import annotations

import os
from typing import Any

DEFAULT_TARGET_ONGOING = 16


class LoadedFirst:
    """The app, with its lifespan's startup reported complete only once every model has
    loaded: Ray Serve sends a replica requests once its startup is done."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def send_when_loaded(message: Any) -> None:
            if message["type"] == "lifespan.startup.complete":
                await self.app.state.svc.registry.loaded.wait()
            await send(message)

        await self.app(scope, receive, send_when_loaded)


def build_asgi_app() -> Any:
    """Evaluated on each replica: the app, its settings from the environment."""
    from rewardserve.service.app import create_app
    from rewardserve.service.observability.logs import configure_logging
    from rewardserve.service.settings import Settings

    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    return LoadedFirst(create_app(settings))


def deployment_options(args: dict[str, str]) -> dict[str, Any]:
    """Ray Serve deployment options from ``serve run`` arguments."""
    gpus = float(args.get("num_gpus", "0"))
    options: dict[str, Any] = {
        "name": args.get("name", "rewardserve"),
        "ray_actor_options": {"num_cpus": float(args.get("num_cpus", "1")), "num_gpus": gpus},
        # A replica is ready once its models loaded and probed (the app's /ready).
        "health_check_period_s": 10,
        "graceful_shutdown_timeout_s": float(args.get("graceful_shutdown_s", "30")),
        "max_ongoing_requests": int(args.get("max_ongoing_requests", "256")),
    }
    if "replicas" in args:
        options["num_replicas"] = int(args["replicas"])
    else:
        options["autoscaling_config"] = {
            "min_replicas": int(args.get("min_replicas", "1")),
            "max_replicas": int(args.get("max_replicas", "4")),
            "target_ongoing_requests": int(args.get("target_ongoing_requests", DEFAULT_TARGET_ONGOING)),
        }
    return options


def app(args: dict[str, str]) -> Any:
    """The Ray Serve application builder (``serve run ...:app key=value ...``)."""
    from ray import serve  # type: ignore[import-not-found]  # not in this venv: ray has its own (make ray-venv)

    environment = {
        f"REWARDSERVE_{k.upper()}": v
        for k, v in args.items()
        if k in ("config", "api_keys", "tenants_file", "log_level", "compile")
    }
    environment.update({k: v for k, v in os.environ.items() if k.startswith("REWARDSERVE_")})
    options = deployment_options(args)
    options["ray_actor_options"]["runtime_env"] = {"env_vars": environment}
    return serve.deployment(**options)(serve.ingress(build_asgi_app)()).bind()
