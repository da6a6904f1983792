"""A reward model's accuracy on preference data: ``rewardserve eval``.

Each line holds ``prompt``, ``chosen`` and ``rejected`` (one response or several, as
RewardBench 2's best-of-N), optionally ``subset`` and ``id``. Every response is scored
by ``/v1/score`` on the model, as a user turn and an assistant turn. The decisions are
RewardBench's: with one rejected response a pair is right when the chosen one scores
strictly higher (rewardbench/rewardbench.py); with several, right by 1/k when the chosen
one ties k responses at the top (rewardbench/utils.py, reroll_and_score_dataset).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from rewardserve.cli.score import read_items, table
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

    problems: list[str | None] = []
    for number, row in enumerate(rows, 1):
        try:
            if fmt in benchmarks.STEPS_FORMATS:
                benchmarks.steps_item(row, number)
            else:
                benchmarks.responses(fmt, row, number)
            problems.append(None)
        except ValueError as exc:
            if strict:
                raise
            problems.append(str(exc))
    return problems


async def benchmark_scores(
    client: AsyncRewardClient, model: str, fmt: str, rows: list[dict[str, Any]], problems: list[str | None]
) -> list[list[float | None] | str]:
    """Per row, its responses' scores (processbench: its steps' scores), or why not (a
    bad row is not sent)."""
    from rewardserve.cli import benchmarks

    good = [(n, row) for n, (row, problem) in enumerate(zip(rows, problems), 1) if problem is None]
    got: list[list[float | None] | str] = []
    if fmt in benchmarks.STEPS_FORMATS:
        items = [benchmarks.steps_item(row, n) for n, row in good]
        stepped = (
            (await client.score_steps(model, items, steps_from="steps", truncate="steps")).results if items else []
        )
        got = [list(r.step_scores or []) if r.valid else (r.error or "invalid") for r in stepped]
    else:
        texts = [benchmarks.responses(fmt, row, n) for n, row in good]
        prompts = [row["question"] if fmt == "judgebench" else row["prompt"] for _, row in good]
        flat = [{"prompt": p, "response": t} for p, ts in zip(prompts, texts) for t in ts]
        results = (await client.score(model, flat)).results if flat else []
        at = 0
        for ts in texts:
            scored = results[at : at + len(ts)]
            at += len(ts)
            invalid = [r.error or "invalid" for r in scored if not r.valid or r.score is None]
            got.append(invalid[0] if invalid else [float(r.score) for r in scored])  # type: ignore[arg-type]
    answers = iter(got)
    return [next(answers) if problem is None else problem for problem in problems]


async def evaluate_benchmark(
    client: AsyncRewardClient,
    model: str,
    fmt: str,
    source: Path,
    out_dir: Path,
    threshold: float = 0.5,
    strict: bool = False,
) -> dict[str, Any]:
    """A benchmark's rows scored and its own metric computed (cli/benchmarks.py): writes
    ``rows.jsonl`` (each row's scores, or why not), ``results.json`` and ``results.png``
    (per subset). A row that is not the benchmark's is named by its line and skipped, or
    stops the run (``strict``)."""
    from rewardserve.cli import benchmarks

    rows = read_items(source)
    problems = checked_rows(fmt, rows, strict)
    got = await benchmark_scores(client, model, fmt, rows, problems)
    out_dir.mkdir(parents=True, exist_ok=True)
    scores: list[list[float | None] | None] = []
    with open(out_dir / "rows.jsonl", "w", encoding="utf-8") as f:
        for number, (row, scored) in enumerate(zip(rows, got)):
            where = row.get("subset", row.get("domain", row.get("split", row.get("source"))))
            line: dict[str, Any] = {"index": number, "id": row.get("id"), "subset": where}
            if isinstance(scored, str):
                line.update(valid=False, error=scored)
                scores.append(None)
            else:
                line["scores"] = scored
                scores.append(scored)
            f.write(json.dumps(line) + "\n")
    out = {"model": model, **benchmarks.summary(fmt, rows, scores, threshold)}
    out["bad_rows"] = [p for p in problems if p is not None][:20]  # the first ones, by line
    (out_dir / "results.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    bars = {
        "model": model,
        "pairs": out["rows"],
        "subsets": {name: {"pairs": out["counts"][name], "accuracy": v} for name, v in out["subsets"].items()},
    }
    plot_accuracy(bars, out_dir / "results.png")
    return out


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


async def evaluate(client: AsyncRewardClient, model: str, source: Path, out_dir: Path) -> dict[str, Any]:
    """Score every pair, write ``pairs.jsonl``, ``accuracy.json`` and ``accuracy.png``
    to ``out_dir``; returns the accuracy summary."""
    lines = read_items(source)
    per_line = [pair_items(line, n) for n, line in enumerate(lines, 1)]
    flat = [item for items in per_line for item in items]
    results = (await client.score(model, flat)).results
    out_dir.mkdir(parents=True, exist_ok=True)
    by_subset: dict[str, list[float]] = defaultdict(list)
    at = 0
    with open(out_dir / "pairs.jsonl", "w", encoding="utf-8") as f:
        for number, (line, items) in enumerate(zip(lines, per_line)):
            scored = results[at : at + len(items)]
            at += len(items)
            subset = str(line.get("subset", "all"))
            row: dict[str, Any] = {"index": number, "id": line.get("id"), "subset": subset}
            invalid = [r.error or "invalid" for r in scored if not r.valid or r.score is None]
            if invalid:
                row.update(valid=False, error=invalid[0])
            else:
                scores = [float(r.score) for r in scored]  # type: ignore[arg-type]
                row.update(chosen=scores[0], rejected=scores[1:], correct=decision(scores[0], scores[1:]))
                by_subset[subset].append(row["correct"])
            f.write(json.dumps(row) + "\n")
    decided = [c for values in by_subset.values() for c in values]
    summary = {
        "model": model,
        "pairs": len(lines),
        "invalid": len(lines) - len(decided),
        "accuracy": sum(decided) / len(decided) if decided else None,
        "subsets": {name: {"pairs": len(v), "accuracy": sum(v) / len(v)} for name, v in sorted(by_subset.items())},
    }
    (out_dir / "accuracy.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    plot_accuracy(summary, out_dir / "accuracy.png")
    return summary


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
