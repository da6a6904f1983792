"""The x axis of metrics.png labels whole steps, each once."""

from __future__ import annotations

from typing import Any

import pytest
from PIL import Image, ImageDraw

from rewardserve.train.grpo.plot import draw_panel, plot_metrics, step_ticks


class RecordingDraw:
    """Pillow's drawing, with the texts drawn kept to read back."""

    def __init__(self) -> None:
        self.inner = ImageDraw.Draw(Image.new("RGB", (420, 220), "white"))
        self.texts: list[tuple[tuple[float, float], str]] = []

    def text(self, xy: tuple[float, float], text: str, **kwargs: Any) -> None:
        self.texts.append((xy, text))
        self.inner.text(xy, text, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def x_labels(steps: list[int]) -> list[str]:
    draw = RecordingDraw()
    draw_panel(draw, (0, 0, 420, 220), "reward", [("", [(float(s), 0.1 * s) for s in steps], (0, 0, 0))])
    below_axis = 220 - 34 + 6
    return [text for (_, y), text in draw.texts if y == below_axis]


def test_a_four_step_run_is_labelled_1_2_3_4():
    assert x_labels([1, 2, 3, 4]) == ["1", "2", "3", "4"]


@pytest.mark.parametrize(
    ("first", "last", "ticks"),
    [(1, 4, [1, 2, 3, 4]), (1, 2, [1, 2]), (1, 1, [1]), (1, 10, [2, 4, 6, 8, 10]), (0, 100, [0, 20, 40, 60, 80, 100])],
)
def test_ticks_are_whole_distinct_steps_at_most_six(first, last, ticks):
    assert step_ticks(first, last) == ticks


def test_the_png_is_written(tmp_path):
    plot_metrics([{"step": s, "reward_mean": 0.1 * s, "kl": 0.01} for s in range(1, 5)], tmp_path / "metrics.png")
    assert Image.open(tmp_path / "metrics.png").size == (840, 220)
