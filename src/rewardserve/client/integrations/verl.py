"""verl reward functions (``custom_reward_function.path`` / ``.name`` in verl's config).

    custom_reward_function:
      path: <site-packages>/rewardserve/client/integrations/verl.py
      name: compute_score            # or compute_score_batch with the batch reward manager
      reward_kwargs: {model: math, base_url: "http://rm:8000"}

verl calls ``compute_score(data_source, solution_str, ground_truth, extra_info)``; the
reward is the service's score for the response against the ground truth. A result the
service could not compute raises (verl has no "missing reward"), unless you choose a
stand-in with ``invalid_score``.

With ``components: true`` the function returns verl's dict form, ``{"score": ...,
<name>: ...}``: a rubric's criteria (``endpoint: rubric``, ``criteria`` in the
reward_kwargs, ``model`` the judge) or an ensemble's members, each by name, which verl
collects into ``reward_extra_info`` (and its GDPO reward manager normalises one by one).
A component that could not be scored is NaN there.

verl's reward-loop managers (naive, dapo) call once per sample and await the function
when it is a coroutine function: name ``compute_score_async`` there, so calls share one
event loop and one connection pool instead of a thread each. The keywords verl adds when
it also serves a reward model (``reward_router_address``, ``reward_model_tokenizer``)
are accepted and not sent to the service.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import weakref
from typing import Any

from rewardserve.client.aio import AsyncRewardClient
from rewardserve.client.errors import RewardServeError
from rewardserve.client.rows import make_item
from rewardserve.client.sync import RewardClient
from rewardserve.protocol import Item, RubricResponse, ScoreResponse, StepsResponse, VerifyResponse

# What verl passes beside the sample (verl 0.9.1, experimental/reward_loop/reward_manager/
# naive.py and dapo.py), which is not a scoring option.
VERL_KEYWORDS = ("reward_router_address", "reward_model_tokenizer")

Answer = ScoreResponse | StepsResponse | VerifyResponse | RubricResponse

_clients: dict[tuple[str | None, str | None], RewardClient] = {}
_async_clients: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str | None, str | None], AsyncRewardClient]
] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _client(base_url: str | None, api_key: str | None) -> RewardClient:
    key = (base_url, api_key)
    with _lock:  # one pooled client per service, made on first use
        if key not in _clients:
            _clients[key] = RewardClient(base_url, api_key=api_key)
        return _clients[key]


def _prompt(extra_info: Any) -> str | None:
    if isinstance(extra_info, dict):
        for key in ("question", "prompt", "problem"):
            value = extra_info.get(key)
            if isinstance(value, str):
                return value
    return None


def compute_score_batch(
    data_sources: list[str],
    solution_strs: list[str],
    ground_truths: list[Any],
    extra_infos: list[Any] | None = None,
    *,
    model: str | None = None,
    endpoint: str = "score",
    base_url: str | None = None,
    api_key: str | None = None,
    invalid_score: float | None = None,
    components: bool = False,
    **options: Any,
) -> list[Any]:
    """One call for a whole batch (verl's batch reward manager)."""
    model, items, options = _request(data_sources, solution_strs, ground_truths, extra_infos, model, options)
    client = _client(base_url, api_key)
    response: Answer
    if endpoint == "steps":
        response = client.score_steps(model, items, **options)
    elif endpoint == "verify":
        response = client.verify(model, items, **options)
    elif endpoint == "rubric":
        response = client.rubric(items, judge=model if model != "rubric" else None, **options)
    else:
        response = client.score(model, items, **options)
    return _scores(response, data_sources, invalid_score, components)


async def compute_score_batch_async(
    data_sources: list[str],
    solution_strs: list[str],
    ground_truths: list[Any],
    extra_infos: list[Any] | None = None,
    *,
    model: str | None = None,
    endpoint: str = "score",
    base_url: str | None = None,
    api_key: str | None = None,
    invalid_score: float | None = None,
    components: bool = False,
    **options: Any,
) -> list[Any]:
    """``compute_score_batch`` as a coroutine."""
    model, items, options = _request(data_sources, solution_strs, ground_truths, extra_infos, model, options)
    client = _async_client(base_url, api_key)
    response: Answer
    if endpoint == "steps":
        response = await client.score_steps(model, items, **options)
    elif endpoint == "verify":
        response = await client.verify(model, items, **options)
    elif endpoint == "rubric":
        response = await client.rubric(items, judge=model if model != "rubric" else None, **options)
    else:
        response = await client.score(model, items, **options)
    return _scores(response, data_sources, invalid_score, components)


def _request(
    data_sources: list[str],
    solution_strs: list[str],
    ground_truths: list[Any],
    extra_infos: list[Any] | None,
    model: str | None,
    options: dict[str, Any],
) -> tuple[str, list[Item], dict[str, Any]]:
    model = model or os.environ.get("REWARDSERVE_MODEL", "math")
    extra_infos = extra_infos or [None] * len(solution_strs)
    items = [
        make_item(_prompt(info), solution, truth, {"data_source": source})
        for source, solution, truth, info in zip(data_sources, solution_strs, ground_truths, extra_infos)
    ]
    return model, items, {k: v for k, v in options.items() if k not in VERL_KEYWORDS}


def _async_client(base_url: str | None, api_key: str | None) -> AsyncRewardClient:
    # A client's connection pool belongs to the event loop it was made on: one per loop,
    # forgotten with the loop.
    with _lock:
        mine = _async_clients.setdefault(asyncio.get_running_loop(), {})
        if (base_url, api_key) not in mine:
            mine[(base_url, api_key)] = AsyncRewardClient(base_url, api_key=api_key)
        return mine[(base_url, api_key)]


def _scores(
    response: Answer, data_sources: list[str], invalid_score: float | None, components: bool = False
) -> list[Any]:
    scores: list[Any] = []
    for index, result in enumerate(response.results):
        if result.valid and result.score is not None:
            score = result.score
        elif invalid_score is not None:
            score = invalid_score
        else:
            raise RewardServeError(f"no reward for item {index} ({data_sources[index]}): {result.error}")
        if components:
            parts = {name: math.nan if value is None else value for name, value in (result.components or {}).items()}
            scores.append({"score": score, **parts})
        else:
            scores.append(score)
    return scores


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any) -> Any:
    """verl's per-sample signature."""
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info], **kwargs)[0]


async def compute_score_async(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any
) -> Any:
    """verl's per-sample signature as a coroutine, for its reward-loop managers."""
    return (await compute_score_batch_async([data_source], [solution_str], [ground_truth], [extra_info], **kwargs))[0]
