"""The application layer: each scoring operation once, whatever route asked for it.

    route (routes.py, judge_routes.py, compat.py): its wire shape in and out
      -> RequestContext.of(request) (context.py): tenant, scope, the service, accounting
      -> a use case here: the per-request item limit and the tenant's admission, the
         served model and whether it answers the operation, its plan run
         (engine/executor.py: work charged per stage, batched, pooled, awaited), then
         reward-health and shadow scoring
      -> Executed: results, usage and timing; the route encodes them in its shape and
         the timing in ``x-queue-time`` / ``x-inference-time``

A compat route translates its peer's request into one of these calls and the results
back; what the native route does to a request (limits, charge, log, metrics, health,
shadow) it does the same. Models never call back into the service: what a plan needs of
the service (the tenant's part of a cache, the other models as the tenant sees them) is
lent to it here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool

from rewardserve.client import __version__
from rewardserve.engine.executor import Executed as Executed  # what the routes answer from
from rewardserve.engine.executor import charge_work, refuse_over_limit, refuse_without_room
from rewardserve.engine.executor import run_plan as execute_plan
from rewardserve.engine.registry import Served
from rewardserve.engine.tenants import label, named
from rewardserve.models.errors import InvalidRequest, NotFound, Overloaded, PayloadTooLarge
from rewardserve.models.operations import Lent
from rewardserve.models.operations.groups import singleton_groups
from rewardserve.models.operations.rubric import RUBRIC
from rewardserve.models.operations.turns import TURNS
from rewardserve.models.plan import Plan
from rewardserve.models.policy_tokenizers import with_token_rewards
from rewardserve.models.rules.code.sandbox_fusion import sandbox_fusion_code
from rewardserve.models.text.tokenize import Tokenized
from rewardserve.protocol import (
    CompareItem,
    CompareOptions,
    CompareResult,
    Item,
    ItemResult,
    Message,
    ModelCard,
    ModelInfo,
    RubricRequest,
    RubricResult,
    RunningStats,
    ScoreOptions,
    ServiceInfo,
    ServiceLimits,
    ShadowReport,
    StepOptions,
    StepsResult,
    TurnsRequest,
    TurnsResult,
    VerifyOptions,
    VerifyResult,
)
from rewardserve.service.context import RequestContext
from rewardserve.service.observability import composite_views as observed

log = logging.getLogger(__name__)
R = TypeVar("R")

# The route that answers each operation a kind declares (RewardModel.endpoints).
ENDPOINT_ROUTES = {
    "score": "/v1/score",
    "steps": "/v1/score/steps",
    "pooling": "/pooling",
    "verify": "/v1/verify",
    "judge": "/v1/rubric (as judge)",
    "compare": "/v1/compare",
    "classify": "/classify, /v1/embeddings",
}


async def run_plan(
    ctx: RequestContext, served: Served | None, n_items: int, planner: Callable[[Any], Plan[R]]
) -> Executed[R]:
    """The engine runs the plan; what it did goes into the request log
    (service/http/middleware.py)."""
    done = await execute_plan(ctx, served, n_items, planner)
    ctx.log["work"] = {
        "items": done.usage.items,
        "tokens": done.usage.prompt_tokens,
        "queue_ms": round(done.queue_s * 1000, 1),
        "inference_ms": round(done.inference_s * 1000, 1),
    }
    return done


def admit(ctx: RequestContext, n_items: int) -> None:
    """The per-request item limit, and the tenant's items (counted once per request; what
    its plan makes beyond them is charged as it is planned, engine/executor.py charge_work)."""
    limit = ctx.svc.settings.max_items_per_request
    if n_items > limit:
        raise PayloadTooLarge(
            f"{n_items} items is over the limit of {limit} per request; split the list (the client does this for you)",
            param="items",
        )
    if ctx.detached or not ctx.svc.tenants.enabled:
        return
    ctx.work_charged = n_items
    wait = ctx.svc.tenants.admit_items(ctx.tenant, n_items)
    if wait is not None:
        raise Overloaded(f"{named(ctx.tenant)} is over its items per second; retry after {wait}s", retry_after_s=wait)


def serving(ctx: RequestContext, model: str, endpoint: str, field: str = "model") -> Served:
    """The served model, ready, that answers ``endpoint``; named in the request's log.
    ``field``: the request field that named it, which the errors name."""
    try:
        served = ctx.svc.registry.get(model)
    except NotFound as exc:
        if field == "model":
            raise
        raise NotFound(f"{field}: {exc}", param=field) from None
    if not ctx.detached:
        ctx.name_model(model)
    if endpoint not in served.model.endpoints:
        routes = ", ".join(sorted(ENDPOINT_ROUTES[e] for e in served.model.endpoints))
        raise InvalidRequest(f"{field} {model!r} is of kind {served.model.kind}; it answers {routes}", param=field)
    return served


def observe(ctx: RequestContext, model: str, items: list[Item], options: ScoreOptions, results: list[Any]) -> list[str]:
    """Reward health sees the model's scores, and the tenant's reward-hacking alarms its
    groups (the alarms that start, as warnings for the answer); its shadow candidate (if
    any) scores the same items, charged to the same tenant. Not for the service's own work."""
    if ctx.detached:
        return []
    ctx.svc.health.observe(model, items, results)
    started = ctx.svc.health.alarms(model, label(ctx.tenant), items, results)
    ctx.svc.shadowing.maybe_shadow(ctx, model, items, options, results)
    return started


async def score(
    ctx: RequestContext, model: str, items: list[Item], options: ScoreOptions, endpoint: str = "score"
) -> Executed[ItemResult]:
    """A reward per item (/v1/score; /classify, /v1/embeddings and /get_reward too)."""
    admit(ctx, len(items))
    served = serving(ctx, model, endpoint)
    peers = ctx.peers(served.model.depends_on)
    cache = served.cache(ctx.tenant)
    done = await run_plan(ctx, served, len(items), lambda m: m.plan_score(items, options, cache, peers))
    done.warnings += observe(ctx, model, items, options, done.results)
    if options.normalize == "group":
        warn(ctx, done, singleton_groups(items, "normalize: group"))
    return done


async def submit(
    ctx: RequestContext, model: str, completion: str, language: str, tests: dict[str, Any], options: ScoreOptions
) -> tuple[str, Executed[ItemResult]]:
    """SandboxFusion's /submit: the code its extraction takes from the completion, scored
    as one item of a code model; (that code, the scoring)."""
    code = await run_in_threadpool(sandbox_fusion_code, completion, language)
    return code, await score(ctx, model, [Item(response=code, reference=tests)], options)


def warn(ctx: RequestContext, done: Executed[Any], warning: str | None) -> None:
    """A warning in the response, and in the service log the first time its text is seen
    (per process, a bounded few)."""
    if warning is None:
        return
    done.warnings.append(warning)
    seen = ctx.svc.warned
    if warning not in seen and len(seen) < 64:
        seen.add(warning)
        log.warning("%s (model %s, %s)", warning, ctx.log.get("model", "-"), named(ctx.tenant))


async def score_steps(
    ctx: RequestContext, model: str, items: list[Item], options: StepOptions
) -> Executed[StepsResult]:
    """A reward per step of each item, every step from one forward pass; with a policy
    tokenizer, also a reward per token of each item's response_token_ids."""
    admit(ctx, len(items))
    served = serving(ctx, model, "steps")
    tokenizer = policy_tokenizer(ctx, items, options)
    cache = served.cache(ctx.tenant)
    done = await run_plan(ctx, served, len(items), lambda m: m.plan_steps(items, options, cache))
    if tokenizer is not None:  # decoding the ids is the request's work: off the event loop
        done.results = await run_in_threadpool(with_token_rewards, items, done.results, tokenizer, options.token_spread)
    done.warnings += observe(ctx, model, items, ScoreOptions(), done.results)
    if options.shaping == "group":
        warn(ctx, done, singleton_groups(items, "shaping: group"))
    return done


def policy_tokenizer(ctx: RequestContext, items: list[Item], options: StepOptions) -> Any:
    """The tokenizer options.policy_tokenizer names (None: none asked for), or 422."""
    if options.policy_tokenizer is None:
        given = next((i for i, item in enumerate(items) if item.response_token_ids is not None), None)
        if given is not None:
            raise InvalidRequest(
                "response_token_ids need options.policy_tokenizer, the policy's tokenizer by its name here",
                param=f"items[{given}].response_token_ids",
            )
        return None
    problem = ctx.svc.policy_tokenizers.problem(options.policy_tokenizer)
    if problem is not None:
        raise InvalidRequest(problem, param="options.policy_tokenizer")
    return ctx.svc.policy_tokenizers.loaded[options.policy_tokenizer]


async def score_turns(ctx: RequestContext, body: TurnsRequest) -> Executed[TurnsResult]:
    """A reward per assistant turn from its tool calls matched to the reference's: no
    model; admitted, and its matching work charged, like the others."""
    cost = TURNS.cost(body)
    admit(ctx, cost.items)
    charge_work(ctx, cost.work)  # the items and their calls: the calls beyond them charged
    start = time.perf_counter()
    done = await run_plan(ctx, None, cost.items, lambda _none: TURNS.plan(body, Lent()))
    done.inference_s = time.perf_counter() - start
    return done


async def verify(ctx: RequestContext, model: str, items: list[Item], options: VerifyOptions) -> Executed[VerifyResult]:
    """A judge's verdict per item."""
    admit(ctx, len(items))
    served = serving(ctx, model, "verify")
    cache = served.cache(ctx.tenant)
    done = await run_plan(ctx, served, len(items), lambda m: m.plan_verify(items, options, cache))
    if not ctx.detached:  # health only: a shadow's plan_score would read another template
        ctx.svc.health.observe(model, items, done.results)
    return done


def rule_hosts(ctx: RequestContext, rules: set[str]) -> dict[str, str]:
    """The served rule model that runs each of ``rules`` for rubric criteria (the code
    model for code_tests and python criteria: ``code`` first, else the first configured);
    a rule no model serves is left out, and its criteria are refused."""
    hosts: dict[str, str] = {}
    for served in sorted(ctx.svc.registry, key=lambda s: s.model.name != "code"):
        model = served.model
        if served.error:  # failed to load (--keep-going): it serves nothing
            continue
        if model.hosted_rule is not None and model.hosted_rule in rules:
            hosts.setdefault(model.hosted_rule, model.name)
    return hosts


async def rubric(ctx: RequestContext, body: RubricRequest) -> Executed[RubricResult]:
    """Weighted criteria per item (rules, judge questions, served models' scores)."""
    cost = RUBRIC.cost(body)
    admit(ctx, cost.items)
    refuse_over_limit(ctx, cost.work)
    refuse_without_room(ctx, cost.rule_calls)
    judge = None
    if cost.judge:
        if body.judge is None:
            raise InvalidRequest("judge criteria need a 'judge' verifier model", param="judge")
        judge = serving(ctx, body.judge, "judge", field="judge")
    hosts = rule_hosts(ctx, set(cost.hosted))
    peers = ctx.peers(cost.models | set(hosts.values()))
    done: Executed[RubricResult] = await run_plan(
        ctx, judge, cost.items, lambda judge_model: RUBRIC.plan(body, Lent(judge_model, peers, hosts))
    )
    criteria = [*(body.criteria or []), *(c for item in body.items for c in item.criteria or [])]
    if any(c.normalize == "group" for c in criteria):
        warn(ctx, done, singleton_groups(list(body.items), "a criterion's normalize: group"))
    if not ctx.detached:
        items: list[Item] = list(body.items)
        ctx.svc.health.observe(observed.RUBRIC, items, done.results)
        done.warnings += ctx.svc.health.alarms(observed.RUBRIC, label(ctx.tenant), items, done.results)
        for name, scored in observed.criterion_scores(body, done.results).items():
            observe(ctx, name, items, ScoreOptions(), scored)
    return done


async def compare(
    ctx: RequestContext, model: str, items: list[CompareItem], options: CompareOptions
) -> Executed[CompareResult]:
    """Preference between each item's responses (each response counts as an item)."""
    admit(ctx, sum(len(i.responses) for i in items))
    served = serving(ctx, model, "compare")
    peers = ctx.peers(served.model.depends_on)
    cache = served.cache(ctx.tenant)
    done = await run_plan(ctx, served, len(items), lambda m: m.plan_compare(items, options, cache, peers))
    # A judge's comparison scores are win probabilities, not its scores: not observed.
    if "judge" not in served.model.endpoints:
        responses, scored = observed.response_items(items, done.results)
        done.warnings += observe(ctx, model, responses, ScoreOptions(), scored)
    return done


async def pooling(
    ctx: RequestContext, model: str, inputs: list[str | list[int]], keep: int | None, side: str
) -> Executed[list[list[float]]]:
    """vLLM's /pooling for process reward models: per input, the vectors at its step tags."""
    admit(ctx, len(inputs))
    served = serving(ctx, model, "pooling")
    return await run_plan(ctx, served, len(inputs), lambda m: m.plan_pooling(inputs, keep, side))


def by_name_or_source(ctx: RequestContext, named: str) -> str:
    """A served model's name, or the name of the one model served from ``named`` as its
    source (vLLM's clients, verl among them, send the checkpoint path)."""
    registry = ctx.svc.registry
    if named not in {s.model.name for s in registry}:
        sourced = [s.model.name for s in registry if s.model.spec.source == named]
        if len(sourced) == 1:
            return sourced[0]
    return named


def only_model_with(ctx: RequestContext, endpoint: str) -> str:
    """The one served model that answers ``endpoint``, for requests that name none."""
    names = [s.model.name for s in ctx.svc.registry if endpoint in s.model.endpoints]
    if len(names) != 1:
        raise InvalidRequest("name the model: 'model' is required here", param="model")
    return names[0]


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


async def tokenize(
    ctx: RequestContext,
    model: str | None,
    prompt: str | None,
    messages: list[Message] | None,
    *,
    add_special_tokens: bool,
    add_generation_prompt: bool,
    continue_final_message: bool,
    token_strs: bool,
) -> Tokenized:
    """vLLM's /tokenize with the served model's own tokenizer: the model named (or
    served from ``model`` as its source; with none named, the one model with a
    tokenizer). Client work, no forward: not charged as items, but tokenized in a
    worker thread behind the tenant-fair gate, as a plan is."""
    registry = ctx.svc.registry
    if model:
        name = by_name_or_source(ctx, model)
    else:
        names = [s.model.name for s in registry if s.model.text_tokenizer is not None]
        if len(names) != 1:
            raise InvalidRequest("name the model: 'model' is required here", param="model")
        name = names[0]
    served = registry.get(name)
    ctx.name_model(name)
    async with ctx.svc.engine.gate.slot(ctx.tenant):
        done: Tokenized = await run_in_threadpool(
            lambda: served.model.tokenize(
                prompt,
                messages,
                add_special_tokens=add_special_tokens,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message,
                token_strs=token_strs,
            )
        )
    return done
