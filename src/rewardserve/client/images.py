"""Attach images to messages: ``image_part(path | bytes | PIL image)`` gives the OpenAI
chat content part ``{"type": "image_url", "image_url": {"url": "data:image/...;base64,..."}}``.

Pillow is needed only for PIL images; paths and bytes are sent as they are.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

_MAGIC = {
    b"\x89PNG\r\n\x1a\n": "image/png",
    b"\xff\xd8\xff": "image/jpeg",
    b"GIF87a": "image/gif",
    b"GIF89a": "image/gif",
}


def _mime(data: bytes) -> str:
    for magic, mime in _MAGIC.items():
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return "application/octet-stream"


def data_url(image: Any, *, format: str = "PNG") -> str:
    """A ``data:`` URL for a file path, raw bytes, or a PIL image (saved as ``format``)."""
    if isinstance(image, (str, Path)):
        data = Path(image).read_bytes()
    elif isinstance(image, (bytes, bytearray, memoryview)):
        data = bytes(image)
    elif hasattr(image, "save"):  # a PIL image
        buffer = io.BytesIO()
        image.save(buffer, format=format)
        data = buffer.getvalue()
    else:
        raise TypeError(f"cannot make an image from {type(image).__name__}")
    return f"data:{_mime(data)};base64,{base64.b64encode(data).decode('ascii')}"


def image_part(image: Any, *, format: str = "PNG") -> dict[str, Any]:
    """A chat content part holding the image."""
    return {"type": "image_url", "image_url": {"url": data_url(image, format=format)}}


def user_message(text: str, *images: Any) -> dict[str, Any]:
    """A user turn with images first, then the text (the usual VLM layout)."""
    return {"role": "user", "content": [*(image_part(i) for i in images), {"type": "text", "text": text}]}
