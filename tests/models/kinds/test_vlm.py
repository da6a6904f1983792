"""Kind `vlm`: rewards over images equal straight transformers on the same inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file
from transformers import AutoImageProcessor, AutoTokenizer, Qwen2VLForConditionalGeneration

from rewardserve.client.images import image_part
from rewardserve.models.kinds import build_model
from rewardserve.models.plan import Job
from rewardserve.models.spec import ModelSpec
from rewardserve.protocol import Item, ScoreOptions
from tests.harness import run_jobs


def picture(seed: int, size=(90, 60)) -> Image.Image:
    return Image.fromarray(np.random.RandomState(seed).randint(0, 255, (*size[::-1], 3), dtype=np.uint8))


def conversations():
    return [
        [
            {"role": "user", "content": [picture(1), "What is in the picture?"]},
            {"role": "assistant", "content": "Noise."},
        ],
        [
            {"role": "user", "content": ["Compare", picture(2, (60, 120)), "with", picture(3)]},
            {"role": "assistant", "content": "The second is wider."},
        ],
        [{"role": "user", "content": ["No image here, just text."]}, {"role": "assistant", "content": "Fine."}],
    ]


def as_item(conv) -> Item:
    def part(x):
        return image_part(x) if isinstance(x, Image.Image) else {"type": "text", "text": x}

    messages = [
        {
            "role": m["role"],
            "content": [part(x) for x in m["content"]] if isinstance(m["content"], list) else m["content"],
        }
        for m in conv
    ]
    return Item(messages=messages)


def reference(model_dir, conv, head: str, generation_prompt=False) -> float:
    """Straight transformers: the PIL image processor, the placeholder expanded by the
    patch grid, Qwen2-VL's backbone, the head from the checkpoint's tensors."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    processor = AutoImageProcessor.from_pretrained(model_dir)
    model = Qwen2VLForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32).eval()
    images = [x for m in conv if isinstance(m["content"], list) for x in m["content"] if isinstance(x, Image.Image)]
    messages = [
        {
            "role": m["role"],
            "content": [
                {"type": "image"} if isinstance(x, Image.Image) else {"type": "text", "text": x} for x in m["content"]
            ]
            if isinstance(m["content"], list)
            else m["content"],
        }
        for m in conv
    ]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    extra = {}
    if images:
        processed = processor(images=images, return_tensors="pt")
        pieces = text.split("<|image_pad|>")
        counts = [int(g.prod()) // 4 for g in processed["image_grid_thw"]]
        text = pieces[0] + "".join("<|image_pad|>" * c + rest for c, rest in zip(counts, pieces[1:]))
        extra = {"pixel_values": processed["pixel_values"], "image_grid_thw": processed["image_grid_thw"]}
    ids = torch.tensor([tok(text)["input_ids"]])
    if images:
        extra["mm_token_type_ids"] = (ids == model.config.image_token_id).int()
    weights = load_file(f"{model_dir}/model.safetensors")
    with torch.inference_mode():
        last = model.model(input_ids=ids, **extra).last_hidden_state[0, -1]
        if head == "value_head":
            return float(last @ weights["v_head.summary.weight"][0] + weights["v_head.summary.bias"][0])
        if head == "mlp":
            h = torch.relu(weights["score.0.weight"] @ last + weights["score.0.bias"])
            return float(weights["score.2.weight"][0] @ h + weights["score.2.bias"][0])
        logits = model.lm_head(last).double()
        yes = sorted({tok.encode(w, add_special_tokens=False)[0] for w in ("Yes", " Yes")})
        no = sorted({tok.encode(w, add_special_tokens=False)[0] for w in ("No", " No")})
        probs = torch.softmax(logits[yes + no], -1)
        return float(probs[: len(yes)].sum())


@pytest.mark.parametrize(("fixture", "head"), [("vl_value", "value_head"), ("vl_mlp", "mlp"), ("vl_judge", "yes_no")])
def test_scores_equal_transformers_in_one_mixed_batch(fixture, head, request):
    path = request.getfixturevalue(fixture)
    model = build_model(ModelSpec(name="vl", kind="vlm", source=str(path), options={"head": head}))
    model.load()
    convs = conversations()
    entries = model.prepare([as_item(c) for c in convs], ScoreOptions())
    assert all(isinstance(e, Job) for e in entries)
    together = run_jobs(model, entries)  # image and text-only items in one batch
    for k, (conv, result) in enumerate(zip(convs, together)):
        expected = reference(path, conv, head, generation_prompt=head == "yes_no")
        assert result.score == pytest.approx(expected, abs=1e-4)
        assert run_jobs(model, [entries[k]])[0].score == pytest.approx(result.score, abs=1e-4)
    assert len({round(r.score, 4) for r in together}) == 3


def test_placeholder_count_must_match_images(vl_value):
    from rewardserve.models.errors import ItemError
    from rewardserve.models.kinds.vlm import expand_image_tokens

    assert expand_image_tokens("a<i>b<i>", "<i>", [2, 1]) == "a<i><i>b<i>"
    with pytest.raises(ItemError):
        expand_image_tokens("a<i>", "<i>", [1, 1])
    with pytest.raises(ItemError):
        expand_image_tokens("a<i><i>", "<i>", [1])
