"""A reward model's accuracy on preference data: ``rewardserve eval``.

Each line holds ``prompt``, ``chosen`` and ``rejected`` (one response or several, as
RewardBench 2's best-of-N), optionally ``subset`` and ``id``. Every response is scored
by ``/v1/score`` on the model, as a user turn and an assistant turn. The decisions are
RewardBench's: with one rejected response a pair is right when the chosen one scores
strictly higher (rewardbench/rewardbench.py); with several, right by 1/k when the chosen
one ties k responses at the top (rewardbench/utils.py, reroll_and_score_dataset).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from rewardserve.cli.score import table
from rewardserve.client import AsyncRewardClient


def pair_items(line: dict[str, Any], number: int) -> list[dict[str, Any]]:
    """The scored items of one preference line: the chosen response, then the rejected."""
    for key in ("prompt", "chosen", "rejected"):
        if key not in line:
            raise ValueError(f"line {number}: no {key!r}")
    rejected = line["rejected"] if isinstance(line["rejected"], list) else [line["rejected"]]
    if not rejected or not all(isinstance(r, str) for r in [line["chosen"], *rejected]):
        raise ValueError(f"line {number}: 'chosen' is a string and 'rejected' one or a list of them")
    return [{"prompt": line["prompt"], "response": r} for r in [line["chosen"], *rejected]]


def decision(chosen: float, rejected: list[float]) -> float:
    if len(rejected) == 1:
        return 1.0 if chosen > rejected[0] else 0.0
    top = max([chosen, *rejected])
    return 1.0 / sum(1 for s in [chosen, *rejected] if s == top) if chosen == top else 0.0


def checked_rows(fmt: str, rows: list[dict[str, Any]], strict: bool) -> list[str | None]:
    """Per row, why it is not one of the benchmark's (its line named), or None; with
    ``strict`` the first bad row stops the run (ValueError, one line)."""
    from rewardserve.cli import benchmarks
    from rewardserve.cli.step_benchmarks import STEPS_FORMATS, steps_item

    problems: list[str | None] = []
    for number, row in enumerate(rows, 1):
        try:
            if fmt in STEPS_FORMATS:
                steps_item(row, number, fmt)
            else:
                benchmarks.row_items(fmt, row, number)
            problems.append(None)
        except ValueError as exc:
            if strict:
                raise
            problems.append(str(exc))
    return problems


async def benchmark_scores(
    client: AsyncRewardClient,
    model: str,
    fmt: str,
    rows: list[dict[str, Any]],
    problems: list[str | None],
    judge: bool = False,
) -> list[list[float | None] | str]:
    """Per row, its responses' scores (the step benchmarks: its steps' scores; a judge on
    JudgeBench: its verdict in each order, by /v1/compare), or why not (a bad row is not
    sent)."""
    from rewardserve.cli import benchmarks
    from rewardserve.cli.step_benchmarks import STEPS_FORMATS, steps_item

    good = [(n, row) for n, (row, problem) in enumerate(zip(rows, problems), 1) if problem is None]
    got: list[list[float | None] | str] = []
    if judge:
        pairs = [{"prompt": row["question"], "responses": benchmarks.responses(fmt, row, n)} for n, row in good]
        compared = (await client.compare(model, pairs)).results if pairs else []
        got = [
            [r.first_shown[0][1], r.first_shown[1][0]]
            if r.valid and r.first_shown
            else (r.error or "the model gave no verdict per order (/v1/compare's first_shown)")
            for r in compared
        ]
    elif fmt in STEPS_FORMATS:
        items = [steps_item(row, n, fmt) for n, row in good]
        stepped = (
            (await client.score_steps(model, items, steps_from="steps", truncate="steps")).results if items else []
        )
        got = [list(r.step_scores or []) if r.valid else (r.error or "invalid") for r in stepped]
    else:
        per_row = [benchmarks.row_items(fmt, row, n) for n, row in good]
        flat = [item for items in per_row for item in items]
        results = (await client.score(model, flat)).results if flat else []
        at = 0
        for ts in per_row:
            scored = results[at : at + len(ts)]
            at += len(ts)
            invalid = [r.error or "invalid" for r in scored if not r.valid or r.score is None]
            got.append(invalid[0] if invalid else [float(r.score) for r in scored])  # type: ignore[arg-type]
    answers = iter(got)
    return [next(answers) if problem is None else problem for problem in problems]


def benchmark_line(
    index: int, row: dict[str, Any], scored: list[float | None] | str, judge: bool = False
) -> dict[str, Any]:
    """A row's line of ``rows.jsonl``: its scores (``judge``: a judge's verdict in each
    order), or why it has none."""
    where = next((row[k] for k in ("subset", "domain", "split", "source", "classification") if k in row), None)
    line: dict[str, Any] = {"index": index, "id": row.get("id", row.get("idx", row.get("pair_id"))), "subset": where}
    if judge:
        line["judge"] = True
    if isinstance(scored, str):
        line.update(valid=False, error=scored)
    else:
        line["scores"] = scored
    return line


def line_scores(lines: list[dict[str, Any]]) -> list[list[float | None] | None]:
    return [line.get("scores") if line.get("valid", True) else None for line in lines]


def benchmark_summary(
    model: str,
    fmt: str,
    rows: list[dict[str, Any]],
    lines: list[dict[str, Any]],
    problems: list[str | None],
    threshold: float,
) -> dict[str, Any]:
    """The benchmark's own metric over the rows' lines (cli/benchmarks.py), with the first
    rows that were not the benchmark's, by line."""
    from rewardserve.cli import benchmarks

    judged = any(line.get("judge") for line in lines)
    out = {"model": model, **benchmarks.summary(fmt, rows, line_scores(lines), threshold, judged)}
    if judged:
        out["judged"] = "by /v1/compare, each pair in both orders"
    out["bad_rows"] = [p for p in problems if p is not None][:20]
    return out


def plot_benchmark(out: dict[str, Any], out_dir: Path) -> None:
    bars = {
        "model": out["model"],
        "pairs": out["rows"],
        "subsets": {name: {"pairs": out["counts"][name], "accuracy": v} for name, v in out["subsets"].items()},
    }
    plot_accuracy(bars, out_dir / "results.png")
    by_position = out.get("error_by_position")
    if by_position:  # a PRM's error-step accuracy by where the first error is
        plot_accuracy(
            {
                "model": f"{out['model']}, error-step accuracy by the first error's step",
                "pairs": sum(v["rows"] for v in by_position.values()),
                "subsets": {
                    f"step {k}": {"pairs": v["rows"], "accuracy": v["accuracy"]} for k, v in by_position.items()
                },
            },
            out_dir / "error_by_position.png",
        )


def benchmark_table(out: dict[str, Any]) -> str:
    rows = [("subset", "rows", "score")]
    rows += [(name, str(out["counts"][name]), f"{v:.4f}") for name, v in out["subsets"].items()]
    rows += [(f"section: {name}", "", f"{v:.4f}") for name, v in out.get("sections", {}).items()]
    keys = ("hard", "normal", "easy", "single_game", "inconsistent")
    rows += [(key, "", f"{out[key]:.4f}") for key in keys if out.get(key) is not None]
    best = out.get("best_threshold")
    if best:
        rows.append(
            (
                f"F1 at threshold {best['threshold']:g} (chosen on half the rows)",
                "",
                f"{best['f1_on_the_other_half']:.4f}",
            )
        )
    score = out["score"]
    label = out["format"] + ("" if out["complete"] else " (partial: not every subset is here)")
    rows.append((label, str(out["rows"] - out["invalid"]), "-" if score is None else f"{score:.4f}"))
    if out["invalid"]:
        rows.append(("invalid", str(out["invalid"]), "-"))
    text = table(rows)
    for problem in out.get("bad_rows", []):
        text += f"\nskipped: {problem}"
    return text


async def pair_lines_at(
    client: AsyncRewardClient, model: str, lines: list[dict[str, Any]], indices: list[int]
) -> list[dict[str, Any]]:
    """``pairs.jsonl``'s lines for the preference lines at ``indices`` (0-based): each
    pair's scores and decision, or why it has none."""
    per_line = [pair_items(line, index + 1) for index, line in zip(indices, lines)]
    flat = [item for items in per_line for item in items]
    results = (await client.score(model, flat)).results if flat else []
    out = []
    at = 0
    for number, line, items in zip(indices, lines, per_line):
        scored = results[at : at + len(items)]
        at += len(items)
        row = pair_line(number, line)
        invalid = [r.error or "invalid" for r in scored if not r.valid or r.score is None]
        if invalid:
            row.update(valid=False, error=invalid[0])
        else:
            scores = [float(r.score) for r in scored]  # type: ignore[arg-type]
            row.update(chosen=scores[0], rejected=scores[1:], correct=decision(scores[0], scores[1:]))
        out.append(row)
    return out


def pair_line(index: int, line: dict[str, Any]) -> dict[str, Any]:
    """The start of a preference line's entry in ``pairs.jsonl``: where it is and what."""
    return {"index": index, "id": line.get("id"), "subset": str(line.get("subset", "all"))}


def pairs_summary(model: str, lines: list[dict[str, Any]]) -> dict[str, Any]:
    by_subset: dict[str, list[float]] = defaultdict(list)
    for line in lines:
        if line.get("valid", True):
            by_subset[line["subset"]].append(line["correct"])
    decided = [c for values in by_subset.values() for c in values]
    return {
        "model": model,
        "pairs": len(lines),
        "invalid": len(lines) - len(decided),
        "accuracy": sum(decided) / len(decided) if decided else None,
        "subsets": {name: {"pairs": len(v), "accuracy": sum(v) / len(v)} for name, v in sorted(by_subset.items())},
    }


def accuracy_table(summary: dict[str, Any]) -> str:
    rows = [("subset", "pairs", "accuracy")]
    rows += [(name, str(s["pairs"]), f"{s['accuracy']:.3f}") for name, s in summary["subsets"].items()]
    overall = summary["accuracy"]
    rows.append(("all", str(summary["pairs"] - summary["invalid"]), "-" if overall is None else f"{overall:.3f}"))
    if summary["invalid"]:
        rows.append(("invalid", str(summary["invalid"]), "-"))
    return table(rows)


def plot_accuracy(summary: dict[str, Any], path: Path, width: int = 720, bar_h: int = 28) -> None:
    """A horizontal bar per subset, on an axis from 0 to 1 with a tick every 0.25."""
    from PIL import Image, ImageDraw

    subsets = list(summary["subsets"].items())
    height = 60 + bar_h * max(1, len(subsets)) + 30
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    left, right, top = 180, width - 60, 40
    draw.text((10, 10), f"accuracy of {summary['model']} ({summary['pairs']} pairs)", fill=(0, 0, 0))
    bottom = top + bar_h * max(1, len(subsets))
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = left + tick * (right - left)
        draw.line([(x, top), (x, bottom)], fill=(220, 220, 220))
        draw.text((x - 10, bottom + 6), f"{tick:.2f}", fill=(90, 90, 90))
    for k, (name, stats) in enumerate(subsets):
        y = top + k * bar_h
        draw.text((10, y + 8), f"{name[:22]} ({stats['pairs']})", fill=(0, 0, 0))
        draw.rectangle([left, y + 4, left + stats["accuracy"] * (right - left), y + bar_h - 4], fill=(31, 119, 180))
        draw.text((left + stats["accuracy"] * (right - left) + 4, y + 8), f"{stats['accuracy']:.3f}", fill=(0, 0, 0))
    draw.line([(left, top), (left, bottom)], fill=(0, 0, 0))
    image.save(path)
