"""The scoring use cases: /v1/score, /v1/score/steps, /v1/score/turns and /pooling (and the
peers' routes that score: /get_reward, /classify, /v1/embeddings, /run_code).
"""

from __future__ import annotations

import time
from typing import Any

from starlette.concurrency import run_in_threadpool

from rewardserve.engine.executor import charge_work
from rewardserve.models.errors import InvalidRequest
from rewardserve.models.operations import Lent
from rewardserve.models.operations.groups import singleton_groups
from rewardserve.models.operations.turns import TURNS
from rewardserve.models.policy_tokenizers import with_token_rewards
from rewardserve.protocol import (
    Item,
    ItemResult,
    ScoreOptions,
    StepOptions,
    StepsResult,
    TurnsRequest,
    TurnsResult,
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


async def pooling(
    ctx: RequestContext, model: str, inputs: list[str | list[int]], keep: int | None, side: str
) -> Executed[list[list[float]]]:
    """vLLM's /pooling for process reward models: per input, the vectors at its step tags."""
    admit(ctx, len(inputs))
    served = serving(ctx, model, "pooling")
    return await run_plan(ctx, served, len(inputs), lambda m: m.plan_pooling(inputs, keep, side))
