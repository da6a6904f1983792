"""Images over HTTP: VLM and CLIP rewards, and every bad image with its status."""

from __future__ import annotations

import io

import pytest
import pytest_asyncio
from PIL import Image

from rewardserve.client.images import image_part
from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.harness import serve_in_process
from tests.models.kinds.test_clip_goal import BASELINE, GOAL, by_hand, frames
from tests.models.kinds.test_vlm import as_item, conversations, reference
from tests.models.test_images import huge_png_header, png_bytes, url_of


@pytest_asyncio.fixture(scope="module")
async def service(vl_value, clip_model, qwen3_rm):
    settings = Settings(
        models=[
            ModelSpec(name="vl", kind="vlm", source=str(vl_value), max_wait_ms=50, max_padding_ratio=1.0),
            ModelSpec(name="clip", kind="clip_goal", source=str(clip_model), options={"goal": GOAL}),
            ModelSpec(name="rm", source=str(qwen3_rm)),
        ],
        builtin_rules=False,
        image_url_allowlist=["localhost", "2130706433"],
        max_images_per_item=8,
    )
    async with serve_in_process(settings) as (app, http):
        yield app, http


async def test_vlm_scores_over_http_equal_transformers(service, vl_value):
    _, http = service
    convs = conversations()
    items = [as_item(c).model_dump(exclude_none=True) for c in convs]
    response = await http.post("/v1/score", json={"model": "vl", "items": items})
    assert response.status_code == 200, response.text
    for conv, result in zip(convs, response.json()["results"]):
        assert result["score"] == pytest.approx(reference(vl_value, conv, "value_head"), abs=1e-4)


async def test_clip_frames_as_step_rewards(service, clip_model):
    _, http = service
    images = frames(4)
    item = {"messages": [{"role": "user", "content": [image_part(i) for i in images]}]}
    options = {"baseline": BASELINE, "alpha": 0.5}
    steps = await http.post("/v1/score/steps", json={"model": "clip", "items": [item], "options": options})
    assert steps.status_code == 200, steps.text
    expected = by_hand(clip_model, images, GOAL, BASELINE, 0.5)
    (result,) = steps.json()["results"]
    assert result["step_scores"] == pytest.approx(expected.tolist(), abs=1e-6)
    score = await http.post("/v1/score", json={"model": "clip", "items": [item], "options": options})
    assert score.json()["results"][0]["score"] == pytest.approx(expected[-1], abs=1e-6)


def with_image(url: str, count: int = 1) -> dict:
    parts = [{"type": "image_url", "image_url": {"url": url}}] * count
    return {
        "messages": [
            {"role": "user", "content": parts + [{"type": "text", "text": "?"}]},
            {"role": "assistant", "content": "ok"},
        ]
    }


def gif() -> bytes:
    buffer = io.BytesIO()
    first, second = Image.new("RGB", (8, 8), (255, 0, 0)), Image.new("RGB", (8, 8), (0, 0, 255))
    first.save(buffer, format="GIF", save_all=True, append_images=[second])
    return buffer.getvalue()


def truncated_jpeg() -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    Image.fromarray(np.random.RandomState(0).randint(0, 255, (96, 96, 3), dtype=np.uint8)).save(buffer, format="JPEG")
    return buffer.getvalue()[:2000]


BAD = [
    ("bomb", with_image(url_of(huge_png_header())), 413),
    ("truncated", with_image(url_of(truncated_jpeg(), "image/jpeg")), 422),
    ("gif", with_image(url_of(gif(), "image/gif")), 422),
    ("http", with_image("http://example.com/cat.png"), 422),
    ("localhost", with_image("http://localhost:9/cat.png"), 422),
    ("decimal-ip", with_image("http://2130706433:9/cat.png"), 422),
    ("file", with_image("file:///etc/passwd"), 422),
    ("too-many", with_image(url_of(png_bytes()), count=100), 413),
]


@pytest.mark.parametrize(("name", "item", "status"), BAD, ids=[b[0] for b in BAD])
async def test_bad_images_are_refused_with_the_part_named(service, name, item, status):
    _, http = service
    good = with_image(url_of(png_bytes()))
    response = await http.post("/v1/score", json={"model": "vl", "items": [good, item]})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"].startswith("items[1]"), error
    if name != "too-many":
        assert error["param"] == "items[1].messages[0].content[0]"


async def test_fifty_megabyte_image_is_413(service):
    _, http = service
    payload = "A" * (50 * 1024 * 1024)
    response = await http.post(
        "/v1/score", json={"model": "vl", "items": [with_image(f"data:image/png;base64,{payload}")]}
    )
    assert response.status_code == 413


async def test_an_image_for_a_text_model_marks_only_that_item(service):
    _, http = service
    items = [with_image(url_of(png_bytes())), {"prompt": "q", "response": "a"}]
    response = await http.post("/v1/score", json={"model": "rm", "items": items})
    assert response.status_code == 200
    first, second = response.json()["results"]
    assert first["valid"] is False and "image" in first["error"] and second["valid"] is True
