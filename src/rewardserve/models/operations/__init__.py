"""Operations: a request's work over many items, or many models at once, behind one
interface. Item lists, group normalisation, comparisons, formulas, scales and mixing are
the parts kinds plan with; a rubric (criteria on rules, a judge and served models) and
tool-call turns are whole operations a use case runs:

    cost(request)        what it will make the service do, known before anything is
                         planned: its items, its work (held to the per-request limit),
                         its rule calls (asked of the pools' room), the served models it
                         reads, the rules a served model hosts for it, whether it asks a
                         judge
    plan(request, lent)  its Plan (models/plan.py), given what the service lends it

The service asks ``cost`` first (a refusal then costs no plan), lends what the cost
names, and has the engine run ``plan``; it never looks inside either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from rewardserve.models.plan import PeerLookup, Plan

if TYPE_CHECKING:
    from rewardserve.models.reward_model import RewardModel

Q = TypeVar("Q", contravariant=True)  # the request an operation takes
R = TypeVar("R")  # its result per item


@dataclass(frozen=True)
class Cost:
    items: int
    work: int
    rule_calls: dict[str, int] = field(default_factory=dict)
    models: frozenset[str] = frozenset()
    hosted: frozenset[str] = frozenset()
    judge: bool = False


@dataclass(frozen=True)
class Lent:
    """What the service lends an operation's plan: the judge model it holds, the served
    models the cost named (as the request's tenant sees them), each hosted rule's model."""

    judge: RewardModel | None = None
    peers: PeerLookup | None = None
    hosts: dict[str, str] = field(default_factory=dict)


class Operation(Protocol[Q, R]):
    def cost(self, request: Q) -> Cost: ...

    def plan(self, request: Q, lent: Lent) -> Plan[R]: ...
