"""Judge-backed routes: POST /v1/verify, /v1/rubric, /v1/compare.

A rubric item's rule criteria run in the rule pools (worker processes with time and
memory limits, shared fairly between requests) while its judge criteria go to the
verifier's batcher as one unit, so the item's shared context is computed once for all
of them.
"""

from __future__ import annotations

import asyncio
import math

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from rewardserve.client.protocol import (
    CompareRequest,
    CompareResponse,
    CompareResult,
    Criterion,
    CriterionResult,
    Item,
    ItemResult,
    RubricItem,
    RubricRequest,
    RubricResponse,
    RubricResult,
    ScoreOptions,
    Usage,
    VerifyRequest,
    VerifyResponse,
    VerifyResult,
)
from rewardserve.models.reward_model import ItemError, RequestError
from rewardserve.models.plans.rubric import aggregate, call_outcome, check_criteria, criterion_result, plan_criteria
from rewardserve.models.rules.isolation import PoolBusy
from rewardserve.service.admission import scope_of
from rewardserve.service.body import BoundedRoute
from rewardserve.service.errors import Overloaded, from_request_error
from rewardserve.service.routes import ERROR_RESPONSES, admit, json_response, serving
from rewardserve.service.dispatch import compute, score_items, until_done_or_gone

router = APIRouter(route_class=BoundedRoute, responses=ERROR_RESPONSES)


@router.post("/v1/verify", response_model=VerifyResponse)
async def verify(body: VerifyRequest, request: Request) -> Response:
    """A generative verifier's judgement per item (logprob or generate mode)."""
    served = serving(request, body.model, len(body.items), "verify")
    scored = await score_items(request, served, body.items, body.options)
    results = [r if isinstance(r, VerifyResult) else VerifyResult(**r.model_dump()) for r in scored.results]
    response = VerifyResponse(model=body.model, results=results, usage=scored.usage)
    return json_response(response, headers=scored.timing_headers())


# --------------------------------------------------------------------------- rubric


@router.post("/v1/rubric", response_model=RubricResponse)
async def rubric(body: RubricRequest, request: Request) -> Response:
    """Weighted criteria per item, rules and judge questions, aggregated."""
    admit(request, len(body.items))
    criteria, params = [], []
    for index, item in enumerate(body.items):
        own = item.criteria if item.criteria is not None else body.criteria
        param = f"items[{index}].criteria" if item.criteria is not None else "criteria"
        if own is None:
            raise from_request_error(RequestError("no criteria: give 'criteria' for the request or the item", param=param))
        try:
            check_criteria(own, body.aggregation, param)
        except RequestError as exc:
            raise from_request_error(exc) from exc
        criteria.append(own)
        params.append(param)
    needs_judge = any(c.text is not None for own in criteria for c in own)
    served = None
    if needs_judge:
        if body.judge is None:
            raise from_request_error(RequestError("judge criteria need a 'judge' verifier model", param="judge"))
        served = serving(request, body.judge, len(body.items), "judge")
    try:
        plan = await run_in_threadpool(plan_criteria, body.items, criteria, params)
    except RequestError as exc:
        raise from_request_error(exc) from exc
    rules = asyncio.ensure_future(_pool_results(request, plan.rule_calls))
    try:
        judged, usage = await _run_judges(request, served, body, criteria, params, plan) if needs_judge else ({}, Usage())
        rule_values = await rules
    finally:
        rules.cancel()
    outcomes: dict = {key: (error, None) for key, error in plan.failed.items()}
    try:
        for key, value in zip(plan.rule_keys, rule_values):
            criterion = criteria[key[0]][key[1]]
            outcomes[key] = (call_outcome(key, value, criterion.fn, f"{params[key[0]]}[{key[1]}].args"), None)
    except RequestError as exc:
        raise from_request_error(exc) from exc
    outcomes.update(judged)
    results = []
    for index, (item, own) in enumerate(zip(body.items, criteria)):
        per = [criterion_result(c, *outcomes[(index, k)]) for k, c in enumerate(own)]
        results.append(_item_result(item, own, per, body))
    usage = usage.model_copy(update={"items": len(body.items)})
    return json_response(RubricResponse(judge=body.judge, results=results, usage=usage))


async def _pool_results(request: Request, calls: list) -> list:
    """Run calls in the rule pools for this request; 429 when the pools are full."""
    if not calls:
        return []
    try:
        future = request.app.state.svc.rule_runner.run(calls, scope_of(request))
    except PoolBusy as exc:
        raise Overloaded(f"the rule pools are at capacity ({exc}); retry shortly", retry_after_s=1) from exc
    (values,) = await until_done_or_gone(scope_of(request), [asyncio.wrap_future(future)])
    return values


def _item_result(item: RubricItem, criteria: list[Criterion], per: list[CriterionResult], body) -> RubricResult:
    bad = [r.name for r in per if not r.valid]
    if bad:
        return RubricResult(id=item.id, valid=False, score=None, criteria=per,
                            error=f"criteria could not be scored: {', '.join(bad)}")
    try:
        score = aggregate(criteria, per, body.aggregation)
    except ValueError as exc:
        return RubricResult(id=item.id, valid=False, score=None, criteria=per, error=str(exc))
    return RubricResult(id=item.id, score=score, criteria=per)


async def _run_judges(request, served, body: RubricRequest, criteria, params, plan) -> tuple[dict, Usage]:
    """One judge unit per item (all its judge criteria on one shared prefix)."""
    model = served.model
    texts: dict = dict(plan.texts)
    rendered = await _pool_results(request, plan.render_calls)
    try:
        for key, value in zip(plan.render_keys, rendered):
            texts[key] = call_outcome(key, value, None, f"{params[key[0]]}[{key[1]}].text")
    except RequestError as exc:
        raise from_request_error(exc) from exc
    try:
        plans = await run_in_threadpool(_judge_prompts, model, body, criteria, params, texts)
    except RequestError as exc:
        raise from_request_error(exc) from exc
    judged: dict = {}
    works, owners = [], []
    for index, (keys, prompts, choices, failed) in enumerate(plans):
        judged.update({key: (error, None) for key, error in failed.items()})
        if keys:
            works.append(model.prepare_judge(prompts, choices))
            owners.append(keys)
    outcomes = await compute(request, served, works)
    for keys, outcome in zip(owners, outcomes):
        results = outcome.result if isinstance(outcome.result, list) else [outcome.result] * len(keys)
        for key, result in zip(keys, results):
            if isinstance(result, ItemError):
                judged[key] = (result, None)
            else:
                judged[key] = (result.score, f"{result.verdict} ({result.probabilities[result.verdict]:.3f})")
    return judged, Usage(prompt_tokens=sum(w.prompt_tokens for w in works))


def _judge_prompts(model, body: RubricRequest, criteria, params, texts: dict):
    """Per item: the keys, prompts and choices of its judge criteria, and the criteria
    that failed (a text the item could not fill, a prompt over the model's limit)."""
    from rewardserve.models.text.judge_templates import item_variables

    plans = []
    for index, (item, own) in enumerate(zip(body.items, criteria)):
        keys, prompts, choices, failed = [], [], [], {}
        variables = None
        for k, c in enumerate(own):
            if c.text is None:
                continue
            text = texts[(index, k)]
            if isinstance(text, ItemError):
                failed[(index, k)] = text
                continue
            try:
                variables = variables if variables is not None else item_variables(item)
                if c.choices is None:  # the judge template's own verdicts (Yes / No)
                    template = model.template(body.judge_template)
                    choice = model.template_choices(template)
                else:  # ordered best first, valued 1 down to 0
                    template = model.template("criterion_choices")
                    n = len(c.choices)
                    try:
                        choice = model.choices(c.choices, [[x, " " + x] for x in c.choices],
                                               [1.0 - i / (n - 1) for i in range(n)])
                    except RequestError as exc:
                        raise RequestError(exc.message, param=f"{params[index]}[{k}].choices") from exc
                prefill = template.logprob_prefill if template.logprob_prefill is not None else template.prefill
                variables_k = {**variables, "criterion": text, "choices": c.choices or []}
                prompts.append(model.encode_prompt(template, variables_k, prefill))
                choices.append(choice)
                keys.append((index, k))
            except ItemError as exc:
                failed[(index, k)] = exc
        plans.append((keys, prompts, choices, failed))
    return plans


# --------------------------------------------------------------------------- compare


@router.post("/v1/compare", response_model=CompareResponse)
async def compare(body: CompareRequest, request: Request) -> Response:
    """Pairwise / listwise preference: Bradley-Terry from an outcome model's scores, or a
    judge run on every ordered pair (both orders averaged: no position bias)."""
    served = serving(request, body.model, sum(len(i.responses) for i in body.items), "compare")
    if "verify" in served.model.endpoints:
        results, usage = await _compare_by_judge(request, served, body)
    else:
        results, usage = await _compare_by_scores(request, served, body)
    return json_response(CompareResponse(model=body.model, results=results, usage=usage))


def _preference_result(item_id, scores, preference) -> CompareResult:
    ranking = sorted(range(len(scores)), key=lambda i: -scores[i])
    return CompareResult(id=item_id, scores=scores, preference=preference, ranking=ranking)


async def _compare_by_scores(request, served, body: CompareRequest):
    flat = [Item(prompt=it.prompt, response=r, reference=it.reference) for it in body.items for r in it.responses]
    scored = await score_items(request, served, flat, ScoreOptions())
    results, at = [], 0
    for item in body.items:
        chunk: list[ItemResult] = scored.results[at : at + len(item.responses)]
        at += len(item.responses)
        bad = [r.error for r in chunk if not r.valid]
        if bad:
            results.append(CompareResult(id=item.id, valid=False, error=bad[0]))
            continue
        s = [r.score for r in chunk]
        preference = [[1.0 / (1.0 + math.exp(s[j] - s[i])) if i != j else 0.5 for j in range(len(s))]
                      for i in range(len(s))]
        results.append(_preference_result(item.id, s, preference))
    return results, scored.usage


async def _compare_by_judge(request, served, body: CompareRequest):
    model = served.model
    template_name = body.options.template or "prometheus_relative"

    def plan(item):
        template = model.template(template_name)
        base = Item(prompt=item.prompt, response=item.responses[0], reference=item.reference)
        variables = {"responses": item.responses, **body.options.variables}
        from rewardserve.models.text.judge_templates import item_variables

        variables = item_variables(base, variables)
        prefill = template.logprob_prefill if template.logprob_prefill is not None else template.prefill
        pairs = [(i, j) for i in range(len(item.responses)) for j in range(len(item.responses)) if i != j]
        prompts = [model.encode_prompt(template, {**variables, "response_a": item.responses[i],
                                                  "response_b": item.responses[j]}, prefill)
                   for i, j in pairs]
        choices = model.template_choices(template)
        return pairs, model.prepare_judge(prompts, [choices] * len(prompts))

    try:
        plans = await run_in_threadpool(lambda: [_try(plan, it) for it in body.items])
    except RequestError as exc:
        raise from_request_error(exc) from exc
    ready = [p for p in plans if not isinstance(p, ItemError)]
    outcomes = iter(await compute(request, served, [work for _, work in ready]))
    results = []
    for item, planned in zip(body.items, plans):
        if isinstance(planned, ItemError):
            results.append(CompareResult(id=item.id, valid=False, error=str(planned)))
            continue
        pairs, _ = planned
        verdicts = next(outcomes).result
        verdicts = verdicts if isinstance(verdicts, list) else [verdicts] * len(pairs)
        bad = [v for v in verdicts if isinstance(v, ItemError)]
        if bad:
            results.append(CompareResult(id=item.id, valid=False, error=str(bad[0])))
            continue
        n = len(item.responses)
        p_first = {pair: v.score for pair, v in zip(pairs, verdicts)}  # P(A) = P(i better)
        preference = [[0.5 if i == j else (p_first[(i, j)] + 1.0 - p_first[(j, i)]) / 2.0
                       for j in range(n)] for i in range(n)]
        scores = [sum(preference[i][j] for j in range(n) if j != i) / (n - 1) for i in range(n)]
        results.append(_preference_result(item.id, scores, preference))
    return results, Usage(items=len(body.items), prompt_tokens=sum(w.prompt_tokens for _, w in ready))


def _try(fn, *args):
    try:
        return fn(*args)
    except ItemError as exc:
        return exc
