"""Kind `clip_goal`: the VLM-RM reward equals the formula computed by hand with numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoImageProcessor, AutoTokenizer, CLIPModel

from rewardserve.client.images import image_part
from rewardserve.models.errors import ItemError, RequestError
from rewardserve.models.kinds import build_model
from rewardserve.models.spec import ModelSpec
from rewardserve.protocol import Item, ScoreOptions, StepOptions
from tests.harness import run_jobs

GOAL = ["a robot arm holding a red cube", "the red cube is lifted"]
BASELINE = ["a robot arm"]


def frames(n: int) -> list[Image.Image]:
    rng = np.random.RandomState(7)
    return [Image.fromarray(rng.randint(0, 255, (40, 50, 3), dtype=np.uint8)) for _ in range(n)]


def by_hand(model_dir, images, goal, baseline, alpha) -> np.ndarray:
    model = CLIPModel.from_pretrained(model_dir).eval()
    tok, proc = AutoTokenizer.from_pretrained(model_dir), AutoImageProcessor.from_pretrained(model_dir)

    def unit(v):
        v = np.asarray(v, dtype=np.float64)
        return v / np.linalg.norm(v, axis=-1, keepdims=True)

    def pooled(out):
        return out if isinstance(out, torch.Tensor) else out.pooler_output

    with torch.inference_mode():
        x = unit(pooled(model.get_image_features(**proc(images=images, return_tensors="pt"))).numpy())
        g = unit(unit(pooled(model.get_text_features(**tok(goal, padding=True, return_tensors="pt"))).numpy()).mean(0))
        b = unit(
            unit(pooled(model.get_text_features(**tok(baseline, padding=True, return_tensors="pt"))).numpy()).mean(0)
        )
    d = g - b
    P = alpha * np.outer(d, d) / (d @ d) + (1 - alpha) * np.eye(len(g))
    return np.array([1 - 0.5 * np.sum(((xi - g) @ P) ** 2) for xi in x])


@pytest.fixture(scope="module")
def clip(clip_model):
    model = build_model(ModelSpec(name="clip", kind="clip_goal", source=str(clip_model)))
    model.load()
    return model


def item_of(images) -> Item:
    return Item(messages=[{"role": "user", "content": [image_part(i) for i in images]}])


def test_reward_is_the_vlm_rm_formula(clip, clip_model):
    images = frames(5)
    options = StepOptions(goal=GOAL, baseline=BASELINE, alpha=0.7)
    (result,) = run_jobs(clip, clip.prepare([item_of(images)], options))
    expected = by_hand(clip_model, images, GOAL, BASELINE, 0.7)
    assert result.step_scores == pytest.approx(expected.tolist(), abs=1e-6)
    assert result.score == pytest.approx(expected[-1], abs=1e-6)
    windowed = run_jobs(clip, clip.prepare([item_of(images)], options.model_copy(update={"window": 2})))[0]
    assert windowed.step_scores[0] == pytest.approx(expected[0]) and windowed.step_scores[3] == pytest.approx(
        (expected[2] + expected[3]) / 2
    )


def test_alpha_zero_is_cosine_and_score_is_the_last_frame(clip, clip_model):
    images = frames(3)
    (result,) = run_jobs(clip, clip.prepare([item_of(images)], ScoreOptions(goal=GOAL)))
    expected = by_hand(clip_model, images, GOAL, BASELINE, 0.0)  # alpha 0: baseline unused
    assert result.score == pytest.approx(expected[-1], abs=1e-6)


@pytest.mark.parametrize("cache_size", [0, 1])
def test_a_text_cache_smaller_than_the_prompts_scores_the_same(clip_model, cache_size):
    """No cache (0), or one too small for the goal and baseline texts: each text's
    vector is used as computed, none read back from a cache that could not keep it."""
    model = build_model(
        ModelSpec(name="clip", kind="clip_goal", source=str(clip_model), options={"text_cache_size": cache_size})
    )
    model.load()
    images = frames(3)
    options = StepOptions(goal=GOAL, baseline=BASELINE, alpha=0.7)
    (result,) = run_jobs(model, model.prepare([item_of(images)], options))
    assert result.step_scores == pytest.approx(by_hand(clip_model, images, GOAL, BASELINE, 0.7).tolist(), abs=1e-6)


def test_goal_is_required_and_an_image_too(clip):
    with pytest.raises(RequestError) as err:
        clip.prepare([item_of(frames(1))], ScoreOptions())
    assert err.value.param == "options.goal"
    (entry,) = clip.prepare([Item(prompt="q", response="no image")], ScoreOptions(goal="x"))
    assert isinstance(entry, ItemError)
