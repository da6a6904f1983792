"""What the backends decide from the device, on a CPU-only machine: the CUDA choices run
here with CUDA reported present (torch.cuda.is_available patched), so that each branch a
GPU takes is exercised before any GPU runs it."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from rewardserve.models import backends
from rewardserve.models.backends import vllm_backend
from rewardserve.models.backends.loading import pick_device, pick_dtype
from rewardserve.models.backends.transformers_backend import batch_preferences
from rewardserve.models.kinds.outcome import OutcomeModel
from rewardserve.models.spec import ModelSpec


@pytest.fixture
def cuda_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def test_auto_picks_cuda_in_bf16_when_a_gpu_is_there(cuda_present):
    device = pick_device("auto")
    assert device.type == "cuda"
    assert pick_dtype("auto", device) is torch.bfloat16
    assert pick_dtype("float32", device) is torch.float32
    assert pick_device("cpu").type == "cpu" and pick_dtype("auto", torch.device("cpu")) is torch.float32


def test_auto_on_the_cpu_when_no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device("auto").type == "cpu"


@pytest.mark.parametrize("packing", [True, False])
def test_a_gpu_keeps_the_kinds_batch_budget_and_full_batches_when_shared(packing):
    kind_default = OutcomeModel.default_policy
    on_gpu = replace(kind_default, **batch_preferences(torch.device("cuda"), packing))
    on_cpu = replace(kind_default, **batch_preferences(torch.device("cpu"), packing))
    assert on_gpu.max_batch_tokens == kind_default.max_batch_tokens == 16384
    assert not on_gpu.short_when_shared and on_gpu.max_padding_ratio == kind_default.max_padding_ratio
    assert on_gpu.pads is not packing  # packed rows have no padding to pay for
    assert on_cpu.max_batch_tokens == 1024 and on_cpu.short_when_shared


@pytest.mark.parametrize(
    ("device", "task", "installed", "expected"),
    [
        ("auto", "classify", True, "vllm"),
        ("cuda:1", "prm_head", True, "vllm"),
        ("auto", "classify", False, "transformers"),  # vLLM not installed
        ("cpu", "classify", True, "transformers"),  # asked for the CPU
        ("auto", "value_head", True, "transformers"),  # a task vLLM does not serve here
    ],
)
def test_auto_backend_is_vllm_on_cuda_where_it_serves_the_task(
    cuda_present, monkeypatch, device, task, installed, expected
):
    monkeypatch.setattr(vllm_backend, "vllm_available", lambda: installed)
    spec = ModelSpec(name="m", source="/nowhere", device=device)
    assert ("vllm" if backends._vllm_fits(spec, task) else "transformers") == expected


@pytest.mark.parametrize(
    ("device", "choice", "expected"),
    [
        ("cuda", "auto", "flex"),
        ("cpu", "auto", "segments"),
        ("cpu", "flex", "flex"),
        ("cuda", "segments", "segments"),
    ],
)
def test_packed_rows_attend_through_flex_on_cuda_by_default(device, choice, expected):
    from types import SimpleNamespace

    from rewardserve.models.backends.transformers_backend import TransformersBackend

    backend = SimpleNamespace(device=torch.device(device))
    assert TransformersBackend._attention_kernel(backend, choice) == expected
