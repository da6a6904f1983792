"""What the service tells about itself: its models' cards, its limits, its version, its
metrics as the caller may read them, and a model's shadow report.
"""

from __future__ import annotations

from importlib import metadata

from rewardserve.client import __version__
from rewardserve.engine.tenants import label
from rewardserve.models.errors import NotFound
from rewardserve.protocol import (
    Health,
    ModelCard,
    ModelInfo,
    RunningStats,
    ServiceInfo,
    ServiceLimits,
    ShadowReport,
)
from rewardserve.service.context import RequestContext
from rewardserve.service.http.auth import has_valid_key


def model_cards(ctx: RequestContext) -> list[ModelCard]:
    """Every served model's card, with the running statistics of the caller's tenant."""
    cards = []
    for served in ctx.svc.registry:
        card = served.model.card(served.ready)
        stats = served.running(ctx.tenant).snapshot()
        if stats.count:
            card = card.model_copy(update={"running": RunningStats(count=stats.count, mean=stats.mean, std=stats.std)})
        cards.append(card)
    return cards


def shadow_report(ctx: RequestContext, name: str) -> ShadowReport:
    """How the model's shadow candidate compares with it: for a tenant, on its own items;
    for the operator (or without tenants), on everyone's."""
    svc = ctx.svc
    spec = svc.registry.get(name).model.spec.shadow
    if spec is None:
        raise NotFound(f"model {name!r} has no shadow candidate", param="name")
    tenant = ctx.tenant if svc.tenants.enabled else None
    window = svc.shadowing.window(name) if tenant is None else svc.shadowing.window(name, tenant)
    return window.report(name, spec.model, spec.fraction)


def metrics_text(ctx: RequestContext, by_model: bool, tenant_view: str | None) -> bytes:
    """The exposition text as this caller may read it (service/observability/metrics.py render), the
    figures computed on reading brought up to date first."""
    svc = ctx.svc
    for served in svc.registry:
        for tenant, running in list(served.running_by_tenant.items()):
            stats = running.snapshot()
            if stats.count:
                svc.health.running_stats(served.model.name, label(tenant), stats.count, stats.mean, stats.std)
    svc.shadowing.refresh_gauges(svc.registry)
    rendered: bytes = svc.metrics.render(by_model=by_model, tenant=tenant_view)
    return rendered


def version() -> str:
    """The rewardserve package's version: as installed, else the package's own."""
    try:
        return metadata.version("rewardserve")
    except metadata.PackageNotFoundError:
        return __version__


def info(ctx: RequestContext) -> ServiceInfo:
    """GET /info: every served model as /v1/models describes it (its card), with where
    it runs and its batch budget, and the per-request limits of the settings."""
    settings = ctx.svc.settings
    models = []
    for served in ctx.svc.registry:
        model = served.model
        card = model.card(served.ready)
        dtype, device = model.placement()
        models.append(
            ModelInfo(
                id=card.name,
                kind=card.kind,
                backend=card.backend,
                source=card.source,
                dtype=dtype,
                device=device,
                max_input_tokens=card.max_tokens,
                max_batch_tokens=model.policy().max_batch_tokens if model.runs_torch else None,
                tokenizer=model.text_tokenizer is not None,
                ready=card.ready,
            )
        )
    limits = ServiceLimits(
        max_items_per_request=settings.max_items_per_request,
        max_work_per_request=settings.max_work_per_request,
        max_body_bytes=settings.max_body_bytes,
        max_json_values=settings.max_json_values,
    )
    return ServiceInfo(version=version(), models=models, limits=limits)


def holds_a_key(ctx: RequestContext, authorization: str | None) -> bool:
    """Whether an open route's caller sent one of the service's keys (auth on)."""
    keys = ctx.svc.api_keys
    return bool(keys) and has_valid_key(authorization, keys)


def names_models(ctx: RequestContext, keyed: bool) -> bool:
    """Whether an open route may name the served models to this caller: the settings
    say so, or the caller holds a valid key."""
    return ctx.svc.settings.public_model_names or keyed


def tenant_view(ctx: RequestContext, keyed: bool) -> str | None:
    """Whose view of /metrics a caller gets, with tenants: a tenant's key its own; a key
    of no tenant (the operator's) everything; no key or a wrong one no tenant's work
    at all (""). Without tenants, everything."""
    if not ctx.svc.tenants.enabled:
        return None
    return ctx.tenant if keyed else ""


def health(ctx: RequestContext, named: bool) -> tuple[Health, int]:
    """Alive (200), or failed (503) when a model failed to load; the models and their
    isolation named only where ``named``."""
    registry = ctx.svc.registry
    if registry.unhealthy:
        detail = "; ".join(registry.unhealthy) if named else f"{len(registry.unhealthy)} model(s)"
        return Health(status="failed: " + detail), 503
    isolation = {s.model.name: s.model.runs_on for s in registry if named and s.model.runs_on is not None}
    return Health(status="ok", isolation=isolation), 200


def readiness(ctx: RequestContext, named: bool) -> tuple[Health, int]:
    """Ready (200) once every model is loaded and probed and the replica is not
    draining; else loading, failed or draining (503)."""
    svc = ctx.svc
    states = {s.model.name: s.ready for s in svc.registry} if named else {}
    if svc.registry.all_ready and not svc.draining:
        return Health(status="ready", models=states), 200
    status = "draining" if svc.draining else ("failed" if svc.registry.unhealthy else "loading")
    return Health(status=status, models=states), 503
