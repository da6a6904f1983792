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
- vLLM ``POST /classify`` (verl's reward loop with a vLLM reward model): text already
  templated, or token ids, scored by an outcome model as vLLM scores it (special tokens
  added unless ``add_special_tokens: false``, read at the last token); ``probs`` are the
  head's values, through the classifier's activation unless ``use_activation: false``.
- SGLang-style ``POST /v1/embeddings`` for reward models (verl's reward loop with an
  SGLang reward model): the same, the raw head values as ``embedding``.
- vLLM ``POST /tokenize``: ``prompt`` (special tokens added unless
  ``add_special_tokens: false``) or ``messages`` (the chat template applied, with its
  generation prompt unless ``add_generation_prompt: false``; no special tokens added
  unless asked), tokenized with the served model's own tokenizer -> ``count``,
  ``max_model_len``, ``tokens`` (and ``token_strs`` if ``return_token_strs``). A model
  without a tokenizer (a rule) is a 422.

``model`` may be a served model's name or its source (verl sends the checkpoint path).
Neither shape has a per-input error: an input that cannot be scored fails the request,
naming it.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence
from typing import Any, cast

from fastapi import APIRouter, Query
from fastapi.responses import Response

from rewardserve.client.rows import make_item, split_query
from rewardserve.protocol import (
    ClassifyData,
    ClassifyRequest,
    ClassifyResponse,
    EmbeddingData,
    EmbeddingRequest,
    EmbeddingResponse,
    Item,
    ItemResult,
    OpenRLHFRewardRequest,
    OpenRLHFRewardResponse,
    PoolingUsage,
    RenderedInput,
    ScoreOptions,
    TokenizeRequest,
    TokenizeResponse,
)
from rewardserve.service.api._usecase import Executed
from rewardserve.service.api.peers import usecases
from rewardserve.service.api.responses import ERROR_RESPONSES, answer, json_response
from rewardserve.service.api.scoring import usecases as scoring
from rewardserve.service.context import RequestContext
from rewardserve.service.deps import Ctx
from rewardserve.service.errors import InvalidRequest
from rewardserve.service.http.body import BoundedRoute

router = APIRouter(route_class=BoundedRoute, responses=ERROR_RESPONSES)


@router.post("/get_reward", response_model=OpenRLHFRewardResponse, summary="OpenRLHF remote reward")
async def get_reward(
    body: OpenRLHFRewardRequest,
    ctx: Ctx,
    model: str | None = Query(default=None),
    invalid: float | None = Query(default=None),
) -> Response:
    """OpenRLHF's `--remote_rm_url` route: scores each query (the chat-templated prompt and its completion) with
    the model `?model=` names (else the settings' default_model, else the only model served besides the built-in
    rules) and answers `rewards` in order. A reward model scores the query text as it is; a rule gets the
    completion. A query that cannot be scored fails the request (422 naming it) unless `?invalid=` gives the
    number to send in its place."""
    if invalid is not None and not math.isfinite(invalid):
        raise InvalidRequest("?invalid must be a finite number", param="invalid")
    name = usecases.default_model(ctx, model)
    n = len(body.query)
    for field, values in (("prompts", body.prompts), ("labels", body.labels)):
        if values is not None and len(values) != n:
            raise InvalidRequest(f"{field} has {len(values)} entries for {n} queries", param=field)
    prompts: Sequence[str | None] = body.prompts or [None] * n
    labels = body.labels or [None] * n
    if usecases.takes_text(ctx, name):
        items = [Item(text=q, reference=label) for q, label in zip(body.query, labels)]
        options = ScoreOptions(truncate="right")
    else:
        items = [make_item(*split_query(q, p), reference=label) for q, p, label in zip(body.query, prompts, labels)]
        options = ScoreOptions()
    scored = await scoring.score(ctx, name, items, options)
    rewards: list[float] = []
    for index, result in enumerate(scored.results):
        if result.valid:
            rewards.append(cast(float, result.score))  # a valid result has its score
        elif invalid is not None:
            rewards.append(invalid)
        else:
            raise InvalidRequest(f"query[{index}] has no reward: {result.error}", param=f"query[{index}]")
    return answer(OpenRLHFRewardResponse(rewards=rewards, scores=rewards), scored)


def _as_items(given: RenderedInput) -> list[Item]:
    if isinstance(given, str):
        return [Item(text=given)]
    if given and isinstance(given[0], int):
        return [Item(input_ids=given)]
    if not given:
        raise InvalidRequest("input is empty", param="input")
    items = []
    for index, one in enumerate(given):
        if not one:
            raise InvalidRequest(f"input[{index}] is empty", param=f"input[{index}]")
        # A list of inputs (validated as RenderedInput): an entry not text is token ids.
        items.append(Item(text=one) if isinstance(one, str) else Item(input_ids=cast(list[int], one)))
    return items


async def _classified(
    ctx: RequestContext, named: str | None, given: RenderedInput, options: ScoreOptions
) -> tuple[str, Executed[ItemResult], PoolingUsage]:
    """(model name, results, usage) of scoring each input with an outcome model."""
    name = usecases.model_named(ctx, named)
    items = _as_items(given)
    scored = await scoring.score(ctx, name, items, options, endpoint="classify")
    for index, result in enumerate(scored.results):
        if not result.valid:
            raise InvalidRequest(f"input[{index}]: {result.error}", param=f"input[{index}]")
    tokens = scored.usage.prompt_tokens
    return name, scored, PoolingUsage(prompt_tokens=tokens, total_tokens=tokens)


def _truncation(body: ClassifyRequest) -> dict[str, Any]:
    keep = body.truncate_prompt_tokens
    if keep is None:
        return {}
    # vLLM 0.32 cuts where the tokenizer does unless told: on the right (the first N kept).
    side = "left" if body.truncation_side == "left" else "right"
    return {"truncate": side} if keep == -1 else {"truncate": side, "truncate_tokens": keep}


@router.post("/classify", response_model=ClassifyResponse, summary="vLLM /classify: classifier probabilities")
async def classify(body: ClassifyRequest, ctx: Ctx) -> Response:
    """vLLM's /classify, for outcome reward models and classifiers (verl's reward loop with a vLLM reward model):
    text already templated (or token ids), scored as vLLM scores it; `probs` are the head's values through the
    classifier's activation unless `use_activation` is false. An input that cannot be scored fails the request."""
    activate = body.use_activation if body.use_activation is not None else body.activation
    options = ScoreOptions(
        activation="none" if activate is False else "auto",
        add_special_tokens=body.add_special_tokens,
        **_truncation(body),
    )
    name, scored, usage = await _classified(ctx, body.model, body.input, options)
    data = [
        # Every result is valid (_classified refuses the others): each has its score.
        ClassifyData(
            index=i,
            label=r.label,
            probs=r.scores or [cast(float, r.score)],
            num_classes=len(r.scores or [r.score]),
        )
        for i, r in enumerate(scored.results)
    ]
    response = ClassifyResponse(
        id=f"classify-{uuid.uuid4().hex}", created=int(time.time()), model=body.model or name, data=data, usage=usage
    )
    return answer(response, scored)


@router.post("/v1/embeddings", response_model=EmbeddingResponse, summary="SGLang-style reward as an embedding")
async def embeddings(body: EmbeddingRequest, ctx: Ctx) -> Response:
    """The SGLang-style embeddings route for outcome reward models (verl's reward loop with an SGLang reward
    model): text already templated (or token ids), scored as /classify scores it, the head's raw values answered
    as each input's `embedding`. An input that cannot be scored fails the request."""
    options = ScoreOptions(activation="none", add_special_tokens=True)
    name, scored, usage = await _classified(ctx, body.model, body.input, options)
    # Every result is valid (_classified refuses the others): each has its score.
    data = [EmbeddingData(index=i, embedding=r.scores or [cast(float, r.score)]) for i, r in enumerate(scored.results)]
    return answer(EmbeddingResponse(model=body.model or name, data=data, usage=usage), scored)


@router.post("/tokenize", response_model=TokenizeResponse, response_model_exclude_none=True, summary="vLLM /tokenize")
async def tokenize(body: TokenizeRequest, ctx: Ctx) -> Response:
    """vLLM's /tokenize: a prompt, or messages rendered with the model's chat template, tokenized with the model's
    tokenizer; answers the token ids, their count and the model's context length. A model without a tokenizer
    (a rule) is a 422."""
    chat = body.messages is not None
    given = body.add_generation_prompt
    done = await usecases.tokenize(
        ctx,
        body.model,
        body.prompt,
        body.messages,
        add_special_tokens=body.add_special_tokens if body.add_special_tokens is not None else not chat,
        # vLLM's default for a chat, unless its final message is left open instead.
        add_generation_prompt=given if given is not None else chat and not body.continue_final_message,
        continue_final_message=body.continue_final_message,
        token_strs=bool(body.return_token_strs),
    )
    response = TokenizeResponse(
        count=len(done.ids), max_model_len=done.max_model_len, tokens=done.ids, token_strs=done.token_strs
    )
    return json_response(response, exclude_none=True)
