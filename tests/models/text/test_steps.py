"""Where steps come from, and the arithmetic on step scores."""

from __future__ import annotations

import pytest

from rewardserve.models.errors import ItemError
from rewardserve.models.text.steps import aggregate, extract
from rewardserve.protocol import Item, StepOptions


def test_auto_picks_list_then_turns_then_separator_then_whole():
    listed = extract(Item(prompt="q", steps=["a", "bb"]), StepOptions(), "\n")
    assert listed.steps == ["a", "bb"] and [(s.start, s.end) for s in listed.spans] == [(0, 1), (1, 3)]
    agent = Item(
        messages=[
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a1"},
            {"role": "user", "content": "more"},
            {"role": "assistant", "content": "a2"},
            {"role": "tool", "content": "ignored after the last turn"},
        ]
    )
    turns = extract(agent, StepOptions(), "\n")
    assert turns.step_turns == [1, 3] and turns.steps == ["a1", "a2"] and len(turns.context) == 4
    split = extract(Item(prompt="q", response="x\ny\n\nz"), StepOptions(), "\n")
    assert split.steps == ["x", "y", "z"]
    assert [(s.start, s.end) for s in split.spans] == [(0, 1), (2, 3), (5, 6)]
    whole = extract(Item(prompt="q", response="x\ny"), StepOptions(), None)
    assert whole.steps == ["x\ny"]


def test_explicit_modes_and_their_errors():
    with pytest.raises(ItemError, match="separator"):
        extract(Item(response="a"), StepOptions(steps_from="separator"), None)
    with pytest.raises(ItemError, match="steps"):
        extract(Item(response="a"), StepOptions(steps_from="steps"), None)
    with pytest.raises(ItemError, match="messages"):
        extract(Item(response="a"), StepOptions(steps_from="turns"), None)
    sep = extract(Item(response="a|b"), StepOptions(separator="|"), "\n")
    assert sep.steps == ["a", "b"]


def test_inline_steps_of_an_agent_trajectory_keep_tool_results_causal():
    agent = Item(
        messages=[
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": "search",
                "tool_calls": [{"function": {"name": "s", "arguments": {"q": 1}}}],
            },
            {"role": "tool", "content": "found"},
            {"role": "assistant", "content": "done"},
        ]
    )
    traj = extract(agent, StepOptions(), None)
    first, second = traj.inline_steps()
    assert first.startswith("search") and '"name": "s"' in first and "found" not in first
    assert second == "found\ndone"
    assert traj.question() == "q"


def test_aggregates_and_first_error():
    stats = aggregate([0.9, 0.2, 0.5, None], threshold=0.3)
    assert stats.aggregates == pytest.approx({"min": 0.2, "prod": 0.09, "mean": 1.6 / 3, "last": 0.5, "sum": 1.6})
    assert stats.first_error_step == 1
    assert aggregate([0.9], None).first_error_step is None
