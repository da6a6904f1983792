"""The GRPO loop's token-level process advantages (train/grpo/dense.py): DeepSeekMath's
process supervision worked by hand on a saved tokenizer, laid over a rollout; and a
short dense run beside an outcome-only one on the same seed, drawn side by side."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest
import torch
from transformers import AutoTokenizer

from rewardserve.train.grpo.config import load_config
from rewardserve.train.grpo.dense import EPS, process_advantages, token_advantages
from rewardserve.train.grpo.loop import train
from tests.builders import build_causal_lm, build_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok")
    build_tokenizer("qwen").save_pretrained(path)
    return AutoTokenizer.from_pretrained(path)


def last_token_of(tokenizer, ids, end):
    """The first token whose prefix decodes to ``end`` characters or more."""
    return next(k for k in range(len(ids)) if len(tokenizer.decode(ids[: k + 1], skip_special_tokens=True)) >= end)


def steps_result(text, scores, separator="\n\n"):
    spans, at = [], 0
    for piece in text.split(separator):
        spans.append({"message": None, "start": at, "end": at + len(piece)})
        at += len(piece) + len(separator)
    return {"step_scores": scores, "spans": spans, "score": min(scores)}


def test_steps_are_normalised_over_the_group_and_summed_from_each_token_on(tokenizer):
    texts = ["the answer\n\nis 42", "so it is", "the answer is"]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    results = [steps_result(texts[0], [0.9, 0.1]), steps_result(texts[1], [0.5]), steps_result(texts[2], [0.7])]
    keys = ["g", "g", "other"]
    out = process_advantages(results, ids, texts, tokenizer, keys)
    spread = statistics.stdev([0.9, 0.1, 0.5])
    first, second = (0.9 - 0.5) / (spread + EPS), (0.1 - 0.5) / (spread + EPS)
    end_first = last_token_of(tokenizer, ids[0], len("the answer"))
    end_second = last_token_of(tokenizer, ids[0], len(texts[0]))
    expected = [first + second if k <= end_first else second if k <= end_second else 0.0 for k in range(len(ids[0]))]
    assert out[0] == pytest.approx(expected)
    assert out[0][-1] == 0.0  # the EOS comes after every step
    assert out[1] == pytest.approx([0.0] * (len(ids[1]) - 1) + [0.0])  # 0.5 is the group's mean
    assert out[2] == pytest.approx([0.0] * len(ids[2]))  # alone: nothing to compare with

    # No steps result, or spans not in the text: no process advantage.
    broken = steps_result("x" * 100, [0.3])
    assert process_advantages([None, broken], ids[1:], texts[1:], tokenizer, ["g", "g"]) == [None, None]


def test_they_are_laid_over_the_rollout(tokenizer):
    texts = ["a b\n\nc", "d"]
    completions = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    width = 3 + max(len(c) for c in completions)
    ids = torch.zeros((2, width), dtype=torch.long)
    mask = torch.zeros((2, width), dtype=torch.long)
    for row, c in enumerate(completions):
        ids[row, 3 : 3 + len(c)] = torch.tensor(c)
        mask[row, 3 : 3 + len(c)] = 1
    results = [steps_result(texts[0], [1.0, 0.0]), None]
    process, has = token_advantages(ids, mask, texts, results, tokenizer, [0, 0])
    assert has.tolist() == [True, False]
    assert (process[:, :3] == 0).all() and (process[1] == 0).all()
    (alone,) = [v for v in process_advantages(results[:1], completions[:1], texts[:1], tokenizer, [0]) if v]
    assert process[0, 3 : 3 + len(completions[0])].tolist() == pytest.approx(alone)


@pytest.mark.long(40)
@pytest.mark.timeout(900)
def test_a_dense_run_beside_an_outcome_run_on_the_same_seed(tmp_path, live_service):
    policy = build_causal_lm(tmp_path / "policy", seed=2)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Count to {k}.", "reference": "1 2 3"}) + "\n" for k in range(4)))
    config = tmp_path / "grpo.yaml"
    config.write_text(
        f"policy: {policy}\nprompts: {prompts}\nservice: {live_service}\n"
        "rewards: [{endpoint: score, model: exact_match}]\n"
        "steps: 2\nprompts_per_step: 2\ngroup_size: 4\nmax_new_tokens: 8\nlearning_rate: 0.001\nprogress: false\n"
    )
    outcome = train(load_config(config, {"output_dir": str(tmp_path / "outcome")}))
    cli = [sys.executable, "-m", "rewardserve.cli", "grpo", "--config", str(config)]
    ran = subprocess.run(
        [*cli, "--output-dir", str(tmp_path / "dense"), "--dense", "prm"], capture_output=True, text=True, timeout=400
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    dense = [json.loads(line) for line in (tmp_path / "dense" / "metrics.jsonl").read_text().splitlines()]
    assert len(outcome) == len(dense) == 2
    assert all("dense_score" not in row for row in outcome)
    assert all(isinstance(row["dense_score"], float) and row["invalid"] == 0 for row in dense)
    # The same seed and task (the dense run through the command line): the process
    # advantages make the updates, and so the losses, differ.
    assert dense[0]["reward_mean"] == outcome[0]["reward_mean"]
    assert dense[0]["loss"] != outcome[0]["loss"]

    done = subprocess.run(
        [sys.executable, "-m", "rewardserve.cli", "grpo-plot", str(tmp_path / "outcome"), str(tmp_path / "dense")]
        + ["-o", str(tmp_path / "both.png")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "outcome (2 steps), dense (2 steps)" in done.stdout
    from PIL import Image

    # Six panels, two a line: the mix, exact_match, the dense score, KL, length, flat groups.
    assert Image.open(tmp_path / "both.png").size == (840, 660)
    missing = subprocess.run(
        [sys.executable, "-m", "rewardserve.cli", "grpo-plot", str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode != 0 and "no metrics.jsonl" in missing.stderr
