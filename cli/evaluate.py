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
