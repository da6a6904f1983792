"""Routes other projects call, so their trainers need no code change.

- OpenRLHF ``POST /get_reward``: ``{"query", "prompts", "labels"}`` -> ``{"rewards",
  "scores", "extra_logs"}``. The model is ``?model=NAME``, else the settings'
  ``default_model``, else the only model served besides the built-in rules. A query is
  the policy's chat-templated prompt + its decoded completion. A reward model scores the
  query text as it is, as OpenRLHF's own server does (openrlhf/cli/serve_rm.py, 0.11.2:
  tokenized without adding special tokens, cut on the right at the model's context, read
  at the last token). A rule model gets the completion: the prompt prefix is cut off
  when present. OpenRLHF has no way to
  say "no reward", so an item the service cannot score fails the request (422 naming it)
  unless ``?invalid=<number>`` names a stand-in.
"""

from __future__ import annotations

import math

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from rewardserve.client.integrations._items import make_item
from rewardserve.client.integrations.openrlhf import split_query
from rewardserve.client.protocol import Item, OpenRLHFRewardRequest, OpenRLHFRewardResponse, ScoreOptions
from rewardserve.service.body import BoundedRoute
from rewardserve.service.errors import InvalidRequest
from rewardserve.service.routes import ERROR_RESPONSES, json_response, serving
from rewardserve.service.scoring import score_items
from rewardserve.service.settings import BUILTIN_RULES

router = APIRouter(route_class=BoundedRoute, responses=ERROR_RESPONSES)


def default_model(request: Request, named: str | None) -> str:
    if named:
        return named
    svc = request.app.state.svc
    if svc.settings.default_model:
        return svc.settings.default_model
    builtin = {s.name for s in BUILTIN_RULES}
    mine = [s.model.name for s in svc.registry if s.model.name not in builtin]
    if len(mine) == 1:
        return mine[0]
    raise InvalidRequest("name the model: ?model=NAME (or set REWARDSERVE_DEFAULT_MODEL)", param="model")


@router.post("/get_reward", response_model=OpenRLHFRewardResponse)
async def get_reward(
    body: OpenRLHFRewardRequest,
    request: Request,
    model: str | None = Query(default=None),
    invalid: float | None = Query(default=None),
) -> Response:
    if invalid is not None and not math.isfinite(invalid):
        raise InvalidRequest("?invalid must be a finite number", param="invalid")
    name = default_model(request, model)
    n = len(body.query)
    for field, values in (("prompts", body.prompts), ("labels", body.labels)):
        if values is not None and len(values) != n:
            raise InvalidRequest(f"{field} has {len(values)} entries for {n} queries", param=field)
    prompts = body.prompts or [None] * n
    labels = body.labels or [None] * n
    served = serving(request, name, n, "score")
    if "text" in served.model.inputs:
        items = [Item(text=q, reference=label) for q, label in zip(body.query, labels)]
        options = ScoreOptions(truncate="right")
    else:
        items = [make_item(*split_query(q, p), reference=label) for q, p, label in zip(body.query, prompts, labels)]
        options = ScoreOptions()
    scored = await score_items(request, served, items, options)
    rewards = []
    for index, result in enumerate(scored.results):
        if result.valid:
            rewards.append(result.score)
        elif invalid is not None:
            rewards.append(invalid)
        else:
            raise InvalidRequest(f"query[{index}] has no reward: {result.error}", param=f"query[{index}]")
    response = OpenRLHFRewardResponse(rewards=rewards, scores=rewards)
    return json_response(response, headers=scored.timing_headers())
