"""Judge-backed routes: POST /v1/verify, /v1/rubric, /v1/compare."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from rewardserve.protocol import (
    CompareRequest,
    CompareResponse,
    RubricRequest,
    RubricResponse,
    VerifyRequest,
    VerifyResponse,
)
from rewardserve.service.api.judging import usecases
from rewardserve.service.api.responses import ERROR_RESPONSES, answer
from rewardserve.service.deps import Ctx
from rewardserve.service.http.body import BoundedRoute

router = APIRouter(route_class=BoundedRoute, responses=ERROR_RESPONSES)


@router.post("/v1/verify", response_model=VerifyResponse, summary="Judge items with a generative verifier")
async def verify(body: VerifyRequest, ctx: Ctx) -> Response:
    """A generative verifier's judgement per item (logprob or generate mode)."""
    done = await usecases.verify(ctx, body.model, body.items, body.options)
    return answer(
        VerifyResponse(
            model=body.model,
            revision=done.revision,
            model_version=done.model_version,
            results=done.results,
            usage=done.usage,
        ),
        done,
    )


@router.post("/v1/rubric", response_model=RubricResponse, summary="Score items on weighted criteria")
async def rubric(body: RubricRequest, ctx: Ctx) -> Response:
    """Weighted criteria per item (rules, judge questions, served models' scores),
    aggregated; escalated to an expensive model where the request says."""
    done = await usecases.rubric(ctx, body)
    return answer(
        RubricResponse(judge=body.judge, results=done.results, usage=done.usage, warnings=done.warnings), done
    )


@router.post("/v1/compare", response_model=CompareResponse, summary="Compare responses to one prompt")
async def compare(body: CompareRequest, ctx: Ctx) -> Response:
    """Pairwise / listwise preference between each item's responses."""
    done = await usecases.compare(ctx, body.model, body.items, body.options)
    return answer(
        CompareResponse(
            model=body.model,
            revision=done.revision,
            model_version=done.model_version,
            results=done.results,
            usage=done.usage,
        ),
        done,
    )
