"""The judging use cases: /v1/verify, /v1/rubric and /v1/compare."""

from __future__ import annotations

from rewardserve.engine.executor import refuse_over_limit, refuse_without_room
from rewardserve.engine.tenants import label
from rewardserve.models.errors import InvalidRequest
from rewardserve.models.operations import Lent
from rewardserve.models.operations.groups import singleton_groups
from rewardserve.models.operations.rubric import RUBRIC
from rewardserve.protocol import (
    CompareItem,
    CompareOptions,
    CompareResult,
    Item,
    RubricRequest,
    RubricResult,
    ScoreOptions,
    VerifyOptions,
    VerifyResult,
)
from rewardserve.service.api._usecase import (
    Executed,
    admit,
    observe,
    run_plan,
    serving,
    warn,
)
from rewardserve.service.context import RequestContext
from rewardserve.service.observability import composite_views as observed


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
