"""Reward functions for TRL's ``GRPOTrainer(reward_funcs=[...])``.

    from rewardserve.client.integrations.trl import reward_function
    trainer = GRPOTrainer(model=..., reward_funcs=[
        reward_function("math", reference_column="answer"),
        reward_function("skywork"),                              # an outcome model
        reward_function("prm", endpoint="steps", aggregate="min"),
        reward_function("judge", endpoint="rubric", criteria=[...]),
    ], ...)

Each takes TRL's ``(prompts, completions, **columns)`` and returns one float per
completion; a result the service could not compute is ``None``, which TRL leaves out of
its reward sums, never a made-up 0. ``async_reward_function`` is the async twin (TRL
runs async reward functions concurrently).
"""

from __future__ import annotations

import re
from typing import Any, Callable

from rewardserve.client.async_client import AsyncRewardClient
from rewardserve.client.items import column_rows, make_item
from rewardserve.client.protocol import Item
from rewardserve.client.sync_client import RewardClient

ENDPOINTS = ("score", "steps", "verify", "rubric")


def _items(prompts: list[Any], completions: list[Any], kwargs: dict[str, Any],
           reference_column: str | None) -> list[Item]:
    rows = column_rows(kwargs, len(completions))
    return [
        make_item(p, c, row.get(reference_column) if reference_column else None, row)
        for p, c, row in zip(prompts, completions, rows)
    ]


def _call_args(model: str | None, endpoint: str,
               options: dict[str, Any]) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    if endpoint not in ENDPOINTS:
        raise ValueError(f"endpoint must be one of {ENDPOINTS}")
    if endpoint == "rubric":
        criteria = options.pop("criteria")
        return "rubric", (), {"criteria": criteria, "judge": model, "aggregation": options.pop("aggregation", None)}
    method = {"score": "score", "steps": "score_steps", "verify": "verify"}[endpoint]
    return method, (model,), options


def _name(model: str, endpoint: str, name: str | None) -> str:
    return name or re.sub(r"\W", "_", f"{model}_{endpoint}")


def reward_function(
    model: str | None,
    *,
    endpoint: str = "score",
    client: RewardClient | None = None,
    base_url: str | list[str] | None = None,
    reference_column: str | None = "reference",
    name: str | None = None,
    **options: Any,
) -> Callable[..., list[float | None]]:
    """A TRL reward function scoring with ``model`` on ``endpoint``. ``options`` go to
    the endpoint (e.g. ``activation``, ``aggregate``, ``template``; ``criteria`` and
    ``aggregation`` for rubrics, where ``model`` is the judge)."""
    client = client or RewardClient(base_url)
    method, args, kwargs = _call_args(model, endpoint, dict(options))

    def reward(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float | None]:
        items = _items(prompts, completions, columns, reference_column)
        response = getattr(client, method)(*args, items, **kwargs)
        return [r.score if r.valid else None for r in response.results]

    reward.__name__ = reward.__qualname__ = _name(model or "rubric", endpoint, name)
    return reward


def async_reward_function(
    model: str | None,
    *,
    endpoint: str = "score",
    client: AsyncRewardClient | None = None,
    base_url: str | list[str] | None = None,
    reference_column: str | None = "reference",
    name: str | None = None,
    **options: Any,
) -> Callable[..., Any]:
    """The async twin of ``reward_function``."""
    client = client or AsyncRewardClient(base_url)
    method, args, kwargs = _call_args(model, endpoint, dict(options))

    async def reward(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float | None]:
        items = _items(prompts, completions, columns, reference_column)
        response = await getattr(client, method)(*args, items, **kwargs)
        return [r.score if r.valid else None for r in response.results]

    reward.__name__ = reward.__qualname__ = _name(model or "rubric", endpoint, name)
    return reward
