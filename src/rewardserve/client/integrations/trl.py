"""Reward functions for TRL's ``GRPOTrainer(reward_funcs=[...])``.

    from rewardserve.client.integrations.trl import reward_function
    trainer = GRPOTrainer(model=..., reward_funcs=[
        reward_function("math", reference_column="answer"),
        reward_function("skywork"),                              # an outcome model
        reward_function("prm", endpoint="steps", aggregate="min"),
        reward_function("judge", endpoint="rubric", criteria=[...]),
    ], ...)

Each takes TRL's ``(prompts, completions, **columns)`` and returns one float per
completion; a result the service could not compute is ``None`` by default, which TRL
leaves out of its reward sums, never a made-up 0 (``on_invalid``: ``"raise"``, or a
number to stand in), and the first error of each batch is logged with the counts.
Completions of one prompt form one GRPO group (``group_id``), or those sharing a
``group_column`` value: ``normalize: group`` sees TRL's groups.
``async_reward_function`` is the async twin (TRL runs async reward functions
concurrently).

``rubric_reward_functions`` hands a rubric's criteria to TRL as reward functions of
their own, so TRL logs each (``rewards/<name>/mean``), from ONE service call per batch:

    rewards = rubric_reward_functions(criteria=[...], judge="judge")
    GRPOTrainer(..., reward_funcs=rewards.functions,
                args=GRPOConfig(..., reward_weights=rewards.weights))
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rewardserve.client.aio import AsyncRewardClient
from rewardserve.client.errors import RewardServeError
from rewardserve.client.rows import column_rows, make_item, prompt_group
from rewardserve.client.sync import RewardClient
from rewardserve.protocol import Aggregation, Criterion, Item, RubricResponse, ScoreResponse

ENDPOINTS = ("score", "steps", "verify", "rubric")


log = logging.getLogger("rewardserve.trl")
OnInvalid = Literal["none", "raise"] | float


class ColumnIfPresent(str):
    """A reference column read when the dataset has it: the default, which serves
    reward models (no reference) and rules alike. A column named by the caller must
    exist, since a missing one leaves every item without its reference."""


REFERENCE_IF_PRESENT = ColumnIfPresent("reference")


def _items(
    prompts: list[Any],
    completions: list[Any],
    kwargs: dict[str, Any],
    reference_column: str | None,
    group_column: str | None = None,
) -> list[Item]:
    rows = column_rows(kwargs, len(completions))
    if reference_column and not isinstance(reference_column, ColumnIfPresent) and rows:
        present = sorted(rows[0])
        if reference_column not in present:
            raise KeyError(
                f"reference_column {reference_column!r} is not among the dataset's columns {present} "
                "(TRL passes each dataset column but prompt and completion as a list per completion)"
            )
    return [
        make_item(
            p,
            c,
            row.get(reference_column) if reference_column else None,
            row,
            group_id=str(row[group_column]) if group_column and group_column in row else prompt_group(p),
        )
        for p, c, row in zip(prompts, completions, rows)
    ]


def rewards_of(results: Sequence[Any], on_invalid: OnInvalid, name: str) -> list[float | None]:
    """Each result's score; an invalid one as ``on_invalid`` says, the first error of the
    batch logged with the counts (TRL shows nothing of why a reward is missing)."""
    bad = [r for r in results if not r.valid]
    if bad:
        message = (
            f"{name}: {len(bad)} of {len(results)} completions have no reward; the first: {bad[0].error or 'invalid'}"
        )
        if on_invalid == "raise":
            raise RewardServeError(message)
        log.warning(message)
    stand_in = None if on_invalid in ("none", "raise") else float(on_invalid)
    return [r.score if r.valid else stand_in for r in results]


def _call_args(
    model: str | None, endpoint: str, options: dict[str, Any]
) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
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
    reference_column: str | None = REFERENCE_IF_PRESENT,
    group_column: str | None = None,
    on_invalid: OnInvalid = "none",
    name: str | None = None,
    **options: Any,
) -> Callable[..., list[float | None]]:
    """A TRL reward function scoring with ``model`` on ``endpoint``. ``options`` go to
    the endpoint (e.g. ``activation``, ``aggregate``, ``template``; ``criteria`` and
    ``aggregation`` for rubrics, where ``model`` is the judge)."""
    client = client or RewardClient(base_url)
    method, args, kwargs = _call_args(model, endpoint, dict(options))
    label = _name(model or "rubric", endpoint, name)

    def reward(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float | None]:
        items = _items(prompts, completions, columns, reference_column, group_column)
        response = getattr(client, method)(*args, items, **kwargs)
        return rewards_of(response.results, on_invalid, label)

    reward.__name__ = reward.__qualname__ = label
    return reward


def async_reward_function(
    model: str | None,
    *,
    endpoint: str = "score",
    client: AsyncRewardClient | None = None,
    base_url: str | list[str] | None = None,
    reference_column: str | None = REFERENCE_IF_PRESENT,
    group_column: str | None = None,
    on_invalid: OnInvalid = "none",
    name: str | None = None,
    **options: Any,
) -> Callable[..., Any]:
    """The async twin of ``reward_function``."""
    client = client or AsyncRewardClient(base_url)
    method, args, kwargs = _call_args(model, endpoint, dict(options))
    label = _name(model or "rubric", endpoint, name)

    async def reward(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float | None]:
        items = _items(prompts, completions, columns, reference_column, group_column)
        response = await getattr(client, method)(*args, items, **kwargs)
        return rewards_of(response.results, on_invalid, label)

    reward.__name__ = reward.__qualname__ = label
    return reward


@dataclass
class RubricRewards:
    """TRL reward functions for a rubric and the ``reward_weights`` that make TRL's
    weighted sum the rubric's reward: with a weighted mean (and no escalation), one
    function per criterion weighted by its share; otherwise the rubric's reward first
    (weight 1) and each criterion beside it, logged only (weight 0)."""

    functions: list[Callable[..., Any]]
    weights: list[float]


def _fingerprint(prompts: list[Any], completions: list[Any], items: list[Item]) -> bytes:
    return hashlib.blake2b(repr((prompts, completions, [i.reference for i in items])).encode(), digest_size=16).digest()


def _columns(response: RubricResponse | ScoreResponse, names: list[str]) -> dict[str, list[float | None]]:
    """Per component, the scores of the items whose reward is valid; an invalid item is
    None in every column, as the single reward function gives it ("": the reward)."""
    columns: dict[str, list[float | None]] = {name: [] for name in ["", *names]}
    for result in response.results:
        components = result.components or {}
        for name in names:
            columns[name].append(components.get(name) if result.valid else None)
        columns[""].append(result.score if result.valid else None)
    return columns


def _shared_calls(
    client: RewardClient | AsyncRewardClient,
    call: Callable[[Any, list[Item]], Any],
    names: list[str],
    reference_column: str | None,
    prefix: str,
    group_column: str | None = None,
    on_invalid: OnInvalid = "none",
) -> Callable[[str, str], Callable[..., Any]]:
    """A maker of reward functions that read one column each of ONE service call per
    batch (``call(client, items)``), made by whichever function TRL calls first (which
    also logs the batch's first error, once). An invalid item is ``on_invalid`` in every
    column: None, a stand-in value, or every function raises."""
    last: dict[str, Any] = {}  # the batch's fingerprint and what its call gave
    label = prefix or "rewardserve"

    def answered(response: Any) -> Any:
        if on_invalid == "raise":
            rewards_of(response.results, "raise", label)
        elif not last.get("logged"):
            last["logged"] = True
            rewards_of(response.results, "none", label)
        return response

    def column_of(response: Any, column: str) -> list[float | None]:
        values = _columns(response, names)[column]
        if on_invalid in ("none", "raise"):
            return values
        return [v if r.valid else float(on_invalid) for r, v in zip(response.results, values)]

    def make(column: str, name: str) -> Callable[..., Any]:
        if isinstance(client, AsyncRewardClient):

            async def reward_async(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float | None]:
                items = _items(prompts, completions, columns, reference_column, group_column)
                key = _fingerprint(prompts, completions, items)
                if last.get("key") != key:
                    last.update(key=key, call=asyncio.ensure_future(call(client, items)), logged=False)
                return column_of(answered(await last["call"]), column)

            fn: Callable[..., Any] = reward_async
        else:

            def reward(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float | None]:
                items = _items(prompts, completions, columns, reference_column, group_column)
                key = _fingerprint(prompts, completions, items)
                if last.get("key") != key:
                    last.update(key=key, call=call(client, items), logged=False)
                return column_of(answered(last["call"]), column)

            fn = reward
        fn.__name__ = fn.__qualname__ = re.sub(r"\W", "_", prefix + name)
        return fn

    return make


def rubric_reward_functions(
    *,
    criteria: Sequence[Criterion | Mapping[str, Any]],
    judge: str | None = None,
    aggregation: Aggregation | Mapping[str, Any] | None = None,
    escalate: Mapping[str, Any] | None = None,
    client: RewardClient | AsyncRewardClient | None = None,
    base_url: str | list[str] | None = None,
    reference_column: str | None = REFERENCE_IF_PRESENT,
    group_column: str | None = None,
    prefix: str = "",
    on_invalid: OnInvalid = "none",
) -> RubricRewards:
    """One TRL reward function per criterion (named ``prefix + name``), sharing one
    ``/v1/rubric`` call per batch. With an ``AsyncRewardClient`` the functions are
    coroutines (TRL gathers them; they still make one call)."""
    checked = [c if isinstance(c, Criterion) else Criterion.model_validate(c) for c in criteria]
    names = [c.name for c in checked]
    mode = (
        aggregation.mode if isinstance(aggregation, Aggregation) else (aggregation or {}).get("mode")
    ) or "weighted_mean"
    split = mode == "weighted_mean" and escalate is None

    def call(on: Any, items: list[Item]) -> Any:
        return on.rubric(items, criteria=checked, judge=judge, aggregation=aggregation, escalate=escalate)

    make = _shared_calls(
        client or RewardClient(base_url), call, names, reference_column, prefix, group_column, on_invalid
    )
    components = [make(name, name) for name in names]
    if split:
        total = sum(c.weight for c in checked)
        return RubricRewards(components, [c.weight / total for c in checked])
    return RubricRewards([make("", "rubric"), *components], [1.0] + [0.0] * len(names))


def ensemble_reward_functions(
    model: str,
    *,
    members: Sequence[str],
    client: RewardClient | AsyncRewardClient | None = None,
    base_url: str | list[str] | None = None,
    reference_column: str | None = REFERENCE_IF_PRESENT,
    group_column: str | None = None,
    prefix: str = "",
    on_invalid: OnInvalid = "none",
) -> RubricRewards:
    """An ensemble's reward (named ``prefix + model``, weight 1) and each member's score
    beside it (weight 0: logged only), from ONE ``/v1/score`` call per batch."""
    names = list(members)

    def call(on: Any, items: list[Item]) -> Any:
        return on.score(model, items)

    make = _shared_calls(
        client or RewardClient(base_url), call, names, reference_column, prefix, group_column, on_invalid
    )
    return RubricRewards([make("", model), *(make(name, name) for name in names)], [1.0] + [0.0] * len(names))
