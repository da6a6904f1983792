"""A long ``rewardserve eval``: its progress bar, a Ctrl-C and the resume that sends only
what was not scored, a folder that holds another run, and ``--compare A B`` with its
paired bootstrap interval."""

from __future__ import annotations

import json
import os
import random
import signal

import numpy as np
import pytest

from rewardserve.cli import eval_run
from rewardserve.cli.main import main
from rewardserve.client import AsyncRewardClient


def pairs(count: int) -> list[dict]:
    rng = random.Random(5)
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta"]
    return [
        {
            "id": k,
            "prompt": f"Question {k}?",
            "chosen": " ".join(rng.choices(words, k=rng.randint(1, 6))),
            "rejected": " ".join(rng.choices(words, k=rng.randint(1, 6))),
            "subset": ["a", "b"][k % 2],
        }
        for k in range(count)
    ]


def read_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_ctrl_c_keeps_what_was_scored_and_the_same_command_sends_only_the_rest(qwen3_rm, tmp_path, capsys, monkeypatch):
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps(p) + "\n" for p in pairs(10)))
    monkeypatch.setattr(eval_run, "CHUNK_ROWS", 4)
    sent: list[int] = []
    original = AsyncRewardClient.score

    async def score(self, model, items, **options):
        items = list(items)
        sent.append(len(items))
        if interrupt and len(sent) == 2:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C: asyncio cancels the run
        return await original(self, model, items, **options)

    monkeypatch.setattr(AsyncRewardClient, "score", score)
    command = ["eval", "--serve", f"rm={qwen3_rm}", "--model", "rm", str(source)]
    interrupt = True
    with pytest.raises(SystemExit) as stopped:
        main([*command, "-o", str(tmp_path / "run")])
    assert stopped.value.code == 130
    assert "the same command resumes" in capsys.readouterr().err
    assert len(read_lines(tmp_path / "run" / "pairs.jsonl")) == 4  # the first chunk, whole

    interrupt, sent[:] = False, []
    main([*command, "-o", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert "resuming after 4 of 10 rows" in err and "10/10 rows" in err and "ETA" in err
    assert sent == [8, 4]  # rows 5-8 and 9-10, two items each: nothing scored again

    main([*command, "-o", str(tmp_path / "fresh")])
    resumed, fresh = read_lines(tmp_path / "run" / "pairs.jsonl"), read_lines(tmp_path / "fresh" / "pairs.jsonl")
    assert [line["index"] for line in resumed] == list(range(10))
    assert [[r["chosen"], *r["rejected"]] for r in resumed] == [
        pytest.approx([f["chosen"], *f["rejected"]], abs=1e-5) for f in fresh
    ]
    summary = json.loads((tmp_path / "run" / "accuracy.json").read_text())
    assert summary["accuracy"] == json.loads((tmp_path / "fresh" / "accuracy.json").read_text())["accuracy"]


def test_a_folder_holding_another_run_is_refused_not_mixed(qwen3_rm, tmp_path, capsys):
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps(p) + "\n" for p in pairs(3)))
    out = tmp_path / "out"
    main(["eval", "--serve", f"rm={qwen3_rm}", "--model", "rm", str(source), "-o", str(out)])
    source.write_text("".join(json.dumps(p) + "\n" for p in pairs(4)))  # other rows
    before = (out / "pairs.jsonl").read_text()
    with pytest.raises(SystemExit) as stopped:
        main(["eval", "--serve", f"rm={qwen3_rm}", "--model", "rm", str(source), "-o", str(out)])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("rewardserve: error:") and "holds the rows of another run" in err[-1]
    assert (out / "pairs.jsonl").read_text() == before


def lines_of(correct: list[float]) -> list[dict]:
    return [{"index": k, "subset": "all", "correct": c} for k, c in enumerate(correct)]


def test_the_paired_bootstrap_resamples_rows_for_both_models_at_once():
    rng = np.random.default_rng(3)
    a = (rng.random(300) < 0.6).astype(float)
    b = a.copy()
    b[np.flatnonzero(a == 0)[:15]] = 1.0  # B right where A is, and on 15 rows more
    rows = [{}] * len(a)
    low, high = eval_run.paired_bootstrap("pairs", rows, lines_of(list(a)), lines_of(list(b)), 0.5)
    # The same resampling by hand (numpy): the mean of B - A over rows drawn with replacement.
    draws = np.random.default_rng(11).integers(0, len(a), size=(4000, len(a)))
    by_hand = np.percentile((b - a)[draws].mean(axis=1), [2.5, 97.5])
    assert low == pytest.approx(by_hand[0], abs=0.01) and high == pytest.approx(by_hand[1], abs=0.01)
    assert 0 < low < 0.05 < high  # paired: B's 15 extra rows are a difference, not noise
    same = eval_run.paired_bootstrap("pairs", rows, lines_of(list(a)), lines_of(list(a)), 0.5)
    assert same == (0.0, 0.0)


def test_compare_puts_two_models_side_by_side(qwen3_rm, llama_rm, tmp_path, capsys):
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps(p) + "\n" for p in pairs(12)))
    out = tmp_path / "cmp"
    serve = ["--serve", f"qwen={qwen3_rm}", "--serve", f"llama={llama_rm}"]
    main(["eval", *serve, "--compare", "qwen", "llama", str(source), "-o", str(out)])
    printed = capsys.readouterr().out
    compared = json.loads((out / "compare.json").read_text())
    alone = {}
    for name in ("qwen", "llama"):
        main(["eval", *serve, "--model", name, str(source), "-o", str(tmp_path / name)])
        alone[name] = json.loads((tmp_path / name / "accuracy.json").read_text())["accuracy"]
    assert compared["scores"] == pytest.approx(alone)
    assert compared["difference"] == pytest.approx(alone["llama"] - alone["qwen"])
    low, high = compared["interval_95"]
    assert low <= compared["difference"] <= high
    assert "llama - qwen" in printed and "paired bootstrap" in printed
    with pytest.raises(SystemExit):
        main(["eval", *serve, "--model", "qwen", "--compare", "qwen", "llama", str(source), "-o", str(out)])
