"""The step benchmarks' own metrics, for ``rewardserve eval --format F``: a process
reward model scores each row's steps (``/v1/score/steps``, the steps as given), and the
benchmark's metric is read from the step scores.

    processbench   ProcessBench (QwenLM/ProcessBench, code/run_eval_prm_trl.py@04d347e):
                   rows {id, problem, steps, label, split}, label the first wrong step or
                   -1; the prediction is the first step scored below the threshold (-1:
                   none); per split the accuracy on rows with an error and on rows without,
                   and their harmonic mean F1; the score is the mean F1 over the splits.
    prmbench       PRMBench (ssmisya/PRMBench@a1ae4ea, mr_eval/tasks/prmtest_classified/
                   task.py and the PRMScore of mr_visualize/.../form_latex_strs.ipynb): rows
                   {idx, modified_question, modified_process, error_steps (1-based),
                   classification}; only the modified process is scored; a step is
                   predicted valid when its score is above the threshold, and the steps
                   in error_steps are the negative class; true/false positives and
                   negatives are pooled over every step of every row; PRMScore is half
                   the F1 of valid steps plus half the F1 of erroneous ones (its -1 for
                   an undefined precision, recall or F1 kept, a negative score 0); per category the same, except
                   multi_solutions (no errors), which is its positive F1 alone; a group
                   (Simplicity, Soundness, Sensitivity) is the mean of its categories;
                   the score is the PRMScore of the pooled counts, not a mean of the
                   categories.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

STEPS_FORMATS = frozenset({"processbench", "prmbench"})  # scored by /v1/score/steps, a score per step
THRESHOLDS_TRIED = 101  # ProcessBench's threshold search: at most this many candidates


def steps_item(row: dict[str, Any], number: int, fmt: str = "processbench") -> dict[str, Any]:
    """The item whose steps a PRM scores; ValueError naming the line for a row that is
    not the benchmark's."""
    if fmt == "prmbench":
        return prmbench_item(row, number)
    for key in ("problem", "steps", "label"):
        if key not in row:
            raise ValueError(f"line {number}: no {key!r} (processbench rows have problem, steps, label)")
    steps, label = row["steps"], row["label"]
    if not isinstance(steps, list) or not steps or not all(isinstance(s, str) for s in steps):
        raise ValueError(f"line {number}: 'steps' is a list of strings")
    if not isinstance(label, int) or not -1 <= label < len(steps):
        raise ValueError(f"line {number}: 'label' is -1 or the index of a step, not {label!r}")
    return {"prompt": row["problem"], "steps": steps}


# --------------------------------------------------------------------------- ProcessBench


def first_below(step_scores: list[float | None], threshold: float) -> int:
    """The first step scored below ``threshold``, or -1 (unscored steps are not errors)."""
    return next((i for i, s in enumerate(step_scores) if s is not None and s < threshold), -1)


def processbench_f1(rows: list[tuple[dict[str, Any], list[float | None]]], threshold: float) -> dict[str, Any]:
    """Per split: the accuracy on rows with an error, on rows without, and their F1."""
    return split_f1([processbench_hit(row, step_scores, threshold) for row, step_scores in rows])


def processbench_hit(row: dict[str, Any], step_scores: list[float | None], threshold: float) -> tuple[str, bool, bool]:
    """(split, whether the row has an error, whether the first step below the threshold is it)."""
    return str(row.get("split", "all")), row["label"] != -1, first_below(step_scores, threshold) == row["label"]


def split_f1(hits: list[tuple[str, bool, bool]]) -> dict[str, Any]:
    """``hits``: per row its split, whether it has an error, and whether the prediction
    was right."""
    splits: dict[str, dict[str, list[float]]] = defaultdict(lambda: {"error": [], "correct": []})
    for split, has_error, hit in hits:
        splits[split]["error" if has_error else "correct"].append(float(hit))
    out = {}
    for name, parts in sorted(splits.items()):
        error = sum(parts["error"]) / len(parts["error"]) if parts["error"] else None
        correct = sum(parts["correct"]) / len(parts["correct"]) if parts["correct"] else None
        f1 = (
            2 * error * correct / (error + correct)
            if error is not None and correct is not None and error + correct
            else 0.0
        )
        out[name] = {"error_accuracy": error, "correct_accuracy": correct, "f1": f1}
    return out


def mean_f1(hits: list[tuple[str, bool, bool]]) -> float | None:
    """ProcessBench's score: the mean F1 over the splits."""
    splits = split_f1(hits)
    return sum(s["f1"] for s in splits.values()) / len(splits) if splits else None


def processbench(kept: list[tuple[dict[str, Any], list[float | None]]], threshold: float) -> dict[str, Any]:
    splits = processbench_f1(kept, threshold)
    mean_f1 = sum(s["f1"] for s in splits.values()) / len(splits) if splits else None
    # The threshold that maximises the mean F1 on every other row, and the F1 it gives on
    # the rest: chosen on one part, reported on the other.
    held_out, evaluated = kept[::2], kept[1::2]
    scores = sorted({s for _, steps in held_out for s in steps if s is not None})
    candidates = [k / 20 for k in range(21)] if scores and 0 <= scores[0] and scores[-1] <= 1 else scores
    if len(candidates) > THRESHOLDS_TRIED:  # unbounded scores (log-ratios): their quantiles
        candidates = [candidates[round(k * (len(candidates) - 1) / 100)] for k in range(101)]
    best = None
    if held_out and evaluated and candidates:

        def mean_f1_at(part: list[tuple[dict[str, Any], list[float | None]]], t: float) -> float:
            f1s = [float(s["f1"]) for s in processbench_f1(part, t).values()]
            return sum(f1s) / len(f1s)

        chosen = max(candidates, key=lambda t: mean_f1_at(held_out, t))
        best = {"threshold": chosen, "f1_on_the_other_half": mean_f1_at(evaluated, chosen)}
    return {
        "threshold": threshold,
        "splits": splits,
        "subsets": {name: s["f1"] for name, s in splits.items()},
        "counts": split_counts(kept),
        "score": mean_f1,
        "best_threshold": best,
        "error_by_position": error_by_position(kept, threshold),
        "complete": set(splits) == {"gsm8k", "math", "olympiadbench", "omnimath"},
    }


def split_counts(kept: list[tuple[dict[str, Any], Any]]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for row, _ in kept:
        counts[str(row.get("split", "all"))] += 1
    return dict(counts)


def error_by_position(kept: list[tuple[dict[str, Any], list[float | None]]], threshold: float) -> dict[str, Any]:
    """Error-step accuracy by where the first error is (steps 0 to 9, then "10+"): a PRM
    that only finds early errors shows here, not in the F1."""
    hits: dict[int, list[float]] = defaultdict(list)
    for row, step_scores in kept:
        if row["label"] != -1:
            hits[min(row["label"], 10)].append(float(first_below(step_scores, threshold) == row["label"]))
    return {
        ("10+" if at == 10 else str(at)): {"rows": len(v), "accuracy": sum(v) / len(v)}
        for at, v in sorted(hits.items())
    }


# --------------------------------------------------------------------------- PRMBench

PRMBENCH_GROUPS = {
    "Simplicity": ("redundency", "circular"),  # the dataset's own spelling
    "Soundness": ("counterfactual", "step_contradiction", "domain_inconsistency", "confidence"),
    "Sensitivity": ("missing_condition", "deception", "multi_solutions"),
}
NO_ERRORS = "multi_solutions"  # another valid solution: every step is valid


def prmbench_item(row: dict[str, Any], number: int) -> dict[str, Any]:
    for key in ("modified_process", "error_steps", "classification"):
        if key not in row:
            raise ValueError(
                f"line {number}: no {key!r} (prmbench rows have modified_question, modified_process, "
                "error_steps, classification)"
            )
    steps, errors = row["modified_process"], row["error_steps"]
    if not isinstance(steps, list) or not steps or not all(isinstance(s, str) for s in steps):
        raise ValueError(f"line {number}: 'modified_process' is a list of strings")
    if not isinstance(errors, list) or not all(
        isinstance(e, int) and not isinstance(e, bool) and e >= 1 for e in errors
    ):
        raise ValueError(f"line {number}: 'error_steps' is a list of step numbers, counted from 1")
    question = row.get("modified_question", row.get("question"))
    if not isinstance(question, str):
        raise ValueError(f"line {number}: 'modified_question' is a string")
    return {"prompt": question, "steps": steps}


def step_counts(rows: list[tuple[dict[str, Any], list[float | None]]], threshold: float) -> dict[str, int]:
    """True/false positives and negatives over every scored step, a valid step being the
    positive class (an error step listed past the process's end is never read, as
    PRMBench's own loop reads only the steps it has)."""
    counts = {"tp": 0, "fp": 0, "tn": 0, "fn": 0}
    for row, step_scores in rows:
        errors = {e - 1 for e in row["error_steps"]}
        for i, score in enumerate(step_scores):
            if score is None:
                continue
            valid = score > threshold
            key = ("fp" if valid else "tn") if i in errors else ("tp" if valid else "fn")
            counts[key] += 1
    return counts


def _f1(hit: int, false_hit: int, miss: int) -> float:
    """F1 from counts, read as PRMBench's task.py reads it: an undefined precision or
    recall is -1 and still enters the F1; an F1 with a zero denominator is -1."""
    precision = hit / (hit + false_hit) if hit + false_hit else -1.0
    recall = hit / (hit + miss) if hit + miss else -1.0
    return 2 * precision * recall / (precision + recall) if precision + recall != 0 else -1.0


def prm_score(counts: dict[str, int], positive_only: bool = False) -> dict[str, float]:
    f1 = _f1(counts["tp"], counts["fp"], counts["fn"])
    negative_f1 = _f1(counts["tn"], counts["fn"], counts["fp"])
    score = f1 if positive_only else 0.5 * f1 + 0.5 * negative_f1
    return {"f1": f1, "negative_f1": negative_f1, "prm_score": max(score, 0.0)}


def prmbench(kept: list[tuple[dict[str, Any], list[float | None]]], threshold: float) -> dict[str, Any]:
    # A (classification, idx) seen again is left out, as PRMBench's loader keeps the first
    # (five multi_solutions rows of its data come twice).
    seen: set[tuple[str, str]] = set()
    first = []
    for row, step_scores in kept:
        key = (str(row["classification"]), str(row.get("idx")))
        if row.get("idx") is None or key not in seen:
            seen.add(key)
            first.append((row, step_scores))
    repeated = len(kept) - len(first)
    kept = first
    by_category: dict[str, list[tuple[dict[str, Any], list[float | None]]]] = defaultdict(list)
    for row, step_scores in kept:
        by_category[str(row["classification"])].append((row, step_scores))
    categories = {
        name: prm_score(step_counts(part, threshold), positive_only=name == NO_ERRORS)
        for name, part in sorted(by_category.items())
    }
    groups = {}
    for group, names in PRMBENCH_GROUPS.items():
        present = [categories[n]["prm_score"] for n in names if n in categories]
        if present:
            groups[group] = sum(present) / len(present)
    overall = prm_score(step_counts(kept, threshold))
    known = {n for names in PRMBENCH_GROUPS.values() for n in names}
    return {
        "threshold": threshold,
        "categories": categories,
        "subsets": {name: c["prm_score"] for name, c in categories.items()},
        "counts": {name: len(part) for name, part in by_category.items()},
        "sections": groups,
        "f1": overall["f1"],
        "negative_f1": overall["negative_f1"],
        "score": overall["prm_score"] if kept else None,
        "repeated_rows_left_out": repeated,
        "complete": known <= set(categories),
    }
