"""Token-level process advantages for the GRPO loop (``dense``), as DeepSeekMath's
process supervision defines them (Shao et al. 2024, section 4.1.3): every step score of a
group's completions is normalised by the mean and standard deviation of them all; a
token's advantage is the sum of the normalised scores of the steps that end at it or
after it. A step ends at the last token overlapping its characters (``token_rewards``
places it), so the sum runs from the token to the end of the completion.

The loop adds it, times ``weight``, to the outcome advantage of every token (PRIME's
combination of outcome and process advantages)."""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Sequence
from typing import Any

import torch

from rewardserve.client.token_alignment import token_rewards

EPS = 1e-6


def process_advantages(
    results: Sequence[dict[str, Any] | None],
    completions: Sequence[Sequence[int]],
    texts: Sequence[str],
    tokenizer: Any,
    keys: Sequence[Hashable],
) -> list[list[float] | None]:
    """Per completion, a process advantage per id of ``completions`` (its tokens, the EOS
    included), or None where it has none: no valid steps result (``results``: a
    StepsResult's JSON, or None), or spans that are not in its text."""
    normalised: list[list[float | None] | None] = [None] * len(results)
    for key in dict.fromkeys(keys):
        members = [i for i, k in enumerate(keys) if k == key and results[i] is not None]
        scores = [s for i in members for s in _scores(results[i]) if s is not None]
        mean = statistics.fmean(scores) if scores else 0.0
        spread = statistics.stdev(scores) if len(scores) > 1 else 0.0
        for i in members:
            normalised[i] = [None if s is None else (s - mean) / (spread + EPS) for s in _scores(results[i])]
    out: list[list[float] | None] = []
    for result, steps, ids, text in zip(results, normalised, completions, texts):
        if result is None or steps is None:
            out.append(None)
            continue
        try:
            placed = token_rewards({"step_scores": steps, "spans": result["spans"]}, tokenizer, ids, response=text)
        except ValueError:
            out.append(None)
            continue
        out.append(torch.tensor(placed, dtype=torch.float64).flip(0).cumsum(0).flip(0).tolist())
    return out


def token_advantages(
    ids: torch.Tensor,
    completion_mask: torch.Tensor,
    texts: Sequence[str],
    results: Sequence[dict[str, Any] | None],
    tokenizer: Any,
    keys: Sequence[Hashable],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``process_advantages`` laid over a rollout: ``[N, T]`` (0 off the completions) and
    which completions have them."""
    process = torch.zeros(ids.shape, dtype=torch.float32)
    has = torch.zeros(ids.shape[0], dtype=torch.bool)
    completions = [row[mask == 1].tolist() for row, mask in zip(ids, completion_mask)]
    for i, values in enumerate(process_advantages(results, completions, texts, tokenizer, keys)):
        if values is not None:
            process[i, completion_mask[i] == 1] = torch.tensor(values, dtype=torch.float32)
            has[i] = True
    return process, has


def _scores(result: dict[str, Any] | None) -> list[float | None]:
    return list((result or {}).get("step_scores") or [])
