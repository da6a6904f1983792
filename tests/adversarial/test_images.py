"""Image attacks: pixels bounded per request, shapes and chunks the processors choke on
refused with a 4xx naming the part."""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image

from tests.models.test_images import png_bytes, url_of


def image_item(*urls: str) -> dict:
    return {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": u}} for u in urls]
                + [{"type": "text", "text": "what is it?"}],
            },
            {"role": "assistant", "content": "a square"},
        ]
    }


def png_with_text_chunk(size: int) -> bytes:
    """A small PNG carrying a compressed text chunk that inflates to ``size`` bytes."""
    data = png_bytes()
    payload = b"Comment\0\0" + zlib.compress(b"a" * size)
    chunk = struct.pack(">I", len(payload)) + b"zTXt" + payload + struct.pack(">I", zlib.crc32(b"zTXt" + payload))
    return data[:33] + chunk + data[33:]  # after the signature and IHDR


def test_many_large_images_in_one_request_are_refused_by_the_request_budget(attacked):
    buffer = io.BytesIO()
    Image.new("RGB", (6300, 6300), (10, 200, 10)).save(buffer, format="PNG")
    big = url_of(buffer.getvalue())  # 39.7 M pixels: under the per-image cap
    with attacked.watch():
        response = attacked.post("/v1/score", {"model": "vl", "items": [image_item(*[big] * 8)]})
    assert response.status_code == 413, response.text[:300]
    assert response.json()["error"]["param"].startswith("items[0].messages[0].content[")


def test_a_thin_strip_and_a_huge_text_chunk_are_422s(attacked):
    strip = url_of(png_bytes(size=(40_000, 1)))
    bomb = url_of(png_with_text_chunk(2 * 1024 * 1024))
    for url in (strip, bomb):
        for model in ("vl", "clip"):
            response = attacked.post("/v1/score", {"model": model, "items": [image_item(url)]})
            assert response.status_code == 422, (model, response.text[:300])
            assert response.json()["error"]["param"] == "items[0].messages[0].content[0]"


def test_goal_equal_to_baseline_is_invalid_with_a_reason(attacked):
    item = image_item(url_of(png_bytes()))
    options = {"goal": "a red square", "baseline": "a red square", "alpha": 1.0}
    response = attacked.post("/v1/score", {"model": "clip", "items": [item], "options": options})
    assert response.status_code == 200
    (result,) = response.json()["results"]
    assert result["valid"] is False and result["score"] is None and "baseline" in result["error"]
