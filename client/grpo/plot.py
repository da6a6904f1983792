"""A PNG of mean reward and KL per step, drawn with Pillow (no plotting library)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_metrics(rows: list[dict[str, Any]], path: Path, width: int = 720, height: int = 440) -> None:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    panels = [("reward (mean)", "reward_mean", (31, 119, 180)), ("KL to reference", "kl", (214, 39, 40))]
    panel_h = height // len(panels)
    steps = [r["step"] for r in rows]
    for k, (title, key, color) in enumerate(panels):
        top, left, right, bottom = k * panel_h + 24, 56, width - 16, (k + 1) * panel_h - 24
        draw.rectangle([left, top, right, bottom], outline=(180, 180, 180))
        draw.text((left, top - 18), title, fill=(0, 0, 0))
        values: list[float] = [r[key] for r in rows if r.get(key) is not None]
        if not values or len(steps) < 2:
            continue
        lo, hi = min(values), max(values)
        hi = hi if hi > lo else lo + 1e-9
        draw.text((4, top), f"{hi:.3g}", fill=(90, 90, 90))
        draw.text((4, bottom - 10), f"{lo:.3g}", fill=(90, 90, 90))
        points = [
            (left + (r["step"] - steps[0]) / max(1, steps[-1] - steps[0]) * (right - left),
             bottom - (r[key] - lo) / (hi - lo) * (bottom - top))
            for r in rows if r.get(key) is not None
        ]
        draw.line(points, fill=color, width=2)
        draw.text((right - 60, bottom + 4), f"step {steps[-1]}", fill=(90, 90, 90))
    image.save(path)
