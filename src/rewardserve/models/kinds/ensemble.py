"""Kind ``ensemble``: several served models' scores of an item, mixed into one.

Each member scores the request's items on its own batcher (in the same batches as other
requests' work, answered from its own score cache); each member's scores are put on the
ensemble's ``normalize`` scale; an item's score is the weighted mean of its valid
members' scores, its ``uncertainty`` their (unweighted, population) standard deviation,
its ``components`` each member's scaled score. An item is invalid when fewer than
``min_members`` members could score it, naming those that could not. With ``escalate``
the items the cheap mix cannot settle are scored by an expensive model instead.

The ensemble loads after its members and is not ready unless they all are.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rewardserve.models.cache import LRUCache
from rewardserve.models.errors import ItemError, RequestError
from rewardserve.models.kinds import register_kind
from rewardserve.models.operations.groups import group_advantages, group_keys
from rewardserve.models.operations.mixing import escalate, part_scores, score_part
from rewardserve.models.operations.scales import normalize_scores
from rewardserve.models.options import KindOptions
from rewardserve.models.plan import Job, Part, PeerLookup, Plan, Unit, UnitOutput
from rewardserve.models.reward_model import RewardModel
from rewardserve.protocol import (
    CompareItem,
    CompareOptions,
    CompareResult,
    Escalation,
    Item,
    ItemResult,
    Scale,
    ScoreOptions,
)


class Member(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    weight: float = Field(1.0, gt=0)


class EnsembleOptions(KindOptions):
    members: list[str | Member] = Field(
        min_length=1, description="The served models mixed: names, or {name, weight} (weight 1 by default)."
    )
    normalize: Scale = Field(
        "none", description="Each member's scores put on this scale before mixing: none, sigmoid, group, running."
    )
    min_members: int | None = Field(
        None, ge=1, description="How many members must score an item for it to be valid (default: all)."
    )
    escalate: Escalation | None = Field(
        None, description="Ask an expensive model where the mix is unsure: {to, when, max_fraction, normalize}."
    )

    @model_validator(mode="after")
    def _distinct(self) -> EnsembleOptions:
        names = [m if isinstance(m, str) else m.name for m in self.members]
        if len(set(names)) != len(names):
            raise ValueError("an ensemble's members must differ")
        if self.min_members is not None and self.min_members > len(names):
            raise ValueError(f"min_members {self.min_members} is more than the {len(names)} members")
        return self

    def weighted(self) -> list[Member]:
        return [Member(name=m, weight=1.0) if isinstance(m, str) else m for m in self.members]


@register_kind("ensemble")
class EnsembleModel(RewardModel):
    Options = EnsembleOptions
    options: EnsembleOptions
    runs_torch = False
    endpoints = frozenset({"score", "compare"})
    inputs = frozenset({"chat", "text", "input_ids"})  # each member refuses what it cannot score

    @property
    def depends_on(self) -> list[str]:
        names = [m.name for m in self.options.weighted()]
        escalation = self.options.escalate
        return names + ([escalation.to] if escalation is not None and escalation.to not in names else [])

    @property
    def backend_name(self) -> str:
        return "ensemble"

    def load(self) -> None:
        """Nothing of its own: its members are served models, lent to each request's plan
        (the registry refuses an ensemble whose members are not served, and loads it after
        them)."""

    def probe(self) -> None:
        """Its members are probed as served models; it computes nothing itself."""

    def describe(self) -> str:
        members = ", ".join(f"{m.name}x{m.weight:g}" for m in self.options.weighted())
        return f"kind=ensemble members={members} normalize={self.options.normalize}"

    # Scoring is the members' work: the ensemble plans it, it runs nothing itself.
    def prepare(self, items: list[Item], options: Any) -> list[Job[Any] | ItemError]:
        raise NotImplementedError("an ensemble plans its members' work (plan_score)")

    def run(self, units: list[Unit[Any]]) -> list[UnitOutput]:
        raise NotImplementedError("an ensemble runs no units of its own")

    def plan_score(
        self, items: list[Item], options: ScoreOptions, cache: LRUCache | None = None, peers: PeerLookup | None = None
    ) -> Plan[ItemResult]:
        self.refuse_unscorable_shapes(items)
        if peers is None:  # the members are lent per request, as its tenant sees them
            raise RequestError(f"ensemble {self.name!r} has no served members here", param="model")
        lookup = peers
        members = self.options.weighted()
        parts: list[Part[ItemResult]] = []
        running = []
        for member in members:
            part, stats = score_part(lookup, member.name, items, "model")
            parts.append(part)
            running.append(stats)
        groups = group_keys(items)
        need = self.options.min_members or len(members)

        def finish(_outputs: list[UnitOutput], _values: list[Any]) -> list[ItemResult] | Plan[ItemResult]:
            per_member = []
            for part, stats in zip(parts, running):
                scores = part_scores(part)
                raw = [None if isinstance(s, ItemError) else s for s in scores]
                scaled, _ = normalize_scores(self.options.normalize, raw, groups, stats)
                per_member.append((scores, scaled))
            results = [
                self._mix(item, members, [(m[0][i], m[1][i]) for m in per_member], need) for i, item in enumerate(items)
            ]
            then = (lambda rs: group_advantages(items, rs)) if options.normalize == "group" else None
            return escalate(self.options.escalate, items, results, lookup, then)

        return Plan(units=[], finish=finish, parts=list(parts))

    @staticmethod
    def _mix(item: Item, members: list[Member], scored: list[tuple[Any, float | None]], need: int) -> ItemResult:
        components = {m.name: value for m, (_, value) in zip(members, scored)}
        valid = [(m, value) for m, (_, value) in zip(members, scored) if value is not None]
        if len(valid) < need:
            failed = "; ".join(
                str(raw) if isinstance(raw, ItemError) else f"model {m.name!r}: no score"
                for m, (raw, value) in zip(members, scored)
                if value is None
            )
            return ItemResult(
                id=item.id,
                valid=False,
                components=components,
                error=f"{len(valid)} of {len(members)} members scored it (needs {need}): {failed}",
            )
        total = sum(m.weight for m, _ in valid)
        score = sum(m.weight * v for m, v in valid) / total
        mean = sum(v for _, v in valid) / len(valid)
        uncertainty = math.sqrt(sum((v - mean) ** 2 for _, v in valid) / len(valid))
        return ItemResult(id=item.id, score=score, uncertainty=uncertainty, components=components)

    def plan_compare(
        self,
        items: list[CompareItem],
        options: CompareOptions,
        cache: LRUCache | None = None,
        peers: PeerLookup | None = None,
    ) -> Plan[CompareResult]:
        from rewardserve.models.operations.compare import compare_by_scores

        return compare_by_scores(self, items, cache, peers)
