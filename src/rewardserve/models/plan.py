"""The contract between a kind and the service: a request becomes a ``Plan``.

A kind turns one request's items into a plan: the units of forward work its batcher
queues (each with the tokens it costs), the calls its rule pools run, and ``finish``,
which turns what those produced into one finished result per item, in request order.
The service queues the units, runs the calls, awaits both and hands them to ``finish``;
it never looks inside a unit. A plan whose results need a second round of work (a
rubric's judge prompts are built from texts the pools render) returns the next plan
from ``finish``.

    Job    one item's work, before units are formed: its cost, its cache key
    Unit   what the batcher budgets and the kind's ``run`` computes (one or more jobs)
    Plan   units + pool calls + finish, and the request's token counts
    Part   another served model's plan inside this one (a rubric's model criterion, an
           ensemble's member): run on that model's batcher, its results read in finish
    Peer   what a plan may use of another served model: the model and its score cache
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from rewardserve.models.errors import ItemError

if TYPE_CHECKING:
    from concurrent.futures import Future

    from rewardserve.models.cache import LRUCache
    from rewardserve.models.operations.scales import RunningScore
    from rewardserve.models.reward_model import RewardModel

P = TypeVar("P")  # a kind's own payload
R = TypeVar("R")  # a plan's per-item result


class Scope(Protocol):
    """What work knows of the request it came from (the engine's RequestScope,
    engine/scope.py): who it is, until when its answer is wanted, whether it still is."""

    id: int
    name: str
    tenant: str | None
    deadline: float | None
    reason: str | None

    @property
    def cancelled(self) -> bool: ...

    def remaining(self) -> float | None: ...

    def expired(self) -> bool: ...

    def cancel(self, reason: str) -> None: ...

    def on_cancel(self, callback: Callable[[str], None]) -> Callable[[], None]: ...


class RuleCalls(Protocol):
    """The rule pools as a model uses them (the engine's RuleRunner, engine/pools/
    runner.py): calls run for a request, their values (or CallFailures) in order."""

    def run(
        self, calls: list[Any], scope: Scope | None = None, timeout_s: float | None = None
    ) -> Future[list[Any]]: ...


# What a kind's ``run`` gives back for a unit: one output per member (a result or an
# ItemError), in member order.
UnitOutput = list[Any]


@dataclass
class Job(Generic[P]):
    """One item's work. ``length``: what it costs the batcher (tokens for models that
    pad, 1 for a rule call). ``key``: everything its result depends on (token ids,
    readout, options); keyed jobs are answered from the score cache when they can be,
    and computed once per request."""

    length: int
    payload: P
    prompt_tokens: int = 0
    truncated: bool = False
    key: bytes | None = None


@dataclass
class Unit(Generic[P]):
    """One forward unit: ``members`` jobs computed together (a shared prompt runs once
    for all of them; ``shared_tokens`` is what that saves, reported as cached tokens).
    ``run`` answers a unit with one output per member."""

    length: int
    payload: P
    members: int = 1
    shared_tokens: int = 0
    # The request it belongs to (set by the service): who shares a pool fairly with
    # whom, and whether the work is still wanted.
    scope: Scope | None = None

    def answered_by(self, output: UnitOutput) -> bool:
        """Whether ``run`` gave this unit one output per member."""
        return len(output) == self.members

    def failed(self, error: ItemError) -> UnitOutput:
        """The output of a unit whose computation failed: every member invalid."""
        return [error] * self.members


@dataclass
class Plan(Generic[R]):
    """A request's work. ``finish(unit_outputs, call_values)`` gets one output list per
    unit and one value per call, in the order given, and returns the per-item results
    (or the next plan). ``keys``: per item, the key its finished result may be cached
    under (None: not cached)."""

    units: list[Unit[Any]]
    finish: Callable[[list[UnitOutput], list[Any]], list[R] | Plan[R]]
    calls: list[Any] = field(default_factory=list)
    keys: Sequence[bytes | None] = ()
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    deduplicated: int = 0
    # The items usage counts, when not the request's (a compare scores each response).
    scored_items: int | None = None
    # Other served models' plans, run on their own batchers alongside this plan's units
    # (in the same batches as other requests' work); each Part's ``results`` is filled
    # before ``finish`` runs.
    parts: list[Part[Any]] = field(default_factory=list)


S = TypeVar("S")


def then(done: list[R] | Plan[R], fn: Callable[[list[R]], list[S] | Plan[S]]) -> list[S] | Plan[S]:
    """``fn`` applied to a plan's results: now, or after the plan's next stages."""
    if isinstance(done, Plan):
        finish = done.finish
        return replace(done, finish=lambda outputs, values: then(finish(outputs, values), fn))  # type: ignore[arg-type, return-value]
    return fn(done)


@dataclass
class Part(Generic[R]):
    """``plan`` of the served model named ``model``; ``results`` once it has run."""

    model: str
    plan: Plan[R]
    results: list[R] | None = None

    def finished(self) -> list[R]:
        assert self.results is not None, f"part on {self.model!r} read before it ran"
        return self.results


@dataclass
class Peer:
    """Another served model as a plan may use it: to plan work on it (with its score
    cache) and to normalise its scores against its running statistics."""

    model: RewardModel
    cache: LRUCache | None
    running: RunningScore


class PeerLookup(Protocol):
    def __call__(self, name: str, param: str | None = None) -> Peer:
        """The served model ``name``, ready; a RequestError naming ``param`` otherwise."""
        ...
