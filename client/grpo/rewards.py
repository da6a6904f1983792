"""The reward of a completion: a weighted sum over endpoints of the service."""

from __future__ import annotations

from typing import Any

import torch

from rewardserve.client.grpo.config import RewardSource
from rewardserve.client.items import make_item
from rewardserve.client.protocol import Item, RubricResponse, ScoreResponse, StepsResponse, VerifyResponse
from rewardserve.client.sync_client import RewardClient


class RewardMix:
    def __init__(self, client: RewardClient, sources: list[RewardSource]):
        self.client = client
        self.sources = sources

    def _scores(self, source: RewardSource, items: list[Item]) -> list[float | None]:
        response: RubricResponse | StepsResponse | VerifyResponse | ScoreResponse
        if source.endpoint == "rubric":
            response = self.client.rubric([item.model_dump(exclude_unset=True) for item in items], criteria=source.criteria, judge=source.model,
                                          aggregation=source.options.get("aggregation"))
        elif source.model is None:
            raise ValueError(f"reward source {source.endpoint!r} needs a model")
        elif source.endpoint == "steps":
            response = self.client.score_steps(source.model, items, **source.options)
        elif source.endpoint == "verify":
            response = self.client.verify(source.model, items, **source.options)
        else:
            response = self.client.score(source.model, items, **source.options)
        return [r.score if r.valid else None for r in response.results]

    def score(self, rows: list[dict[str, Any]],
              texts: list[str]) -> tuple[torch.Tensor, dict[str, float | None], torch.Tensor]:
        """(reward per completion, mean of each source, which completions have a reward).
        A completion is left out of training when any source could not score it."""
        items = [make_item(row["prompt"], text, row.get("reference"), row) for row, text in zip(rows, texts)]
        total = torch.zeros(len(items))
        valid = torch.ones(len(items), dtype=torch.bool)
        means: dict[str, float | None] = {}
        for source in self.sources:
            scores = self._scores(source, items)
            present = [s for s in scores if s is not None]
            means[f"{source.endpoint}:{source.model}"] = sum(present) / len(present) if present else None
            for i, s in enumerate(scores):
                if s is None:
                    valid[i] = False
                else:
                    total[i] += source.weight * s
        return total, means, valid
