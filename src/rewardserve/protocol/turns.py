"""/v1/score/turns: a reward per assistant turn of a tool-using agent, from its tool calls
matched to the reference's (MatchTIR's turn-level rewards, arXiv 2601.10712)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rewardserve.protocol.common import Item, ItemResult, Usage, _Request, _Response


class TurnOptions(_Request):
    """How predicted tool calls meet the reference's. A call's similarity to a reference
    call is 0 unless their names are equal (case aside); then the name, the overlap of
    their argument names, and each argument of the reference given the same value each
    count, over 2 + the reference's argument count.

    ``hard``: a one-to-one matching of greatest total similarity (scipy's
    linear_sum_assignment); a matched call is rewarded its similarity, an unmatched one
    ``unmatched``. ``soft``: optimal transport between the calls with uniform weights
    and entropic regularisation ``reg`` (POT's sinkhorn); a call is rewarded the
    similarity its share of the plan carries."""

    assignment: Literal["hard", "soft"] = Field(
        default="hard",
        description=(
            "How predicted calls are matched to reference calls: hard (one-to-one, the best "
            "assignment) or soft (optimal transport)."
        ),
    )
    unmatched: float = Field(
        default=0.0,
        ge=-10.0,
        le=10.0,
        description="The reward of a predicted call no reference call matches (default 0).",
    )
    reg: float = Field(
        default=0.1,
        gt=0.0,
        le=10.0,
        description=("Soft assignment: the entropy regularization of the transport (smaller: closer to hard)."),
    )


class TurnsRequest(_Request):
    """Items with ``messages`` (assistant turns with ``tool_calls``) and a ``reference``:
    the expected calls, ``[{"name", "arguments"}]`` (arguments an object or its JSON;
    ``parameters`` is read too), or ``{"tool_calls": [...]}``."""

    items: list[Item] = Field(
        min_length=1, description="Conversations with assistant tool calls and a reference of the expected calls."
    )
    options: TurnOptions = Field(default_factory=TurnOptions, description="How predicted calls meet the reference's.")


class TurnsResult(ItemResult):
    """``turn_rewards``: per assistant turn in order, the mean reward of its calls (0.0
    for a turn without calls; None for a turn whose calls cannot be read, with why in
    ``turn_errors``). ``score``: the trajectory's total, the calls' rewards summed over
    the larger of the two call counts (hard), or the plan's total similarity (soft)."""

    turn_rewards: list[float | None] = Field(
        default_factory=list,
        description=(
            "Per assistant turn in order, the mean reward of its calls (0.0 without calls; "
            "None when its calls cannot be read)."
        ),
    )
    turn_errors: list[str | None] = Field(
        default_factory=list,
        description=("Per assistant turn, why its calls could not be read; None for a turn that scored."),
    )
    turns: list[int] = Field(default_factory=list, description="Each assistant turn's index in the item's messages.")


class TurnsResponse(_Response):
    results: list[TurnsResult] = Field(description="One result per item, in order.")
    usage: Usage = Field(default_factory=Usage, description="What the request cost.")
