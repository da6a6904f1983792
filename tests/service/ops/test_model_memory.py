"""What a served model holds (service/ops/model_memory.py ``held_bytes``, the admin state's
``memory_bytes``): its backend's tensors, or the modules a kind loads without a backend,
each against the checkpoint loaded again with transformers."""

from __future__ import annotations

from rewardserve.models.kinds import build_model
from rewardserve.models.spec import ModelSpec
from rewardserve.service.ops.model_memory import held_bytes


def tensor_bytes(module) -> int:
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))


def test_a_kind_without_a_backend_counts_its_own_modules(clip_model):
    from transformers import CLIPModel

    model = build_model(ModelSpec(name="clip", kind="clip_goal", source=str(clip_model)))
    model.load()
    assert held_bytes(model) == tensor_bytes(CLIPModel.from_pretrained(clip_model))


def test_a_backend_s_weights_are_counted_once(qwen3_rm):
    from transformers import AutoModelForSequenceClassification

    spec = ModelSpec(name="rm", source=str(qwen3_rm), options={"cpu_linear": "torch", "compile_layers": False})
    model = build_model(spec)
    model.load()
    assert held_bytes(model) == tensor_bytes(AutoModelForSequenceClassification.from_pretrained(qwen3_rm))
