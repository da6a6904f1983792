"""A PNG of the run per step, drawn with Pillow (no plotting library): the mean reward,
each reward source apart, KL, completion length and the share of groups without
signal, each panel with its own y axis and the steps on x."""

from __future__ import annotations

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
        ("KL to the start policy", "kl"),
        ("completion length (tokens)", "completion_length"),
        ("groups with equal rewards (share)", "zero_variance_groups"),
    ]
    return [(title, key) for title, key in wanted if any(r.get(key) is not None for r in rows)]


def plot_metrics(rows: list[dict[str, Any]], path: Path, panel_w: int = 420, panel_h: int = 220) -> None:
    from PIL import Image, ImageDraw

    shown = panels(rows)
    columns = 2
    lines = max(1, (len(shown) + columns - 1) // columns)
    image = Image.new("RGB", (panel_w * columns, panel_h * lines), "white")
    draw = ImageDraw.Draw(image)
    for k, (title, key) in enumerate(shown):
        x0, y0 = (k % columns) * panel_w, (k // columns) * panel_h
        points = [(float(r["step"]), float(r[key])) for r in rows if r.get(key) is not None]
        draw_panel(draw, (x0, y0, panel_w, panel_h), title, points, COLORS[k % len(COLORS)])
    image.save(path)


def draw_panel(
    draw: Any,
    box: tuple[int, int, int, int],
    title: str,
    points: list[tuple[float, float]],
    color: tuple[int, int, int],
) -> None:
    x0, y0, w, h = box
    left, right, top, bottom = x0 + 64, x0 + w - 16, y0 + 26, y0 + h - 34
    draw.text((left, y0 + 8), title, fill=TEXT)
    steps = [p[0] for p in points]
    values = [p[1] for p in points]
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
    for tick in range(5):  # x: steps
        step = first + span * tick / 4
        x = left + (right - left) * tick / 4
        draw.line([(x, bottom), (x, bottom + 4)], fill=AXIS)
        draw.text((x - 8, bottom + 6), f"{step:.0f}", fill=TEXT)
    draw.text((right - 28, bottom + 18), "step", fill=TEXT)
    draw.line([(left, top), (left, bottom), (right, bottom)], fill=AXIS)
    xy = [
        (left + (s - first) / span * (right - left), bottom - (v - lo) / (hi - lo) * (bottom - top)) for s, v in points
    ]
    if len(xy) > 1:
        draw.line(xy, fill=color, width=2)
    for x, y in xy[-1:]:
        draw.ellipse([x - 2, y - 2, x + 2, y + 2], fill=color)
