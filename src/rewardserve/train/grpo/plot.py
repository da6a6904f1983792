"""A PNG of the run per step, drawn with Pillow (no plotting library): the mean reward,
each reward source apart, the dense model's score, KL, completion length and the share
of groups without signal, each panel with its own y axis and the steps on x. Several
runs (an outcome-only and a dense run on the same seed and task) share each panel, a
colour per run (``plot_runs``; ``rewardserve grpo-plot``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

COLORS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (148, 103, 189), (140, 86, 75), (227, 119, 194)]
GRID, AXIS, TEXT = (225, 225, 225), (60, 60, 60), (40, 40, 40)


def panels(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(title, metrics key) of every panel the rows have data for."""
    sources = sorted({k for r in rows for k in r if k.startswith("reward/")})
    wanted = [
        ("reward (mean of the mix)", "reward_mean"),
        *[(k, k) for k in sources],
        ("dense: the step model's score (mean)", "dense_score"),
        ("KL to the start policy", "kl"),
        ("completion length (tokens)", "completion_length"),
        ("groups with equal rewards (share)", "zero_variance_groups"),
    ]
    return [(title, key) for title, key in wanted if any(r.get(key) is not None for r in rows)]


Series = tuple[str, list[tuple[float, float]], tuple[int, int, int]]  # (label, points, colour)


def plot_metrics(rows: list[dict[str, Any]], path: Path) -> None:
    plot_runs({"": rows}, path)


def plot_runs(runs: dict[str, list[dict[str, Any]]], path: Path, panel_w: int = 420, panel_h: int = 220) -> None:
    """Every panel any run has data for, each run's line in it (one run: a colour per
    panel; several: a colour per run, named in each panel's title)."""
    from PIL import Image, ImageDraw

    shown = panels([r for rows in runs.values() for r in rows])
    columns = 2
    lines = max(1, (len(shown) + columns - 1) // columns)
    image = Image.new("RGB", (panel_w * columns, panel_h * lines), "white")
    draw = ImageDraw.Draw(image)
    for k, (title, key) in enumerate(shown):
        x0, y0 = (k % columns) * panel_w, (k // columns) * panel_h
        series: list[Series] = []
        for n, (name, rows) in enumerate(runs.items()):
            points = [(float(r["step"]), float(r[key])) for r in rows if r.get(key) is not None]
            colour = COLORS[(k if len(runs) == 1 else n) % len(COLORS)]
            if points:
                series.append((name, points, colour))
        draw_panel(draw, (x0, y0, panel_w, panel_h), title, series)
    image.save(path)


def step_ticks(first: float, last: float) -> list[int]:
    """The steps labelled on x: whole steps only (steps are counted, a label 2.5 or a
    step shown twice misleads), a stride of 1, 2 or 5 times a power of ten that gives
    at most six labels."""
    low, high = math.ceil(first), math.floor(last)
    if high < low:
        return [round(first)]
    stride, scale = 1, 1
    while (high - low) / stride > 5:
        for factor in (1, 2, 5, 10):
            if (high - low) / (factor * scale) <= 5:
                stride = factor * scale
                break
        else:
            scale *= 10
            continue
        break
    start = math.ceil(low / stride) * stride
    ticks = list(range(start, high + 1, stride))
    return ticks or [low]


def draw_panel(
    draw: Any,
    box: tuple[int, int, int, int],
    title: str,
    series: list[Series],
) -> None:
    x0, y0, w, h = box
    left, right, top, bottom = x0 + 64, x0 + w - 16, y0 + 26, y0 + h - 34
    draw.text((left, y0 + 8), title, fill=TEXT)
    at = left + int(draw.textlength(title)) + 12
    for name, _, colour in series:  # the runs' names, in their colours
        if name:
            draw.text((at, y0 + 8), name, fill=colour)
            at += int(draw.textlength(name)) + 10
    steps = [p[0] for _, points, _ in series for p in points]
    values = [p[1] for _, points, _ in series for p in points]
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12:
        lo, hi = lo - 0.5, hi + 0.5
    first, last = min(steps), max(steps)
    span = last - first or 1.0
    for tick in range(5):  # y: five labelled grid lines
        value = lo + (hi - lo) * tick / 4
        y = bottom - (bottom - top) * tick / 4
        draw.line([(left, y), (right, y)], fill=GRID)
        draw.text((x0 + 4, y - 6), f"{value:.3g}", fill=TEXT)
    for step in step_ticks(first, last):  # x: whole steps
        x = left + (step - first) / span * (right - left)
        draw.line([(x, bottom), (x, bottom + 4)], fill=AXIS)
        draw.text((x - 8, bottom + 6), str(step), fill=TEXT)
    draw.text((right - 28, bottom + 18), "step", fill=TEXT)
    draw.line([(left, top), (left, bottom), (right, bottom)], fill=AXIS)
    for _, points, colour in series:
        xy = [
            (left + (s - first) / span * (right - left), bottom - (v - lo) / (hi - lo) * (bottom - top))
            for s, v in points
        ]
        if len(xy) > 1:
            draw.line(xy, fill=colour, width=2)
        for x, y in xy[-1:]:
            draw.ellipse([x - 2, y - 2, x + 2, y + 2], fill=colour)
