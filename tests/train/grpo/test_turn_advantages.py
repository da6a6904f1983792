"""The GRPO loop's turn-level advantages (train/grpo/turn_advantages.py): MatchTIR's
dual-level advantage worked by hand on a saved tokenizer (returns, normalisation per turn
index within a group, each token on its turn), the turns of a completion as the service
scores them, and a short run with ``--turns`` against a real service."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest
import torch
from transformers import AutoTokenizer

from rewardserve.client.sync import RewardClient
from rewardserve.train.grpo.config import TurnSource, load_config
from rewardserve.train.grpo.rewards import RewardMix
from rewardserve.train.grpo.turn_advantages import (
    EPS,
    dual_advantages,
    returns,
    token_turns,
    turn_calls,
    turn_spans,
)
from tests.builders import build_causal_lm, build_tokenizer

ADD = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
MUL = '<tool_call>{"name": "mul", "arguments": {"a": 3}}</tool_call>'
EXPECTED = [{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "mul", "arguments": {"a": 3}}]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok")
    build_tokenizer("qwen").save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


def test_a_completion_is_split_after_each_call_or_at_a_separator():
    text = f"first {ADD} then {MUL} so 7"
    spans = turn_spans(text, None)
    assert [text[s:e] for s, e in spans] == [f"first {ADD}", f" then {MUL}", " so 7"]
    assert turn_spans(f"{ADD}  ", None) == [(0, len(ADD) + 2)]  # trailing blanks stay with the last call
    assert turn_spans("no calls", None) == [(0, 8)]
    assert [("a|b|c"[s:e]) for s, e in turn_spans("a|b|c", "|")] == ["a", "b", "c"]
    assert turn_calls(ADD) == [{"type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]
    (broken,) = turn_calls("<tool_call>{not json</tool_call>")
    assert broken["function"] == {"name": "unreadable", "arguments": "{not json"}


def test_turn_rewards_come_from_the_service_for_the_calls_in_each_turn(live_service):
    mix = RewardMix(RewardClient(live_service), [], turns=TurnSource())
    rows = [{"prompt": "Add 1 and 2, then triple.", "tool_calls": EXPECTED}] * 3
    texts = [f"{ADD}{MUL}", f"{MUL} and {ADD} done", "<tool_call>{oops</tool_call>"]
    first, second, third = mix.score_turns(rows, texts)
    assert first["turn_rewards"] == [1.0, 1.0] and first["score"] == 1.0
    assert second["turn_rewards"] == [1.0, 1.0, 0.0]  # matched whatever the order; the answer has no call
    assert third["turn_rewards"] == [None] and "not JSON" in third["turn_errors"][0]


def test_the_dual_level_advantage_by_hand(tokenizer):
    texts = [f"a {ADD} b {MUL}", f"x {ADD}", f"{MUL} y", f"z {ADD}"]
    keys = ["g", "g", "g", "other"]
    results = [
        {"valid": True, "turn_rewards": [1.0, 0.5], "score": 0.75},
        {"valid": True, "turn_rewards": [0.2], "score": 0.2},
        {"valid": True, "turn_rewards": [0.0, 1.0], "score": 0.5},  # its second turn is " y": no call, 1.0 given
        None,  # the service could not score it
    ]
    completions = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    width = 2 + max(len(c) for c in completions)
    ids = torch.zeros((4, width), dtype=torch.long)
    mask = torch.zeros((4, width), dtype=torch.long)
    for row, c in enumerate(completions):
        ids[row, 2 : 2 + len(c)] = torch.tensor(c)
        mask[row, 2 : 2 + len(c)] = 1
    trajectory = torch.tensor([0.3, -0.6, 0.3, 0.0])
    source = TurnSource(gamma=0.9, weight=0.25)
    out, has = dual_advantages(ids, mask, texts, results, trajectory, tokenizer, keys, source)
    assert has.tolist() == [True, True, True, False]
    assert (out[:, :2] == 0).all() and (out[3] == 0).all()

    g = [returns(r, 0.9) for r in ([1.0, 0.5], [0.2], [0.0, 1.0])]
    assert g[0] == pytest.approx([1.45, 0.5]) and g[2] == pytest.approx([0.9, 1.0])
    first = [g[0][0], g[1][0], g[2][0]]  # turn 0: all three reached it
    second = [g[0][1], g[2][1]]  # turn 1: two did

    def norm(value, values):
        return (value - statistics.fmean(values)) / (statistics.stdev(values) + EPS)

    turn_adv = [
        [norm(g[0][0], first), norm(g[0][1], second)],
        [norm(g[1][0], first)],
        [norm(g[2][0], first), norm(g[2][1], second)],
    ]
    for row in range(3):
        spans = turn_spans(texts[row], None)
        tokens = completions[row]
        for k in range(len(tokens)):
            end = len(tokenizer.decode(tokens[: k + 1], skip_special_tokens=True))
            turn = next(t for t, (_, stop) in enumerate(spans) if end <= stop or t == len(spans) - 1)
            expected = 0.75 * float(trajectory[row]) + 0.25 * turn_adv[row][turn]
            assert float(out[row, 2 + k]) == pytest.approx(expected, abs=1e-5), (row, k)


def test_a_character_split_over_tokens_at_a_turn_boundary_goes_to_its_turn(tokenizer):
    """The next turn's first character, a 4-byte emoji this byte-level tokenizer spells in
    several tokens: every one of them is the next turn's, not only the one completing it."""
    text = f"a {ADD}\U0001f642 b"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    spans = turn_spans(text, None)
    boundary = spans[0][1]
    owners = token_turns(tokenizer, ids, text, spans)
    held = bytes_held(tokenizer, ids)
    first_of_emoji = held.index(len(text[:boundary].encode())) + 1  # the token before ends turn 0
    assert held[first_of_emoji] < len(text[: boundary + 1].encode())  # it begins the emoji, unfinished
    assert owners[:first_of_emoji] == [0] * first_of_emoji
    assert owners[first_of_emoji:] == [1] * (len(ids) - first_of_emoji)


def test_a_turn_ending_in_a_literal_replacement_character_keeps_its_bytes(tokenizer):
    """A turn whose last character is a literal U+FFFD (a garbled byte the policy emitted,
    decoded): all three of its bytes are that turn's. Its first byte alone decodes to
    U+FFFD as well, so only the bytes say where the character ends."""
    text = "a \ufffd|0 b"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    spans = turn_spans(text, "|")
    owners = token_turns(tokenizer, ids, text, spans)
    held = bytes_held(tokenizer, ids)
    cut = held.index(len("a \ufffd".encode())) + 1  # the tokens up to the character's last byte
    assert held[cut - 2] < held[cut - 1]  # (these ids do split it: a mid-character end before)
    assert owners[:cut] == [0] * cut
    assert owners[cut:] == [1] * (len(ids) - cut)


def bytes_held(tokenizer, ids: list[int]) -> list[int]:
    """How many bytes of the text the ids up to each token spell: the byte-level BPE's
    pieces read by GPT-2's table (transformers' own)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    out, at = [], 0
    for token_id, piece in zip(ids, tokenizer.convert_ids_to_tokens(ids)):
        if token_id not in tokenizer.all_special_ids:
            at += len(bytes(byte_of[c] for c in piece))
        out.append(at)
    return out


@pytest.mark.long(30)
@pytest.mark.timeout(600)
def test_a_run_with_turns_trains_on_them(tmp_path, live_service):
    policy = build_causal_lm(tmp_path / "policy", seed=2)
    prompts = tmp_path / "prompts.jsonl"
    rows = [
        {"prompt": f"Call add with a={k}.", "reference": "done", "tool_calls": [{"name": "add", "arguments": {"a": k}}]}
        for k in range(2)
    ]
    prompts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = tmp_path / "grpo.yaml"
    config.write_text(
        f"policy: {policy}\nprompts: {prompts}\nservice: {live_service}\n"
        "rewards: [{endpoint: score, model: exact_match}]\n"
        "steps: 1\nprompts_per_step: 2\ngroup_size: 3\nmax_new_tokens: 6\nprogress: false\n"
    )
    cli = [
        sys.executable,
        "-m",
        "rewardserve.cli",
        "grpo",
        "--config",
        str(config),
        "--output-dir",
        str(tmp_path / "t"),
    ]
    ran = subprocess.run([*cli, "--turns"], capture_output=True, text=True, timeout=400)
    assert ran.returncode == 0, ran.stderr[-2000:]
    (row,) = [json.loads(line) for line in (tmp_path / "t" / "metrics.jsonl").read_text().splitlines()]
    assert row["turn_score"] == 0.0 and row["invalid"] == 0  # a random policy calls no tool
    with pytest.raises(ValueError, match="give one"):
        load_config(config, {"dense": {"model": "prm"}, "turns": {}})
