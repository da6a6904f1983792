"""``rewardserve eval --format rewardbench | rewardbench2`` computes each benchmark's own
metric: on the same scores, equal to PyPI rewardbench 0.1.4's functions
(rewardbench/utils.py ``calculate_scores_per_section`` with its constants,
``reroll_and_score_dataset``, ``process_single_model``), run in rewardbench's own
virtualenv (it pins transformers 4.51: ``make rewardbench-venv``)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import subprocess
from pathlib import Path

import pytest

from rewardserve.cli import benchmarks, step_benchmarks
from rewardserve.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
RB_PYTHON = ROOT / ".venv-rewardbench" / "bin" / "python"

THEIRS = r"""
import json, sys
import numpy as np
from datasets import Dataset
from rewardbench.constants import EXAMPLE_COUNTS, SUBSET_MAPPING
from rewardbench.utils import calculate_scores_per_section, process_single_model, reroll_and_score_dataset

given = json.load(open(sys.argv[1]))
# RewardBench 1, as rewardbench.py groups its results: per subset, chosen > rejected.
grouped = {}
for subset, chosen, rejected in given["rb1"]:
    grouped.setdefault(subset, []).append(chosen > rejected)
subsets = {k: sum(v) / len(v) for k, v in grouped.items()}
sections = calculate_scores_per_section(EXAMPLE_COUNTS, SUBSET_MAPPING, subsets)
# RewardBench 2: every completion a row, rerolled into one row per prompt.
out2 = {}
for subset, rows in given["rb2"].items():
    if subset == "Ties":
        flat = [{"id": r["id"], "scores": r["scores"], "num_correct": r["num_correct"]} for r in rows]
        _, out2[subset] = process_single_model(Dataset.from_list(flat))
        continue
    unrolled = Dataset.from_list(
        [{"id": r["id"], "text": str(k), "scores": s} for r in rows for k, s in enumerate(r["scores"])]
    )
    rerolled = reroll_and_score_dataset(unrolled, [len(r["scores"]) for r in rows])
    out2[subset] = float(np.mean(rerolled["results"]))
print(json.dumps({"subsets": subsets, "sections": sections, "rb2": {k: float(v) for k, v in out2.items()}}))
"""


def rb1_rows(rng: random.Random) -> list[tuple[str, float, float]]:
    rows = []
    for counts in benchmarks.REWARDBENCH_SECTIONS.values():
        for subset in counts:
            for _ in range(rng.randint(3, 9)):
                chosen = round(rng.gauss(0, 1), 1)  # coarse: some ties, which count as wrong
                rows.append((subset, chosen, chosen if rng.random() < 0.1 else round(rng.gauss(0, 1), 1)))
    return rows


def rb2_rows(rng: random.Random) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for subset in ("Factuality", "Precise IF", "Math", "Safety", "Focus"):
        out[subset] = [
            {"id": f"{subset}-{k}", "num_correct": 1, "scores": [float(rng.randint(0, 4)) for _ in range(4)]}
            for k in range(rng.randint(4, 10))
        ]
    ties = []
    for pid in range(12):
        for kind in ("ref", "tied"):
            if kind == "ref" and pid == 11:
                continue  # a tied prompt without its ref
            correct = rng.randint(1, 4) if kind == "tied" else 1
            scores = [rng.gauss(1, 1) for _ in range(correct)] + [rng.gauss(0, 1) for _ in range(rng.randint(1, 5))]
            ties.append({"id": f"{kind}:{pid}", "num_correct": correct, "scores": scores})
    out["Ties"] = ties
    return out


@pytest.mark.long(10)
def test_the_metrics_equal_rewardbench_s_own_on_the_same_scores(tmp_path):
    if not RB_PYTHON.exists():
        pytest.skip(f"{RB_PYTHON} is missing: `make rewardbench-venv` builds it")
    rng = random.Random(42)
    rb1, rb2 = rb1_rows(rng), rb2_rows(rng)
    given = tmp_path / "given.json"
    given.write_text(json.dumps({"rb1": rb1, "rb2": rb2}))
    done = subprocess.run(
        [str(RB_PYTHON), "-c", THEIRS, str(given)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])

    ours1 = benchmarks.summary(
        "rewardbench",
        [{"subset": s, "prompt": "p", "chosen": "c", "rejected": "r"} for s, _, _ in rb1],
        [[c, r] for _, c, r in rb1],
    )
    assert ours1["subsets"] == pytest.approx(theirs["subsets"], abs=1e-12)
    assert ours1["sections"] == pytest.approx(theirs["sections"], abs=1e-12)
    assert ours1["score"] == pytest.approx(sum(theirs["sections"].values()) / 4, abs=1e-12) and ours1["complete"]

    rows = [{"subset": s, **r} for s, listed in rb2.items() for r in listed]
    ours2 = benchmarks.summary("rewardbench2", rows, [r["scores"] for r in rows])
    assert ours2["subsets"] == pytest.approx(theirs["rb2"], abs=1e-12)
    assert 0 < ours2["subsets"]["Ties"] < 1 and ours2["complete"]
    assert ours2["score"] == pytest.approx(sum(theirs["rb2"].values()) / 6, abs=1e-12)


def test_rows_that_are_not_the_benchmark_s_are_named():
    with pytest.raises(ValueError, match="line 3: no 'rejected'"):
        benchmarks.responses("rewardbench", {"prompt": "p", "chosen": "c"}, 3)
    with pytest.raises(ValueError, match="one chosen and one rejected"):
        benchmarks.responses("rewardbench", {"prompt": "p", "chosen": "c", "rejected": ["a", "b"]}, 1)
    with pytest.raises(ValueError, match="'ref:N' or 'tied:N'"):
        benchmarks.responses("rewardbench2", {"prompt": "p", "chosen": ["c"], "rejected": ["r"], "subset": "Ties"}, 1)
    ties = {"id": "ref:0", "prompt": "p", "chosen": ["c"], "rejected": ["r"], "subset": "Ties"}
    for bad in (None, [1], 1.7, 2, 0, True):
        with pytest.raises(ValueError, match="'num_correct' is a whole number from 1 to 1"):
            benchmarks.responses("rewardbench2", {**ties, "num_correct": bad}, 1)
    partial = benchmarks.summary(
        "rewardbench", [{"subset": "hep-go", "prompt": "p", "chosen": "c", "rejected": "r"}] * 2, [[1.0, 0.0], None]
    )
    assert partial["invalid"] == 1 and partial["sections"] == {"Reasoning": 1.0} and not partial["complete"]


def test_eval_format_rewardbench2_scores_the_rows_on_a_model(qwen3_rm, tmp_path, capsys):
    rows = [
        {"id": "m-0", "prompt": "2+2?", "chosen": ["4"], "rejected": ["5", "22", "four?"], "subset": "Math"},
        {
            "id": "f-0",
            "prompt": "Sky colour?",
            "chosen": ["Blue."],
            "rejected": ["Red.", "Green.", "Hm."],
            "subset": "Focus",
        },
        {
            "id": "ref:0",
            "prompt": "A prime?",
            "chosen": ["7"],
            "rejected": ["8", "9"],
            "num_correct": 1,
            "subset": "Ties",
        },
        {
            "id": "tied:0",
            "prompt": "A prime?",
            "chosen": ["7", "11"],
            "rejected": ["8"],
            "num_correct": 2,
            "subset": "Ties",
        },
    ]
    source = tmp_path / "rb2.jsonl"
    bad = {"id": "x", "prompt": "?", "chosen": ["a"], "subset": "Math"}  # no rejected
    source.write_text("".join(json.dumps(r) + "\n" for r in [*rows, bad]))
    out = tmp_path / "out"
    args = ["eval", "--format", "rewardbench2", "--serve", f"rm={qwen3_rm}", "--model", "rm", str(source)]
    with pytest.raises(SystemExit):
        main([*args, "-o", str(tmp_path / "strict"), "--strict"])
    assert "line 5: no 'rejected'" in capsys.readouterr().err
    main([*args, "-o", str(out)])
    printed = capsys.readouterr().out
    assert "rewardbench2 (partial: not every subset is here)" in printed
    assert "skipped: line 5: no 'rejected'" in printed
    results = json.loads((out / "results.json").read_text())
    scored = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert [len(r["scores"]) for r in scored[:4]] == [4, 4, 3, 3] and scored[4]["valid"] is False
    assert results["invalid"] == 1 and results["rows"] == 5
    again = benchmarks.summary("rewardbench2", rows, [r["scores"] for r in scored[:4]])
    assert results["subsets"] == again["subsets"] and set(results["subsets"]) == {"Math", "Focus", "Ties"}
    assert (out / "results.png").exists()


def test_rm_bench_reads_its_3x3_matrix_as_hard_normal_easy():
    """The matrix as RM-Bench's README (THU-KEG/RM-Bench README.md@2119ec5,
    compute_accuracy) builds it, with numpy, beside ours."""
    import numpy as np

    rng = random.Random(3)
    rows, scores = [], []
    for k in range(40):
        domain = ["chat", "code", "math", "safety-refuse", "safety-response"][k % 5]
        rows.append({"id": k, "prompt": "p", "chosen": ["a", "b", "c"], "rejected": ["d", "e", "f"], "domain": domain})
        scores.append([round(rng.gauss(0.3, 1), 1) for _ in range(3)] + [round(rng.gauss(0, 1), 1) for _ in range(3)])
    ours = benchmarks.summary("rm-bench", rows, scores)
    for domain in ("chat", "code", "math", "safety"):
        mine = [s for r, s in zip(rows, scores) if r["domain"].split("-")[0] == domain]
        matrix = np.zeros((3, 3))
        for s in mine:
            for i in range(3):
                for j in range(3):
                    matrix[i][j] += s[i] > s[3 + j]
        matrix /= len(mine)
        got = ours["domains"][domain]
        assert np.allclose(got["matrix"], matrix)
        assert got["hard"] == pytest.approx(np.sum(np.triu(matrix, 1)) / 3)
        assert got["normal"] == pytest.approx(np.mean(np.diag(matrix)))
        assert got["easy"] == pytest.approx(np.sum(np.tril(matrix, -1)) / 3)
    assert ours["counts"] == {"chat": 8, "code": 8, "math": 8, "safety": 16} and ours["complete"]
    assert ours["score"] == pytest.approx(sum(d["score"] for d in ours["domains"].values()) / 4)


def test_processbench_f1_per_split_and_a_threshold_chosen_on_half():
    rows = [
        {"id": 0, "label": 1, "split": "gsm8k"},  # first below 0.5: step 1, right
        {"id": 1, "label": -1, "split": "gsm8k"},  # none below: right
        {"id": 2, "label": 0, "split": "gsm8k"},  # predicted 2: wrong
        {"id": 3, "label": -1, "split": "math"},  # predicted 0: wrong
        {"id": 4, "label": 2, "split": "math"},  # step 2 unscored (past the context): -1, wrong
    ]
    step_scores = [[0.9, 0.2, 0.1], [0.8, 0.7], [0.6, 0.7, 0.4], [0.3], [0.9, 0.8, None]]
    out = benchmarks.summary("processbench", [{**r, "problem": "q", "steps": ["s"]} for r in rows], step_scores)
    gsm = out["splits"]["gsm8k"]
    assert gsm["error_accuracy"] == 0.5 and gsm["correct_accuracy"] == 1.0 and gsm["f1"] == pytest.approx(2 / 3)
    assert out["splits"]["math"] == {"error_accuracy": 0.0, "correct_accuracy": 0.0, "f1": 0.0}
    assert out["score"] == pytest.approx(1 / 3) and not out["complete"]
    best = out["best_threshold"]
    assert best is not None and 0 <= best["threshold"] <= 1
    with pytest.raises(ValueError, match="'label' is -1 or the index of a step"):
        step_benchmarks.steps_item({"problem": "q", "steps": ["a"], "label": 3}, 1)


def test_eval_format_processbench_reads_a_prm_s_step_scores(qwen2_prm, tmp_path, capsys):
    rows = [
        {
            "id": f"g{k}",
            "problem": f"What is {k}+{k}?",
            "steps": [f"{k}+{k}", f"= {2 * k}", "done"],
            "label": [-1, 1, 0][k % 3],
            "split": "gsm8k",
        }
        for k in range(6)
    ]
    source = tmp_path / "pb.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    main(
        [
            "eval",
            "--format",
            "processbench",
            "--serve",
            f"prm={qwen2_prm}",
            "--model",
            "prm",
            str(source),
            "-o",
            str(out),
            "--threshold",
            "0.5",
        ]
    )
    assert "processbench (partial" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    scored = [json.loads(line)["scores"] for line in (out / "rows.jsonl").read_text().splitlines()]
    assert [len(s) for s in scored] == [3] * 6 and all(0 <= x <= 1 for s in scored for x in s)
    assert results["splits"] == benchmarks.summary("processbench", rows, scored, 0.5)["splits"]


def test_judgebench_decides_as_its_reward_model_judges_in_both_orders():
    """Hand-made pairs whose answers follow ScalerLab/JudgeBench@12a499c: utils/judges.py
    (a reward model says "A>B" only when A scores strictly higher) and utils/metrics.py
    compute_final_metrics (both orders, the second flipped back; a split is a tie)."""
    rows = [
        {"pair_id": 1, "question": "q", "response_A": "a", "response_B": "b", "label": "A>B", "source": "mmlu-pro-law"},
        {
            "pair_id": 2,
            "question": "q",
            "response_A": "a",
            "response_B": "b",
            "label": "A>B",
            "source": "livebench-reasoning",
        },
        {
            "pair_id": 3,
            "question": "q",
            "response_A": "a",
            "response_B": "b",
            "label": "B>A",
            "source": "livecodebench",
        },
        {
            "pair_id": 4,
            "question": "q",
            "response_A": "a",
            "response_B": "b",
            "label": "B>A",
            "source": "livebench-math",
        },
    ]
    scores = [[2.0, 1.0], [1.0, 2.0], [1.0, 1.0], [0.0, 3.0]]
    out = benchmarks.summary("judgebench", rows, scores)
    assert out["subsets"] == {"coding": 0.0, "knowledge": 1.0, "math": 1.0, "reasoning": 0.0}
    assert out["score"] == 0.5 and out["single_game"] == 0.75 and out["inconsistent"] == 0.25 and out["complete"]
    with pytest.raises(ValueError, match="'label' is 'A>B' or 'B>A'"):
        benchmarks.responses("judgebench", {**rows[0], "label": "A=B"}, 2)


def test_a_judge_s_verdicts_are_decided_in_each_order_on_its_own():
    """A judge's two numbers are P(A better) with A first and P(B better) with B first:
    JudgeBench's two games (utils/metrics.py), a split between them a tie."""
    rows = [
        {"question": "q", "response_A": "a", "response_B": "b", "label": label, "source": "mmlu-pro-x"}
        for label in ("A>B", "A>B", "B>A", "B>A")
    ]
    verdicts = [[0.9, 0.2], [0.7, 0.6], [0.4, 0.8], [0.5, 0.5]]
    # Row 1: A>B, A>B, right. Row 2: A>B then B>A: a split, wrong, inconsistent. Row 3:
    # B>A twice, right. Row 4: neither order says its first is better: B>A, then A>B, a
    # split. Every first game matches the label.
    out = benchmarks.summary("judgebench", rows, verdicts, judged=True)
    assert out["score"] == 0.5 and out["single_game"] == 1.0 and out["inconsistent"] == 0.5


async def test_eval_asks_a_judge_judgebench_s_pairs_through_compare_in_both_orders(judge_lm, tmp_path):
    from rewardserve.models.spec import ModelSpec
    from rewardserve.service.settings import Settings
    from tests.harness import serve_in_process

    answers = ["4", "five", "It is 4.", "22"]
    rows = [
        {
            "pair_id": k,
            "question": "What is 2+2?",
            "response_A": answers[k],
            "response_B": answers[(k + 1) % 4],
            "label": ["A>B", "B>A"][k % 2],
            "source": ["mmlu-pro-math", "livebench-math"][k % 2],
        }
        for k in range(4)
    ]
    source = tmp_path / "jb.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    args = ["eval", "--format", "judgebench", "--serve", f"judge={judge_lm}:verifier", "--model", "judge"]
    await asyncio.to_thread(main, [*args, str(source), "-o", str(out)])
    lines = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    results = json.loads((out / "results.json").read_text())
    assert all(line["judge"] for line in lines) and results["judged"].startswith("by /v1/compare")
    # Each order as /v1/verify judges it with the pairwise template /v1/compare uses.
    settings = Settings(models=[ModelSpec(name="judge", kind="verifier", source=str(judge_lm))], builtin_rules=False)
    async with serve_in_process(settings) as (_, http):
        for row, line in zip(rows, lines):
            for (a, b), got in zip(
                ((row["response_A"], row["response_B"]), (row["response_B"], row["response_A"])), line["scores"]
            ):
                body = {
                    "model": "judge",
                    "items": [{"prompt": row["question"], "response": a}],
                    "options": {"template": "prometheus_relative", "variables": {"response_a": a, "response_b": b}},
                }
                verified = (await http.post("/v1/verify", json=body)).json()["results"][0]["score"]
                assert got == pytest.approx(verified, abs=1e-5)
    expected = benchmarks.summary("judgebench", rows, [line["scores"] for line in lines], judged=True)
    assert {k: results[k] for k in ("subsets", "score", "single_game", "inconsistent")} == {
        k: expected[k] for k in ("subsets", "score", "single_game", "inconsistent")
    }


@pytest.mark.parametrize(
    ("fmt", "row"),
    [
        ("rewardbench", {"id": 1, "prompt": "2+2?", "chosen": "4", "rejected": "5", "subset": "math-prm"}),
        (
            "rm-bench",
            {
                "id": 1,
                "prompt": "2+2?",
                "chosen": ["4", "It is 4.", "**4**"],
                "rejected": ["5", "It is 5.", "**5**"],
                "domain": "math",
            },
        ),
        (
            "judgebench",
            {
                "pair_id": "p1",
                "question": "2+2?",
                "response_A": "4",
                "response_B": "5",
                "label": "A>B",
                "source": "livebench-math",
            },
        ),
    ],
)
def test_each_format_end_to_end_on_a_model(qwen3_rm, tmp_path, capsys, fmt, row):
    source = tmp_path / "rows.jsonl"
    source.write_text(json.dumps(row) + "\n")
    out = tmp_path / "out"
    main(["eval", "--format", fmt, "--serve", f"rm={qwen3_rm}", "--model", "rm", str(source), "-o", str(out)])
    assert f"{fmt} (partial" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    (scored,) = [json.loads(line)["scores"] for line in (out / "rows.jsonl").read_text().splitlines()]
    setup = results.pop("setup")
    assert results == {"model": "rm", **benchmarks.summary(fmt, [row], [scored]), "bad_rows": []}
    # What scored it is recorded, as RewardBench records its chat template and length.
    from transformers import AutoConfig, AutoTokenizer

    template = AutoTokenizer.from_pretrained(qwen3_rm).chat_template
    assert setup["chat_template"] == "tokenizer" and setup["truncate"] == "error"
    assert setup["chat_template_sha256"] == hashlib.sha256(template.encode()).hexdigest()
    assert setup["max_length"] == AutoConfig.from_pretrained(qwen3_rm).max_position_embeddings


def test_every_format_end_to_end_against_a_running_service(live_service, tmp_path, capsys):
    """Each format's small file in its benchmark's field names, through the CLI against a
    real uvicorn process (``--url``): the rows' scores come back, and the metric is the
    format's own over them."""
    rows = {
        "rewardbench": ("qwen", [{"id": 1, "prompt": "2+2?", "chosen": "4", "rejected": "5", "subset": "math-prm"}]),
        "rewardbench2": (
            "qwen",
            [{"id": "m-0", "prompt": "2+2?", "chosen": ["4"], "rejected": ["5", "22", "four?"], "subset": "Math"}],
        ),
        "rm-bench": (
            "qwen",
            [
                {
                    "id": 1,
                    "prompt": "2+2?",
                    "chosen": ["4", "It is 4.", "**4**"],
                    "rejected": ["5", "It is 5.", "**5**"],
                    "domain": "math",
                }
            ],
        ),
        "judgebench": (
            "qwen",
            [
                {
                    "pair_id": "p1",
                    "question": "2+2?",
                    "response_A": "4",
                    "response_B": "5",
                    "label": "A>B",
                    "source": "mmlu-pro-math",
                }
            ],
        ),
        "processbench": (
            "prm",
            [{"id": "g0", "problem": "What is 2+2?", "steps": ["2+2", "= 4", "done"], "label": -1, "split": "gsm8k"}],
        ),
        "prmbench": (
            "prm",
            [
                {
                    "idx": "prm_test_p1_0",
                    "classification": "circular",
                    "modified_question": "What is 2+2?",
                    "modified_process": ["2+2", "= 5", "done"],
                    "error_steps": [2],
                }
            ],
        ),
    }
    for fmt, (model, given) in rows.items():
        source = tmp_path / f"{fmt}.jsonl"
        source.write_text("".join(json.dumps(r) + "\n" for r in given))
        out = tmp_path / fmt
        main(["eval", "--format", fmt, "--url", live_service, "--model", model, str(source), "-o", str(out)])
        assert fmt in capsys.readouterr().out
        results = json.loads((out / "results.json").read_text())
        scores = [json.loads(line)["scores"] for line in (out / "rows.jsonl").read_text().splitlines()]
        assert results["setup"]["model_source"] and results["invalid"] == 0, fmt
        expected = benchmarks.summary(fmt, given, scores)
        assert {k: results[k] for k in expected} == expected, fmt
