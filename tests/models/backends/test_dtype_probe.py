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
        "rm", torch.bfloat16, [(0.010, 0.025), (0.011, 0.026), (0.010, 0.030)], (3072, 1024), explicit=True
    )
    assert level == logging.WARNING
    assert "float32 is 2.4x faster here" in line and "set dtype: float32" in line  # the least of the rounds
    assert (
        "float32 10.00 ms, bfloat16 26.00 ms" in line
        and "median of 3 rounds" in line
        and "[256 x 1024] x [1024 x 3072]" in line
    )


def test_the_default_being_slower_is_a_hint_not_a_warning():
    level, line = dtype_advice("rm", torch.float32, [(0.017, 0.010)] * 3, (64, 64), explicit=False)
    assert level == logging.INFO and "bfloat16 is 1.7x faster here" in line


def test_within_the_margin_nothing_is_advised():
    level, line = dtype_advice("rm", torch.bfloat16, [(0.010, 0.011)] * 3, (64, 64), explicit=True)
    assert level == logging.INFO and line.startswith("rm: dtype probe") and "faster" not in line


def test_one_noisy_round_advises_nothing():
    """The flip seen at start-up on one CPU: one round where fp32 was slow (2.9x) among
    rounds of no difference must not make a hint."""
    rounds = [(0.010, 0.010), (0.029, 0.010), (0.010, 0.0101), (0.0099, 0.010)]
    level, line = dtype_advice("rm", torch.float32, rounds, (64, 64), explicit=False)
    assert level == logging.INFO and "faster" not in line and "median of 4 rounds" in line


def test_the_probe_times_copies_and_leaves_the_weights(qwen3_rm, caplog):
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(qwen3_rm, dtype=torch.float32)
    weight = largest_linear_weight(model)
    before = weight.detach().clone()
    rounds = probe_cpu_dtypes(model)
    assert rounds is not None and len(rounds) >= 4 and all(f > 0 and b > 0 for f, b in rounds)
    assert weight.dtype == torch.float32 and torch.equal(weight, before)
    with caplog.at_level(logging.INFO, logger="rewardserve.models.backends.dtype_probe"):
        make_backend(ModelSpec(name="m", source=str(qwen3_rm), options={"compile_layers": False}), "classify")
    assert "m: " in caplog.text and "float32" in caplog.text and "bfloat16" in caplog.text
