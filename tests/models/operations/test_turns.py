"""Turn-level rewards from tool calls (models/operations/turns.py): the hard assignment is the
best one-to-one matching (checked against brute force over every matching), the soft
one an optimal-transport plan, and a turn that cannot be read leaves the others scored."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from rewardserve.models.operations.turns import Call, rewards_of_calls, score_all_turns, similarity
from rewardserve.protocol import Item, TurnOptions

NAMES = ["search", "lookup", "calc"]


def random_call(rng: random.Random) -> Call:
    keys = rng.sample(["q", "k", "n", "x"], rng.randint(0, 3))
    return Call(rng.choice(NAMES), {k: rng.choice([1, 2, "a"]) for k in keys})


def best_matching(preds: list[Call], golds: list[Call]) -> float:
    """The largest total similarity of any one-to-one matching, by trying them all."""
    best = 0.0
    for size in range(min(len(preds), len(golds)) + 1):
        for chosen in itertools.permutations(range(len(golds)), size):
            for rows in itertools.combinations(range(len(preds)), size):
                best = max(best, sum(similarity(preds[i], golds[j]) for i, j in zip(rows, chosen)))
    return best


@pytest.mark.parametrize("seed", range(40))
def test_hard_assignment_is_the_best_matching(seed):
    rng = random.Random(seed)
    preds = [random_call(rng) for _ in range(rng.randint(1, 5))]
    golds = [random_call(rng) for _ in range(rng.randint(1, 4))]
    rewards, total = rewards_of_calls(preds, golds, TurnOptions(assignment="hard"))
    assert sum(rewards) == pytest.approx(best_matching(preds, golds))
    assert total == pytest.approx(sum(rewards) / max(len(preds), len(golds)))
    penalised, _ = rewards_of_calls(preds, golds, TurnOptions(unmatched=-0.5))
    matched = sum(1 for r in rewards if r > 0)
    assert sum(penalised) == pytest.approx(sum(rewards) - 0.5 * (len(preds) - matched))


def test_similarity_counts_the_name_the_argument_names_and_each_expected_value():
    gold = Call("search", {"q": "cats", "n": 3})
    assert similarity(Call("search", {"q": "cats", "n": 3}), gold) == 1.0
    assert similarity(Call("Search", {"q": "cats", "n": 4}), gold) == pytest.approx(3 / 4)
    assert similarity(Call("search", {"q": "cats"}), gold) == pytest.approx((1 + 1 / 2 + 1) / 4)
    assert similarity(Call("lookup", {"q": "cats", "n": 3}), gold) == 0.0


def test_soft_assignment_spreads_each_call_over_a_transport_plan():
    same = [Call(name, {}) for name in NAMES]
    rewards, total = rewards_of_calls(same, list(same), TurnOptions(assignment="soft", reg=0.01))
    assert rewards == pytest.approx([1 / 3] * 3, abs=1e-3) and total == pytest.approx(1.0, abs=1e-3)
    rewards, total = rewards_of_calls(same, [Call("calc", {})], TurnOptions(assignment="soft"))
    assert rewards == pytest.approx([0.0, 0.0, 1 / 3], abs=1e-6) and total == pytest.approx(1 / 3, abs=1e-6)


def call(name: str, arguments) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def test_each_assistant_turn_gets_its_calls_mean_and_a_bad_turn_only_itself():
    messages = [
        {"role": "user", "content": "find cats, then count them"},
        {"role": "assistant", "tool_calls": [call("search", json.dumps({"q": "cats"}))]},
        {"role": "tool", "content": "3 cats"},
        {"role": "assistant", "tool_calls": [call("calc", "{not json"), call("calc", "{}")]},
        {"role": "assistant", "content": "thinking"},
        {"role": "assistant", "tool_calls": [call("calc", {"expr": "1+2"}), call("lookup", {})]},
    ]
    reference = [{"name": "search", "arguments": {"q": "cats"}}, {"name": "calc", "parameters": {"expr": "1+2"}}]
    (result,) = score_all_turns([Item(messages=messages, reference=reference)], TurnOptions())
    assert result.valid and result.turns == [1, 3, 4, 5]
    assert result.turn_rewards == pytest.approx([1.0, None, 0.0, 0.5])  # calc matched, lookup not
    assert "messages[3].tool_calls[0]: arguments are not JSON" in result.turn_errors[1]
    assert result.score == pytest.approx(2.0 / 3)  # two matched of max(3 calls, 2 expected)
    bad = score_all_turns(
        [Item(messages=messages, reference={"calls": []}), Item(prompt="p", response="r", reference=[])],
        TurnOptions(),
    )
    assert [r.valid for r in bad] == [False, False]
    assert "expected calls" in bad[0].error and "messages" in bad[1].error
