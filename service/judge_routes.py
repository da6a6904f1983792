"""Judge-backed routes: POST /v1/verify, /v1/rubric, /v1/compare."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from rewardserve.client.protocol import (
    CompareRequest,
    CompareResponse,
    RubricRequest,
    RubricResponse,
    VerifyRequest,
    VerifyResponse,
)
from rewardserve.models.plans.rubric import asks_judge, plan_rubric, rubric_work
from rewardserve.service.admission import scope_of
from rewardserve.service.body import BoundedRoute
from rewardserve.service.dispatch import refuse_over_limit, run_plan
from rewardserve.service.errors import InvalidRequest
from rewardserve.service.routes import ERROR_RESPONSES, admit, json_response, serving

router = APIRouter(route_class=BoundedRoute, responses=ERROR_RESPONSES)


@router.post("/v1/verify", response_model=VerifyResponse)
async def verify(body: VerifyRequest, request: Request) -> Response:
    """A generative verifier's judgement per item (logprob or generate mode)."""
    served = serving(request, body.model, len(body.items), "verify")
    done = await run_plan(
        request,
        served,
        len(body.items),
        served.model.plan_verify,
        body.items,
        body.options,
        served.cache(scope_of(request).tenant),
    )
    response = VerifyResponse(model=body.model, results=done.results, usage=done.usage)
    return json_response(response, headers=done.timing_headers())


@router.post("/v1/rubric", response_model=RubricResponse)
async def rubric(body: RubricRequest, request: Request) -> Response:
    """Weighted criteria per item (rules, judge questions, served models' scores),
    aggregated; escalated to an expensive model where the request says."""
    admit(request, len(body.items))
    refuse_over_limit(request, rubric_work(body))
    judge = None
    if asks_judge(body):
        if body.judge is None:
            raise InvalidRequest("judge criteria need a 'judge' verifier model", param="judge")
        judge = serving(request, body.judge, len(body.items), "judge", admitted=True)
    done = await run_plan(
        request,
        judge,
        len(body.items),
        plan_rubric,
        body,
        judge.model if judge is not None else None,
        request.app.state.svc.registry.peers_for(scope_of(request).tenant),
    )
    return json_response(RubricResponse(judge=body.judge, results=done.results, usage=done.usage))


@router.post("/v1/compare", response_model=CompareResponse)
async def compare(body: CompareRequest, request: Request) -> Response:
    """Pairwise / listwise preference between each item's responses."""
    served = serving(request, body.model, sum(len(i.responses) for i in body.items), "compare")
    tenant = scope_of(request).tenant
    done = await run_plan(
        request,
        served,
        len(body.items),
        served.model.plan_compare,
        body.items,
        body.options,
        served.cache(tenant),
        request.app.state.svc.registry.peers_for(tenant),
    )
    return json_response(CompareResponse(model=body.model, results=done.results, usage=done.usage))
