"""GRPO-style normalisation within groups of items (``group_id``), on finished results:
an outcome advantage per item, or process advantages per step."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable

from rewardserve.protocol import Item, ItemResult, StepsResult

GROUP_EPS = 1e-6


def normalized(values: list[float]) -> list[float]:
    """(v - mean) / (std + 1e-6), with the sample standard deviation (torch's and TRL's
    default); a single value normalises to 0."""
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return [(v - mean) / (std + GROUP_EPS) for v in values]


def group_keys(items: list[Item]) -> list[Hashable]:
    """Each item's group: its group_id, or a group of its own."""
    return [it.group_id if it.group_id is not None else ("", i) for i, it in enumerate(items)]


def _valid_groups(items: list[Item], results: list[ItemResult]) -> list[list[int]]:
    members: dict[Hashable, list[int]] = {}
    for index, (key, result) in enumerate(zip(group_keys(items), results)):
        if result.valid and result.score is not None:
            members.setdefault(key, []).append(index)
    return list(members.values())


def singleton_groups(items: list[Item], what: str) -> str | None:
    """The warning for group normalization that sees no group: every item alone in its
    group (no group_id, or a different one each), so every advantage is 0."""
    named = [item.group_id for item in items if item.group_id is not None]
    if len(set(named)) < len(named):  # some group has two items or more
        return None
    return (
        f"{what}: each of the {len(items)} item(s) is a group of its own, so every advantage is 0; "
        "give the completions of one prompt the same group_id"
        " (the TRL adapters in rewardserve.client.integrations.trl do)"
    )


def group_advantages(items: list[Item], results: list[ItemResult]) -> list[ItemResult]:
    """GRPO advantages over the valid scores of each group. An item without a group_id is
    a group of one (advantage 0); an invalid item gets none."""
    out = list(results)
    for members in _valid_groups(items, results):
        scores = [results[i].score for i in members]
        for i, advantage in zip(members, normalized([s for s in scores if s is not None])):
            out[i] = out[i].model_copy(update={"advantage": advantage})
    return out


def delta_rewards(scores: list[float | None]) -> list[float | None]:
    """s_t - s_(t-1) with s_(-1) = 0: the rewards telescope to the last score."""
    out: list[float | None] = []
    previous = 0.0
    for s in scores:
        if s is None:
            out.append(None)
            continue
        out.append(s - previous)
        previous = s
    return out


def potential_rewards(scores: list[float | None], gamma: float = 1.0) -> list[float | None]:
    """Potential-based shaping with the step scores as the potential: gamma * Phi(after
    step t) - Phi(before it), Phi of the start and of the end 0. Their sum discounted by
    gamma telescopes to 0, so added to an outcome reward they leave every trajectory's
    return, and so the best policy, as they were. An unscored step gets None, and the
    next scored step is shaped from the last potential seen."""
    out: list[float | None] = []
    last = max((t for t, s in enumerate(scores) if s is not None), default=-1)
    before = 0.0
    for t, s in enumerate(scores):
        if s is None:
            out.append(None)
            continue
        after = 0.0 if t == last else s
        out.append(gamma * after - before)
        before = after
    return out


def group_process_advantages(groups: list[list[list[float | None]]]) -> list[list[list[float | None]]]:
    """GRPO process supervision: normalise every step reward of a group jointly, then a
    step's advantage is the sum of the normalised rewards of it and the steps after it.
    ``groups[g][i]`` is trajectory i's step scores; the shape comes back the same."""
    out = []
    for group in groups:
        flat = [s for traj in group for s in traj if s is not None]
        normed_flat = iter(normalized(flat)) if flat else iter(())
        shaped_group = []
        for traj in group:
            normed = [None if s is None else next(normed_flat) for s in traj]
            shaped: list[float | None] = [None] * len(traj)
            running = 0.0
            for t in range(len(traj) - 1, -1, -1):
                value = normed[t]
                if value is not None:
                    running += value
                    shaped[t] = running
            shaped_group.append(shaped)
        out.append(shaped_group)
    return out


def shape_steps(items: list[Item], results: list[StepsResult], shaping: str, gamma: float = 1.0) -> list[StepsResult]:
    """step_rewards per options.shaping: raw scores, deltas, potential-based shaping, or
    GRPO process advantages over each group's steps jointly."""
    if shaping == "none":
        return results
    if shaping in ("raw", "delta", "potential"):
        shapes: dict[str, Callable[[list[float | None]], list[float | None]]] = {
            "raw": list,
            "delta": delta_rewards,
            "potential": lambda scores: potential_rewards(scores, gamma),
        }
        shape = shapes[shaping]
        return [r.model_copy(update={"step_rewards": shape(r.step_scores)}) if r.valid else r for r in results]
    members: dict[Hashable, list[int]] = {}
    for index, key in enumerate(group_keys(items)):
        if results[index].valid:
            members.setdefault(key, []).append(index)
    order = list(members.values())
    shaped = group_process_advantages([[results[i].step_scores for i in group] for group in order])
    out = list(results)
    for group, rewards in zip(order, shaped):
        for index, reward in zip(group, rewards):
            out[index] = out[index].model_copy(update={"step_rewards": reward})
    return out
