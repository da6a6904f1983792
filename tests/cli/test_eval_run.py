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

from rewardserve.cli import eval_compare, eval_run
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
    # Ctrl-C as a command run from a shell meets it: Python's own SIGINT handler, which
    # asyncio.run takes over (a test run earlier in this worker may have left another).
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(SystemExit) as stopped:
            main([*command, "-o", str(tmp_path / "run")])
    finally:
        signal.signal(signal.SIGINT, before)
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
    low, high = eval_compare.paired_bootstrap("pairs", rows, lines_of(list(a)), lines_of(list(b)), 0.5)
    # The same resampling by hand (numpy): the mean of B - A over rows drawn with replacement.
    draws = np.random.default_rng(11).integers(0, len(a), size=(4000, len(a)))
    by_hand = np.percentile((b - a)[draws].mean(axis=1), [2.5, 97.5])
    assert low == pytest.approx(by_hand[0], abs=0.01) and high == pytest.approx(by_hand[1], abs=0.01)
    assert 0 < low < 0.05 < high  # paired: B's 15 extra rows are a difference, not noise
    same = eval_compare.paired_bootstrap("pairs", rows, lines_of(list(a)), lines_of(list(a)), 0.5)
    assert same == (0.0, 0.0)


def write_config(path, models: dict[str, dict]) -> str:
    import yaml

    path.write_text(yaml.safe_dump({"models": [{"name": name, **spec} for name, spec in models.items()]}))
    return str(path)


def with_a_long_row(count: int, long_at: int) -> list[dict]:
    rows = pairs(count)
    rows[long_at]["chosen"] = " ".join(["alpha beta gamma"] * 12)  # over 64 tokens, under 512
    return rows


def test_a_row_the_service_refuses_marks_only_itself_invalid_and_can_be_sent_again(qwen3_rm, tmp_path, capsys):
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps(p) + "\n" for p in with_a_long_row(6, 3)))
    short = write_config(tmp_path / "short.yaml", {"rm": {"source": str(qwen3_rm), "max_tokens": 64}})
    out = tmp_path / "out"
    main(["eval", "--config", short, "--model", "rm", str(source), "-o", str(out)])
    lines = read_lines(out / "pairs.jsonl")
    assert [line.get("valid", True) for line in lines] == [True, True, True, False, True, True]
    assert lines[3]["error"].startswith("413 payload_too_large") and "64" in lines[3]["error"]
    assert json.loads((out / "accuracy.json").read_text())["invalid"] == 1
    capsys.readouterr()
    # The same rows, the model given room: --retry-invalid sends the invalid one again.
    roomy = write_config(tmp_path / "roomy.yaml", {"rm": {"source": str(qwen3_rm)}})
    main(["eval", "--config", roomy, "--model", "rm", str(source), "-o", str(out), "--retry-invalid"])
    assert "1 invalid ones sent again" in capsys.readouterr().err
    again = read_lines(out / "pairs.jsonl")
    assert all(line.get("valid", True) for line in again) and again[:3] == lines[:3] and again[4:] == lines[4:]


def test_a_folder_keeps_one_run_whatever_its_format_and_a_failed_start_holds_nothing(qwen3_rm, tmp_path, capsys):
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps(p) + "\n" for p in pairs(3)))
    out = tmp_path / "out"
    with pytest.raises(SystemExit):  # no such model: nothing scored, nothing kept
        main(["eval", "--serve", f"rm={qwen3_rm}", "--model", "typo", str(source), "-o", str(out)])
    main(["eval", "--serve", f"rm={qwen3_rm}", "--model", "rm", str(source), "-o", str(out)])
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(
            [
                "eval",
                "--format",
                "rewardbench",
                "--serve",
                f"rm={qwen3_rm}",
                "--model",
                "rm",
                str(source),
                "-o",
                str(out),
            ]
        )
    assert "format 'pairs', not 'rewardbench'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main(["eval", "--serve", f"rm={qwen3_rm}", "--model", "rm", "--threshold", "nan", str(source), "-o", str(out)])
    assert stopped.value.code == 2 and "--threshold is a number" in capsys.readouterr().err


def test_compare_reads_the_difference_on_the_rows_both_models_scored(qwen3_rm, llama_rm, tmp_path, capsys):
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps(p) + "\n" for p in with_a_long_row(12, 5)))
    # The same weights twice, one of them too short for row 5: B - A is exactly 0 on the rest.
    config = write_config(
        tmp_path / "two.yaml",
        {
            "a": {"source": str(qwen3_rm)},
            "b": {"source": str(qwen3_rm), "max_tokens": 64},
            "llama": {"source": str(llama_rm)},
        },
    )
    out = tmp_path / "cmp"
    main(["eval", "--config", config, "--compare", "a", "b", str(source), "-o", str(out)])
    compared = json.loads((out / "compare.json").read_text())
    assert compared["rows"] == 12 and compared["rows_both_scored"] == 11
    assert compared["difference"] == 0.0 and compared["interval_95"] == [0.0, 0.0]
    alone_a = json.loads((out / "a" / "accuracy.json").read_text())["accuracy"]
    assert compared["scores"]["a"] == alone_a

    main(["eval", "--config", config, "--compare", "a", "llama", str(source), "-o", str(tmp_path / "cmp2")])
    printed = capsys.readouterr().out
    compared = json.loads((tmp_path / "cmp2" / "compare.json").read_text())
    alone = {
        name: json.loads((tmp_path / "cmp2" / name / "accuracy.json").read_text())["accuracy"]
        for name in ("a", "llama")
    }
    assert compared["scores"] == alone and compared["rows_both_scored"] == 12
    assert compared["difference"] == pytest.approx(alone["llama"] - alone["a"])
    low, high = compared["interval_95"]
    assert low <= compared["difference"] <= high
    assert "llama - a" in printed and "paired bootstrap" in printed
    with pytest.raises(SystemExit):
        main(["eval", "--config", config, "--model", "a", "--compare", "a", "llama", str(source), "-o", str(out)])
