"""The command line beyond serve: offline scoring of a JSONL file (in process or
against a running service, resumable), a reward model's accuracy on preference pairs,
what a configuration would serve, and where the trainer integrations live."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from rewardserve.cli.main import main
from tests.builders import reference_outcome_scores


@pytest.fixture(autouse=True)
def logging_restored():
    """The commands set up the process's logging as the CLI does; put pytest's back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_version_and_paths(capsys):
    done = subprocess.run(
        [sys.executable, "-m", "rewardserve.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.startswith("rewardserve ")
    main(["paths"])
    lines = capsys.readouterr().out.splitlines()
    files = {Path(line.split("\t")[0]).name: Path(line.split("\t")[0]) for line in lines}
    assert set(files) == {"verl.py", "verl_dense.py", "openrlhf.py", "trl.py"} and all(
        p.is_file() for p in files.values()
    )
    assert "def compute_score" in files["verl.py"].read_text()
    assert "TokenRewardManager" in files["verl_dense.py"].read_text()


def test_models_lists_kinds_presets_and_what_a_config_would_serve(capsys, qwen3_rm, tmp_path):
    main(["models", "--model", f"rm={qwen3_rm}"])  # all would load: exit 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        main(["models", "--model", f"rm={qwen3_rm}", "--model", f"gone={tmp_path}/gone:process"])
    assert stopped.value.code == 1  # a check before serving sees the failure in the exit status
    printed = capsys.readouterr()
    assert "1 of " in printed.err and "models would fail to load: gone" in printed.err
    out = printed.out
    kinds = out.splitlines()[0].removeprefix("kinds: ").split(", ")
    assert {"clip_goal", "outcome", "process", "rule", "verifier", "vlm"} <= set(kinds)
    assert "skywork-reward-v2" in out and "qwen2.5-math-prm" in out
    served = {line.split()[0]: line for line in out.split("would serve:")[1].splitlines()[2:] if line.strip()}
    assert served["rm"].split()[1] == "outcome" and served["rm"].endswith("ok")
    assert "no such directory" in served["gone"] and served["math"].endswith("ok")


def test_score_a_file_in_order_and_resume_after_a_cut(tmp_path, capsys):
    items = [
        {"id": f"q{i}", "response": rf"\boxed{{{i % 5}}}", "reference": "2", "group_id": f"g{i // 4}"}
        for i in range(40)
    ]
    source = write_jsonl(tmp_path / "items.jsonl", items)
    out = tmp_path / "out.jsonl"
    main(["score", "--model", "math", str(source), "-o", str(out), "--options", '{"normalize": "group"}'])
    whole = read_jsonl(out)
    assert [r["index"] for r in whole] == list(range(40)) and [r["id"] for r in whole] == [i["id"] for i in items]
    assert [r["score"] for r in whole] == [1.0 if i % 5 == 2 else 0.0 for i in range(40)]
    assert all("advantage" in r for r in whole)
    printed = capsys.readouterr()
    assert "40/40 items" in printed.err and "items/s" in printed.err
    summary = dict(line.split() for line in printed.out.splitlines())
    assert summary["items"] == "40" and summary["invalid"] == "0" and float(summary["mean"]) == pytest.approx(0.2)
    # A run cut after 13 lines and half of the 14th: the re-run writes only the rest.
    text = out.read_text(encoding="utf-8").splitlines(keepends=True)
    out.write_text("".join(text[:13]) + text[13][:9], encoding="utf-8")
    main(["score", "--model", "math", str(source), "-o", str(out), "--options", '{"normalize": "group"}'])
    assert read_jsonl(out) == whole
    # Only the rest was scored: from the start of the group the cut went through.
    assert "resuming after 12 results" in capsys.readouterr().err


def test_score_against_a_running_service_equals_transformers(live_service, qwen3_rm, tmp_path, capsys):
    conversations = [
        [{"role": "user", "content": f"Is {k} prime?"}, {"role": "assistant", "content": "Yes."}] for k in range(6)
    ]
    from tests.models.test_images import png_bytes, url_of

    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url_of(png_bytes())}}]}
    # The last item has an image, which a text model cannot read: it alone is invalid.
    source = write_jsonl(tmp_path / "items.jsonl", [{"messages": c} for c in conversations] + [{"messages": [image]}])
    out = tmp_path / "out.jsonl"
    main(["score", "--url", live_service, "--model", "qwen", str(source), "-o", str(out)])
    results = read_jsonl(out)
    expected = [row[0] for row in reference_outcome_scores(qwen3_rm, conversations)]
    assert [r["score"] for r in results[:6]] == pytest.approx(expected, abs=1e-4)
    assert results[6]["valid"] is False and "error" in results[6]
    assert "invalid  1" in capsys.readouterr().out


def test_score_against_a_closed_port_or_an_unknown_model_is_one_line_and_no_output(live_service, tmp_path, capsys):
    from tests.harness import free_port

    source = write_jsonl(tmp_path / "items.jsonl", [{"response": "x"}] * 3)
    closed = f"http://127.0.0.1:{free_port()}"
    for url, model, named in ((closed, "qwen", closed), (live_service, "no-such-model", "no-such-model")):
        out = tmp_path / "out.jsonl"
        with pytest.raises(SystemExit) as stopped:
            main(["score", "--url", url, "--model", model, str(source), "-o", str(out)])
        assert stopped.value.code != 0
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("rewardserve: error:") and named in err[0], err
        assert not out.exists()  # nothing scored: no empty file left behind


def test_eval_that_scores_nothing_fails(tmp_path, capsys):
    """A rule that needs a reference, on pairs that have none: every pair invalid, exit 1."""
    source = write_jsonl(tmp_path / "pairs.jsonl", [{"prompt": "2+2?", "chosen": "4", "rejected": "5"}] * 3)
    with pytest.raises(SystemExit) as stopped:
        main(["eval", "--serve", "m=math_equiv:rule", "--model", "m", str(source), "-o", str(tmp_path / "eval")])
    assert stopped.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("rewardserve: error: none of the 3 pairs was scored") and "pairs.jsonl" in err[-1]
    assert all(
        not row["valid"] and "reference" in row["error"] for row in read_jsonl(tmp_path / "eval" / "pairs.jsonl")
    )


def test_eval_decides_each_pair_as_rewardbench_does(qwen3_rm, tmp_path, capsys):
    from rewardserve.cli.evaluate import decision

    prompts = [f"Name a colour ({k})." for k in range(5)]
    responses = ["Red.", "Blue, I think.", "Green!", "I cannot say.", "Yellow."]
    lines = [
        {"prompt": p, "chosen": responses[k], "rejected": responses[(k + 1) % 5], "subset": "pairs"}
        for k, p in enumerate(prompts)
    ]
    lines += [
        {
            "prompt": prompts[0],
            "chosen": responses[k],
            "rejected": [r for r in responses if r != responses[k]],
            "subset": "best-of-5",
        }
        for k in range(5)
    ]
    lines.append({"prompt": prompts[1], "chosen": "Same.", "rejected": ["Same.", "Same."], "subset": "best-of-5"})
    source = write_jsonl(tmp_path / "pairs.jsonl", lines)
    main(["eval", "--serve", f"rm={qwen3_rm}", "--model", "rm", str(source), "-o", str(tmp_path / "eval")])
    rows = read_jsonl(tmp_path / "eval" / "pairs.jsonl")

    def reference(prompt: str, response: str) -> float:
        (row,) = reference_outcome_scores(
            qwen3_rm, [[{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]]
        )
        return row[0]

    for line, row in zip(lines, rows):
        rejected = line["rejected"] if isinstance(line["rejected"], list) else [line["rejected"]]
        chosen = reference(line["prompt"], line["chosen"])
        others = [reference(line["prompt"], r) for r in rejected]
        assert row["chosen"] == pytest.approx(chosen, abs=1e-4)
        if all(abs(chosen - o) > 1e-3 for o in others) or len(set(rejected) | {line["chosen"]}) == 1:
            assert row["correct"] == decision(chosen, others)
    # Three identical responses: the chosen one shares the top with two others.
    assert rows[-1]["correct"] == pytest.approx(1 / 3)
    # Exactly one of the five best-of-5 lines has the highest-scoring response as chosen.
    assert sum(1 for r in rows[5:10] if r["correct"] == 1.0) == 1
    summary = json.loads((tmp_path / "eval" / "accuracy.json").read_text())
    pairs = [r["correct"] for r in rows[:5]]
    assert summary["subsets"]["pairs"] == {"pairs": 5, "accuracy": pytest.approx(sum(pairs) / 5)}
    assert summary["subsets"]["best-of-5"]["pairs"] == 6
    from PIL import Image

    assert Image.open(tmp_path / "eval" / "accuracy.png").size[0] == 720
    out = capsys.readouterr().out
    assert "best-of-5" in out and "pairs" in out and "accuracy.png" in out


def test_score_refuses_another_run_s_output_and_overwrite_starts_over(tmp_path, capsys):
    items = [{"response": rf"\boxed{{{i}}}", "reference": "2"} for i in range(6)]
    source = write_jsonl(tmp_path / "items.jsonl", items)
    out = tmp_path / "out.jsonl"
    main(["score", "--model", "math", str(source), "-o", str(out)])
    first = read_jsonl(out)
    record = json.loads((tmp_path / "out.jsonl.run.json").read_text())
    assert record["model"] == "math" and record["input"].startswith("sha256:") and record["items"] == 6
    assert record["service"] == "in process: built-in rules"
    capsys.readouterr()
    # Another input (same length: the old check let it through) and another model: refused,
    # the file untouched, the message naming what differs.
    other = write_jsonl(tmp_path / "other.jsonl", [{**i, "reference": "3"} for i in items])
    for argv, differs in (
        ([str(other)], "input"),
        ([str(source), "--model", "fuzzy"], "model 'math' (now 'fuzzy')"),
        ([str(source), "--options", '{"normalize": "group"}'], "options"),
        ([str(source), "--url", "http://127.0.0.1:1"], "service"),
    ):
        with pytest.raises(SystemExit):
            main(["score", "--model", "math", *argv, "-o", str(out)])
        err = capsys.readouterr().err
        assert "holds another run's results" in err and differs in err and "--overwrite" in err, err
        assert read_jsonl(out) == first
    # A results file with no record of its run is refused too.
    (tmp_path / "out.jsonl.run.json").unlink()
    with pytest.raises(SystemExit):
        main(["score", "--model", "math", str(other), "-o", str(out)])
    assert "no record of the run" in capsys.readouterr().err
    main(["score", "--model", "math", str(other), "-o", str(out), "--overwrite"])
    again = read_jsonl(out)
    assert [r["score"] for r in again] == [1.0 if i == 3 else 0.0 for i in range(6)]
    assert "resuming" not in capsys.readouterr().err
    # The same run again resumes (nothing left to score).
    main(["score", "--model", "math", str(other), "-o", str(out)])
    assert read_jsonl(out) == again and "resuming after 6 results" in capsys.readouterr().err
