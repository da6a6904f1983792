"""The scoring routes: /v1/score, /v1/score/steps, /v1/score/turns and vLLM's /pooling.
Each reads top to bottom: the wire shape in, one use case, the wire shape out."""

from __future__ import annotations

import time
import uuid
from typing import Any, cast

from fastapi import APIRouter
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from rewardserve.protocol import (
    PoolingData,
    PoolingRequest,
    PoolingResponse,
    PoolingUsage,
    ScoreRequest,
    ScoreResponse,
    StepsRequest,
    StepsResponse,
    TurnsRequest,
    TurnsResponse,
)
from rewardserve.service.api._usecase import Executed, by_name_or_source, only_model_with
from rewardserve.service.api.code.outputs import bound_outputs
from rewardserve.service.api.responses import ERROR_RESPONSES, answer
from rewardserve.service.api.scoring import usecases
from rewardserve.service.deps import Ctx
from rewardserve.service.http.body import BoundedRoute

# Keys are checked by service/http/admission.py before a route runs; bodies are parsed under
# limits by service/http/body.py.
router = APIRouter(route_class=BoundedRoute, responses=ERROR_RESPONSES)


@router.post("/v1/score", response_model=ScoreResponse, summary="Score items with an outcome reward")
async def score(body: ScoreRequest, ctx: Ctx) -> Response:
    """Outcome reward per item, in request order (for a PRM, its trajectory aggregate)."""
    done = await usecases.score(ctx, body.model, body.items, body.options)
    scored = ScoreResponse(
        model=body.model,
        revision=done.revision,
        model_version=done.model_version,
        results=done.results,
        usage=done.usage,
        warnings=done.warnings,
    )
    if any(result.tests for result in done.results):
        # Code items' tests may show megabytes of output each: bounded and encoded off the
        # event loop.
        return await run_in_threadpool(_bounded_answer, scored, done)
    return answer(scored, done)


def _bounded_answer(scored: ScoreResponse, done: Executed[Any]) -> Response:
    bound_outputs(scored.results)
    return answer(scored, done)


@router.post("/v1/score/steps", response_model=StepsResponse, summary="Score each reasoning step with a process reward")
async def score_steps(body: StepsRequest, ctx: Ctx) -> Response:
    """Process reward per step, every step of a trajectory from one forward pass."""
    done = await usecases.score_steps(ctx, body.model, body.items, body.options)
    return answer(
        StepsResponse(
            model=body.model,
            revision=done.revision,
            model_version=done.model_version,
            results=done.results,
            usage=done.usage,
            warnings=done.warnings,
        ),
        done,
    )


@router.post("/v1/score/turns", response_model=TurnsResponse, summary="Score each tool-calling turn of an agent")
async def score_turns(body: TurnsRequest, ctx: Ctx) -> Response:
    """A reward per assistant turn of a tool-using agent: its tool calls matched to the
    reference's (hard or soft assignment), and the trajectory's total."""
    done = await usecases.score_turns(ctx, body)
    return answer(TurnsResponse(results=done.results, usage=done.usage), done)


@router.post(
    "/pooling", response_model=PoolingResponse, summary="vLLM /pooling: step probabilities from a process reward model"
)
async def pooling(body: PoolingRequest, ctx: Ctx) -> Response:
    """vLLM's /pooling for process reward models: per-step probability vectors read at
    the step tags of already-templated text, in vLLM's response shape."""
    if body.model:
        name = by_name_or_source(ctx, body.model)
    else:
        name = only_model_with(ctx, "pooling")
    one = isinstance(body.input, str) or (body.input and isinstance(body.input[0], int))
    # One input (text, or its token ids) or a list of them: the validated shape says which.
    inputs = cast(list[str | list[int]], [body.input] if one else list(body.input))
    done = await usecases.pooling(ctx, name, inputs, body.truncate_prompt_tokens, body.truncation_side or "right")
    tokens = done.usage.prompt_tokens
    response = PoolingResponse(
        id=f"pooling-{uuid.uuid4().hex}",
        created=int(time.time()),
        model=body.model or name,
        data=[PoolingData(index=i, data=vectors) for i, vectors in enumerate(done.results)],
        usage=PoolingUsage(prompt_tokens=tokens, total_tokens=tokens),
    )
    return answer(response, done)
