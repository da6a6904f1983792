"""Agent trajectories: step rewards and the trajectory reward in one call, placed on
tokens for per-token advantages.

    rewards = trajectory_rewards(client, "prm", messages, outcome_model="skywork", shaping="delta")
    text = templated(tokenizer, messages)
    per_token = token_rewards(text.offsets, step_ends(rewards.spans, text.message_starts), rewards.step_rewards)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rewardserve.client.sync import RewardClient
from rewardserve.protocol import StepSpan, StepsResult


@dataclass
class TrajectoryRewards:
    # One per assistant turn (None: not scored): the shaped rewards when ``shaping`` asked
    # for them (delta, group), else the step scores.
    step_rewards: list[float | None]
    spans: list[StepSpan]  # where each step is: message index and character offsets
    reward: float | None  # the outcome model's score, else the PRM's aggregate
    steps: StepsResult


def trajectory_rewards(
    client: RewardClient,
    prm_model: str,
    messages: list[Mapping[str, Any]],
    *,
    outcome_model: str | None = None,
    **step_options: Any,
) -> TrajectoryRewards:
    """Step rewards from a process model (one per assistant turn; tool calls and
    results stay context) and the trajectory reward (from ``outcome_model`` when given,
    else the PRM's aggregate)."""
    item = {"messages": list(messages)}
    step_options.setdefault("steps_from", "turns")
    (steps,) = client.score_steps(prm_model, [item], **step_options).results
    reward = steps.score if steps.valid else None
    if outcome_model is not None:
        (outcome,) = client.score(outcome_model, [item]).results
        reward = outcome.score if outcome.valid else None
    shaped = steps.step_rewards if steps.step_rewards is not None else steps.step_scores
    rewards = list(shaped) if steps.valid else []
    return TrajectoryRewards(rewards, list(steps.spans), reward, steps)


@dataclass
class TemplatedTrajectory:
    text: str  # the conversation as the tokenizer's chat template writes it
    offsets: list[tuple[int, int]]  # each token's (start, end) characters in ``text``
    message_starts: dict[int | None, int]  # where each message's content starts in ``text``


def templated(tokenizer: Any, messages: list[Mapping[str, Any]], **template_kwargs: Any) -> TemplatedTrajectory:
    """The trainer's own text of ``messages`` (the tokenizer's chat template), its token
    offsets, and where each message's content starts: what ``step_ends`` and
    ``token_rewards`` need. ``tokenizer`` is a transformers fast tokenizer."""
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, **template_kwargs)
    starts: dict[int | None, int] = {}
    at = 0
    for index, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, str) or not content:
            continue
        found = text.find(content, at)
        if found < 0:
            raise ValueError(f"messages[{index}]: its content is not in the templated text as written")
        starts[index] = found
        at = found + len(content)
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return TemplatedTrajectory(text, [tuple(o) for o in encoded["offset_mapping"]], starts)


def step_ends(spans: list[StepSpan], message_starts: Mapping[int | None, int]) -> list[int]:
    """Each step's last character in the trainer's own text, given where each message's
    content starts in it (``message_starts[index]``; ``None`` for a plain response)."""
    return [message_starts[span.message] + span.end - 1 for span in spans]


def token_rewards(offsets: list[tuple[int, int]], ends: list[int], rewards: list[float | None]) -> list[float]:
    """A reward per token: each step's reward on the token holding the step's last
    character (the usual process-reward placement), 0 elsewhere. ``offsets`` are the
    tokenizer's (start, end) character offsets."""
    out = [0.0] * len(offsets)
    for end, reward in zip(ends, rewards):
        if reward is None:
            continue
        for index, (start, stop) in enumerate(offsets):
            if start <= end < stop:
                out[index] += reward
                break
    return out
