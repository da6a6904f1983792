"""The reward of a completion: a weighted sum over endpoints of the service."""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass
from typing import Any

import torch

from rewardserve.client.errors import APIConnectionError, APIStatusError
from rewardserve.client.rows import make_item, prompt_group
from rewardserve.client.sync import RewardClient
from rewardserve.protocol import Item, RubricResponse, ScoreResponse, StepsResponse, VerifyResponse
from rewardserve.train.grpo.config import DenseSource, RewardSource, TurnSource
from rewardserve.train.grpo.turn_advantages import MAX_TURN_CALLS, turn_call_count, turns_item

log = logging.getLogger("rewardserve.grpo")


class PreflightError(ValueError):
    """The service or a reward source cannot work: found before the policy loads."""


@dataclass
class Scored:
    """The rewards of some completions: the weighted sum, which have one (every source
    scored them), and each source's scores."""

    reward: torch.Tensor
    valid: torch.Tensor
    by_source: dict[str, list[float | None]]
    # The dense source's steps results (their JSON; None where invalid), when there is one.
    dense: list[dict[str, Any] | None] | None = None
    # The turns source's results (their JSON; None where invalid), when there is one.
    turns: list[dict[str, Any] | None] | None = None

    @classmethod
    def joined(cls, parts: list[Scored]) -> Scored:
        """Parts scored one after another (the groups of a step), in order."""
        dense = None if parts[0].dense is None else [r for p in parts for r in p.dense or []]
        turns = None if parts[0].turns is None else [r for p in parts for r in p.turns or []]
        return cls(
            torch.cat([p.reward for p in parts]),
            torch.cat([p.valid for p in parts]),
            {label: [s for p in parts for s in p.by_source[label]] for label in parts[0].by_source},
            dense,
            turns,
        )

    def turn_totals(self) -> torch.Tensor:
        """Each completion's trajectory score from the turns source (NaN where none)."""
        return torch.tensor(
            [float("nan") if r is None or r.get("score") is None else float(r["score"]) for r in self.turns or []]
        )

    def turns_mean(self) -> float | None:
        """The turns source's mean trajectory score over the completions it scored."""
        totals = self.turn_totals()
        present = totals[~totals.isnan()]
        return float(present.mean()) if len(present) else None

    def dense_mean(self) -> float | None:
        """The dense source's mean trajectory score over the completions it scored."""
        scores = [r["score"] for r in self.dense or [] if r is not None and r.get("score") is not None]
        return sum(scores) / len(scores) if scores else None

    def means(self) -> dict[str, float | None]:
        """Each source's mean over the completions it scored."""
        means: dict[str, float | None] = {}
        for label, scores in self.by_source.items():
            present = [s for s in scores if s is not None]
            means[label] = sum(present) / len(present) if present else None
        return means


class RewardMix:
    def __init__(
        self,
        client: RewardClient,
        sources: list[RewardSource],
        dense: DenseSource | None = None,
        turns: TurnSource | None = None,
    ):
        self.client = client
        self.sources = sources
        self.dense = dense
        self.turns = turns

    def preflight(self, row: dict[str, Any]) -> None:
        """The service answers, every source's model is served and ready, and one item
        built from ``row`` (a prompt of the run) goes through each source's endpoint."""
        where = self.client.base_url
        try:
            served = {card.id: card for card in self.client.models().data}
        except APIConnectionError as exc:
            raise PreflightError(
                f"the reward service at {where} does not answer ({exc}); start it (rewardserve serve) or fix 'service'"
            ) from None
        except APIStatusError as exc:
            raise PreflightError(f"the reward service at {where} refused /v1/models: {exc}") from None
        dense = self.dense
        steps = [] if dense is None else [RewardSource(endpoint="steps", model=dense.model, options=dense.options)]
        for source in self.sources + steps:
            if source.model is not None and source.model not in served:
                close = difflib.get_close_matches(source.model, list(served), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; served: {', '.join(sorted(served))}"
                raise PreflightError(f"reward {source.label!r}: model {source.model!r} is not served at {where}{hint}")
            if source.model is None and source.endpoint != "rubric":
                raise PreflightError(f"reward {source.label!r}: endpoint {source.endpoint!r} needs a model")
            item = make_item(row["prompt"], "preflight", row.get("reference"), row)
            try:
                self._scores(source, [item])
            except (APIStatusError, APIConnectionError, ValueError) as exc:
                raise PreflightError(
                    f"reward {source.label!r}: one test item through /{source.endpoint} failed: {exc}"
                ) from None
        if self.turns is not None:
            if row.get(self.turns.reference) is None:
                raise PreflightError(
                    f"turns: the prompts have no {self.turns.reference!r} field (the expected tool calls); "
                    "set turns.reference to the field that has them"
                )
            try:
                self.score_turns([row], ["preflight"])
            except (APIStatusError, APIConnectionError, ValueError) as exc:
                raise PreflightError(f"turns: one test item through /v1/score/turns failed: {exc}") from None

    def _scores(self, source: RewardSource, items: list[Item]) -> list[float | None]:
        response: RubricResponse | StepsResponse | VerifyResponse | ScoreResponse
        if source.endpoint == "rubric":
            response = self.client.rubric(
                [item.model_dump(exclude_unset=True) for item in items],
                criteria=source.criteria,
                judge=source.model,
                aggregation=source.options.get("aggregation"),
            )
        elif source.model is None:
            raise ValueError(f"reward source {source.endpoint!r} needs a model")
        elif source.endpoint == "steps":
            response = self.client.score_steps(source.model, items, **source.options)
        elif source.endpoint == "verify":
            response = self.client.verify(source.model, items, **source.options)
        else:
            response = self.client.score(source.model, items, **source.options)
        for warning in getattr(response, "warnings", None) or []:
            if warning.startswith("reward alarm"):  # the service saw the reward being gamed
                log.warning("%s", warning)
        return [r.score if r.valid else None for r in response.results]

    def score(self, rows: list[dict[str, Any]], texts: list[str]) -> Scored:
        """The completions' rewards. A completion is left out of training (not valid) when
        any source could not score it."""
        # Each prompt's completions are one group, as the loop's own advantages take them:
        # a source that normalises per group (normalize: group) sees the group whole.
        items = [
            make_item(row["prompt"], text, row.get("reference"), row, group_id=prompt_group(row["prompt"]))
            for row, text in zip(rows, texts)
        ]
        total = torch.zeros(len(items))
        valid = torch.ones(len(items), dtype=torch.bool)
        by_source: dict[str, list[float | None]] = {}
        for source in self.sources:
            scores = by_source[source.label] = self._scores(source, items)
            for i, s in enumerate(scores):
                if s is None:
                    valid[i] = False
                else:
                    total[i] += source.weight * s
        scored = Scored(total, valid, by_source)
        if self.dense is not None:
            results = self.client.score_steps(self.dense.model, items, **self.dense.options).results
            scored.dense = [r.model_dump() if r.valid else None for r in results]
        if self.turns is not None:
            scored.turns = self.score_turns(rows, texts)
        return scored

    def score_turns(self, rows: list[dict[str, Any]], texts: list[str]) -> list[dict[str, Any] | None]:
        """The completions' turn rewards (TurnsResult JSON; None where invalid)."""
        assert self.turns is not None
        source = self.turns
        conversations = [
            turns_item(row["prompt"], text, row.get(source.reference), source.separator, str(k))
            for k, (row, text) in enumerate(zip(rows, texts))
        ]
        # A completion with more calls than the service matches is invalid there anyway:
        # left out here, so that a policy repeating calls cannot make a request too big.
        sent = [k for k, c in enumerate(conversations) if turn_call_count(c) <= MAX_TURN_CALLS]
        out: list[dict[str, Any] | None] = [None] * len(conversations)
        if len(sent) < len(conversations):
            log.warning(
                "turn rewards: %d completions have over %d tool calls", len(conversations) - len(sent), MAX_TURN_CALLS
            )
        if sent:
            results = self.client.score_turns([conversations[k] for k in sent], **source.options).results
            for k, result in zip(sent, results):
                if not result.valid:
                    log.warning("turn rewards: a completion has none: %s", result.error)
                out[k] = result.model_dump() if result.valid else None
        return out
