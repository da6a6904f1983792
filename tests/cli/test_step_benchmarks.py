"""PRMBench's PRMScore and ProcessBench's error-by-position reading
(cli/step_benchmarks.py), and ``eval --format prmbench`` on a PRM."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from sklearn.metrics import f1_score

from rewardserve.cli import benchmarks, step_benchmarks
from rewardserve.cli.main import main

CATEGORIES = [name for names in step_benchmarks.PRMBENCH_GROUPS.values() for name in names]


def prmbench_rows(rng: random.Random, count: int) -> tuple[list[dict], list[list[float | None]]]:
    rows, scores = [], []
    for k in range(count):
        category = CATEGORIES[k % len(CATEGORIES)]
        steps = rng.randint(2, 7)
        errors = [] if category == "multi_solutions" else sorted(rng.sample(range(1, steps + 2), rng.randint(1, 2)))
        rows.append(
            {
                "idx": f"prm_test_p1_{k}",
                "classification": category,
                "modified_question": f"q{k}",
                "modified_process": [f"step {i}" for i in range(steps)],
                "error_steps": errors,  # 1-based; one may lie past the end, as in 100 of PRMBench's rows
            }
        )
        scores.append([None if rng.random() < 0.05 else round(rng.random(), 2) for _ in range(steps)])
    return rows, scores


def pooled_labels(rows, scores, threshold):
    truth, predicted = [], []
    for row, step_scores in zip(rows, scores):
        errors = {e - 1 for e in row["error_steps"]}
        for i, score in enumerate(step_scores):
            if score is not None:
                truth.append(0 if i in errors else 1)
                predicted.append(1 if score > threshold else 0)
    return truth, predicted


def prm_score_by_sklearn(rows, scores, threshold, positive_only=False) -> float:
    truth, predicted = pooled_labels(rows, scores, threshold)
    # PRMBench counts an undefined F1 as -1.
    f1, negative = (
        float(np.nan_to_num(f1_score(truth, predicted, pos_label=label, zero_division=np.nan), nan=-1.0))
        for label in (1, 0)
    )
    return max(f1 if positive_only else 0.5 * f1 + 0.5 * negative, 0.0)


def test_prm_score_is_the_pooled_f1_of_valid_and_erroneous_steps():
    """PRMBench (ssmisya/PRMBench@a1ae4ea, task.py eval_on_hallucination_step and the
    notebook's PRMScore), against scikit-learn's F1 of each class on the pooled steps."""
    rows, scores = prmbench_rows(random.Random(42), 180)
    for threshold in (0.3, 0.5, 0.7):
        out = benchmarks.summary("prmbench", rows, scores, threshold)
        assert out["score"] == pytest.approx(prm_score_by_sklearn(rows, scores, threshold))
        for name in CATEGORIES:
            part = [(r, s) for r, s in zip(rows, scores) if r["classification"] == name]
            expected = prm_score_by_sklearn(
                [r for r, _ in part], [s for _, s in part], threshold, positive_only=name == "multi_solutions"
            )
            assert out["subsets"][name] == pytest.approx(expected), name
        simplicity = (out["subsets"]["redundency"] + out["subsets"]["circular"]) / 2
        assert out["sections"]["Simplicity"] == pytest.approx(simplicity)
        assert set(out["sections"]) == {"Simplicity", "Soundness", "Sensitivity"} and out["complete"]
    # The overall score pools the steps; it is not the mean of the categories.
    assert out["score"] != pytest.approx(sum(out["subsets"].values()) / len(out["subsets"]))


def test_degenerate_counts_read_as_prmbench_s_task_py_reads_them():
    """task.py (lines 204-209): an undefined precision or recall is -1 and still enters
    the F1 formula; an F1 over a zero denominator is -1; a PRMScore below 0 is 0."""
    rows = [{"classification": "circular", "modified_process": ["a", "b"], "error_steps": [2]}]
    out = benchmarks.summary("prmbench", rows, [[0.9, 0.9]])  # every step called valid
    # Negative class: precision -1 (nothing called an error), recall 0: F1 2(-1)(0)/(-1) = 0.
    assert out["f1"] == pytest.approx(2 / 3) and out["negative_f1"] == 0.0
    assert out["score"] == pytest.approx(1 / 3)
    rows = [{"classification": "multi_solutions", "modified_process": ["a", "b"], "error_steps": []}]
    out = benchmarks.summary("prmbench", rows, [[0.9, 0.9]])
    # No error steps and none called: precision and recall -1, F1 2(1)/(-2) = -1.
    assert out["negative_f1"] == -1.0 and out["score"] == 0.0 and out["subsets"]["multi_solutions"] == 1.0


def test_a_row_seen_again_is_left_out_as_prmbench_s_loader_leaves_it():
    """task.py keeps the first row of each (classification, idx): five multi_solutions
    rows of its data come twice, each time with another process."""
    rows, scores = prmbench_rows(random.Random(3), 30)
    again = {**rows[8], "modified_process": ["x", "y", "z"]}
    out = benchmarks.summary("prmbench", [*rows, again], [*scores, [0.1, 0.2, 0.9]])
    assert out == {**benchmarks.summary("prmbench", rows, scores), "rows": 31, "repeated_rows_left_out": 1}


def test_prmbench_rows_that_are_not_its_own_are_named():
    with pytest.raises(ValueError, match="line 3: no 'error_steps'"):
        step_benchmarks.steps_item({"modified_process": ["a"], "classification": "x"}, 3, "prmbench")
    with pytest.raises(ValueError, match="counted from 1"):  # a 0-based export
        step_benchmarks.steps_item(
            {"modified_question": "q", "modified_process": ["a"], "error_steps": [0], "classification": "x"},
            1,
            "prmbench",
        )
    with pytest.raises(ValueError, match="step numbers"):
        step_benchmarks.steps_item(
            {"modified_question": "q", "modified_process": ["a"], "error_steps": ["1"], "classification": "x"},
            1,
            "prmbench",
        )


def test_error_step_accuracy_by_the_first_error_s_position():
    rows = [
        {"label": 0, "split": "math"},  # predicted 0: right
        {"label": 0, "split": "math"},  # predicted 1: wrong
        {"label": 2, "split": "math"},  # predicted 2: right
        {"label": 12, "split": "math"},  # in "10+", predicted -1: wrong
        {"label": -1, "split": "math"},  # no error: not in the figure
    ]
    scores = [[0.1], [0.9, 0.1], [0.9, 0.8, 0.2], [0.9] * 13, [0.9]]
    rows = [{**r, "problem": "q", "steps": ["s"] * len(s)} for r, s in zip(rows, scores)]
    out = benchmarks.summary("processbench", rows, scores, 0.5)
    assert out["error_by_position"] == {
        "0": {"rows": 2, "accuracy": 0.5},
        "2": {"rows": 1, "accuracy": 1.0},
        "10+": {"rows": 1, "accuracy": 0.0},
    }


def test_unbounded_step_scores_try_a_bounded_set_of_thresholds():
    rng = random.Random(9)
    rows = [
        {"label": rng.choice([-1, 0, 1, 2]), "split": "math", "problem": "q", "steps": ["s"] * 3} for _ in range(400)
    ]
    scores = [[rng.gauss(0, 5) for _ in range(3)] for _ in rows]  # log-ratios, every one distinct
    out = benchmarks.summary("processbench", rows, scores, 0.0)
    held_out = sorted({s for steps in scores[::2] for s in steps})
    assert out["best_threshold"]["threshold"] in held_out  # one of the held-out scores' quantiles


def test_eval_format_prmbench_scores_the_modified_process_on_a_prm(qwen2_prm, tmp_path, capsys):
    rows, _ = prmbench_rows(random.Random(7), 12)
    source = tmp_path / "prmbench.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    main(["eval", "--format", "prmbench", "--serve", f"prm={qwen2_prm}", "--model", "prm", str(source), "-o", str(out)])
    assert "prmbench" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    scored = [json.loads(line)["scores"] for line in (out / "rows.jsonl").read_text().splitlines()]
    assert [len(s) for s in scored] == [len(r["modified_process"]) for r in rows]
    assert results["score"] == pytest.approx(prm_score_by_sklearn(rows, scored, 0.5))
    assert (out / "results.png").exists()
