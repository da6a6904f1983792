"""The load-time dtype probe: both dtypes timed on copies of the largest linear weight
(the served weights untouched), and advice logged only where a dtype is clearly faster."""

from __future__ import annotations

import logging

import torch

from rewardserve.models.backends import make_backend
from rewardserve.models.backends.dtype_probe import dtype_advice, largest_linear_weight, probe_cpu_dtypes
from rewardserve.models.spec import ModelSpec


def test_asking_for_the_slower_dtype_is_a_warning_with_the_figures():
    level, line = dtype_advice(
        "rm", torch.bfloat16, {torch.float32: 0.010, torch.bfloat16: 0.025}, (3072, 1024), explicit=True
    )
    assert level == logging.WARNING
    assert "float32 is 2.5x faster here" in line and "set dtype: float32" in line
    assert "float32 10.00 ms, bfloat16 25.00 ms" in line and "[256 x 1024] x [1024 x 3072]" in line


def test_the_default_being_slower_is_a_hint_not_a_warning():
    level, line = dtype_advice(
        "rm", torch.float32, {torch.float32: 0.017, torch.bfloat16: 0.010}, (64, 64), explicit=False
    )
    assert level == logging.INFO and "bfloat16 is 1.7x faster here" in line


def test_within_the_margin_nothing_is_advised():
    level, line = dtype_advice(
        "rm", torch.bfloat16, {torch.float32: 0.010, torch.bfloat16: 0.011}, (64, 64), explicit=True
    )
    assert level == logging.INFO and line.startswith("rm: dtype probe") and "faster" not in line


def test_the_probe_times_copies_and_leaves_the_weights(qwen3_rm, caplog):
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(qwen3_rm, dtype=torch.float32)
    weight = largest_linear_weight(model)
    before = weight.detach().clone()
    timings = probe_cpu_dtypes(model)
    assert set(timings) == {torch.float32, torch.bfloat16} and all(t > 0 for t in timings.values())
    assert weight.dtype == torch.float32 and torch.equal(weight, before)
    with caplog.at_level(logging.INFO, logger="rewardserve.models.backends.dtype_probe"):
        make_backend(ModelSpec(name="m", source=str(qwen3_rm), options={"compile_layers": False}), "classify")
    assert "m: " in caplog.text and "float32" in caplog.text and "bfloat16" in caplog.text
