"""Images from requests: data URLs (and allowlisted http(s) URLs), decoded defensively.

Rules, each with its own status:
- data URLs only, unless hosts are allowlisted; then http(s) to those hosts, resolved
  once and refused when any address is private, loopback, link-local, reserved or
  multicast; the connection goes to the checked address (no DNS rebinding), no
  redirects, a timeout, and the byte cap applied while reading. A local path or any
  other scheme is never opened.                                                  (422)
- at most ``max_bytes`` of image data, ``max_images`` per item                   (413)
- the pixel count is read from the header and checked BEFORE decoding, so a
  decompression bomb costs nothing: ``max_pixels`` per image, and
  ``max_request_pixels`` for all images of a request together                    (413)
- PNG, JPEG and WEBP only; one frame; width / height within ``max_aspect_ratio``
  (processors refuse thin strips); the data must decode completely; text chunks
  over PIL's safety limit are refused                                            (422)
- EXIF orientation applied, then converted to RGB.
"""

from __future__ import annotations

import base64
import binascii
import io
import ipaddress
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast
from urllib.parse import urlsplit

from rewardserve.models.errors import RequestError
from rewardserve.protocol import ImagePart, ImageURLPart, Item, Message

if TYPE_CHECKING:  # PIL is imported when an image is decoded
    from PIL import Image

ALLOWED_FORMATS = ("PNG", "JPEG", "WEBP")


@dataclass(frozen=True)
class ImagePolicy:
    max_bytes: int = 20 * 1024 * 1024
    max_pixels: int = 40_000_000
    max_images: int = 16
    max_request_pixels: int = 64_000_000
    max_aspect_ratio: float = 200.0
    url_allowlist: tuple[str, ...] = ()
    fetch_timeout_s: float = 5.0
    allow_private_addresses: bool = False  # for tests on loopback only; never in production
    formats: tuple[str, ...] = field(default=ALLOWED_FORMATS)

    def request_budget(self) -> PixelBudget:
        return PixelBudget(self.max_request_pixels)


class PixelBudget:
    """Pixels the images of one request may decode to, all together."""

    def __init__(self, pixels: int):
        self.limit = pixels
        self.used = 0

    def take(self, pixels: int, where: str) -> None:
        if self.used + pixels > self.limit:
            raise RequestError(
                f"the request's images add up to over {self.limit} pixels (this one brings it to "
                f"{self.used + pixels}); send fewer or smaller images per request",
                param=where,
                type="payload_too_large",
            )
        self.used += pixels


def image_parts(item: Item, index: int) -> Iterator[tuple[str, str]]:
    """(JSON path, URL or data) of every image part of an item, in conversation order."""
    if item.messages is not None:
        sources = [("messages", item.messages)]
    else:
        sources = [("prompt", item.prompt if isinstance(item.prompt, list) else [])]
    for field_name, messages in sources:
        for m, message in enumerate(messages):
            if not isinstance(message.content, list):
                continue
            for p, part in enumerate(message.content):
                where = f"items[{index}].{field_name}[{m}].content[{p}]"
                if isinstance(part, ImageURLPart):
                    yield where, part.image_url.url
                elif isinstance(part, ImagePart):
                    # The part's validator lets exactly one of url and image through.
                    yield where, part.url if part.url is not None else cast(str, part.image)


def load_item_images(
    item: Item, index: int, policy: ImagePolicy, budget: PixelBudget | None = None
) -> list[Image.Image]:
    """Every image of the item, decoded under the policy (RequestError names the part);
    ``budget``: the request's pixels left, shared by its items."""
    parts = list(image_parts(item, index))
    if len(parts) > policy.max_images:
        raise RequestError(
            f"items[{index}] has {len(parts)} images, over the limit of {policy.max_images}",
            param=f"items[{index}]",
            type="payload_too_large",
        )
    return [load_image(source, policy, where, budget) for where, source in parts]


def load_image(source: str, policy: ImagePolicy, where: str, budget: PixelBudget | None = None) -> Image.Image:
    data = _fetch_bytes(source, policy, where)
    return decode_image(data, policy, where, budget)


def _fetch_bytes(source: str, policy: ImagePolicy, where: str) -> bytes:
    if source.startswith("data:"):
        header, sep, payload = source.partition(",")
        if not sep or ";base64" not in header:
            raise RequestError("an image data URL must be base64: data:image/png;base64,...", param=where)
        if len(payload) * 3 // 4 > policy.max_bytes:
            raise RequestError(
                f"the image is over the {policy.max_bytes}-byte limit", param=where, type="payload_too_large"
            )
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise RequestError(f"the image data is not valid base64: {exc}", param=where) from exc
    scheme = urlsplit(source).scheme.lower()
    if scheme not in ("http", "https"):
        raise RequestError("images must be data URLs (or http(s) URLs to allowlisted hosts)", param=where)
    if not policy.url_allowlist:
        raise RequestError("image URLs are not fetched here (no allowlist is set): send a data URL", param=where)
    return _fetch_url(source, policy, where)


def _fetch_url(url: str, policy: ImagePolicy, where: str) -> bytes:
    import httpx

    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if host not in {h.lower() for h in policy.url_allowlist}:
        raise RequestError(f"host {host!r} is not in the image URL allowlist", param=where)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise RequestError(f"cannot resolve {host!r}", param=where) from exc
    addresses = {cast(str, info[4][0]) for info in infos}  # an IPv4 or IPv6 address: host first
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%")[0])
        if not policy.allow_private_addresses and not ip.is_global:
            raise RequestError(f"{host!r} resolves to a non-public address ({ip}): refused", param=where)
    address = sorted(addresses)[0]
    # Connect to the address just checked, naming the host for TLS and virtual hosting,
    # so a second DNS answer cannot send us elsewhere.
    target = parts._replace(netloc=f"[{address}]:{port}" if ":" in address else f"{address}:{port}")
    try:
        with httpx.Client(timeout=policy.fetch_timeout_s, follow_redirects=False) as client:
            with client.stream(
                "GET", target.geturl(), headers={"host": parts.netloc}, extensions={"sni_hostname": host}
            ) as response:
                if response.status_code != 200:
                    raise RequestError(f"fetching the image gave HTTP {response.status_code}", param=where)
                data = bytearray()
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) > policy.max_bytes:
                        raise RequestError(
                            f"the image is over the {policy.max_bytes}-byte limit",
                            param=where,
                            type="payload_too_large",
                        )
                return bytes(data)
    except httpx.HTTPError as exc:
        raise RequestError(f"fetching the image failed: {type(exc).__name__}", param=where) from exc


def decode_image(data: bytes, policy: ImagePolicy, where: str, budget: PixelBudget | None = None) -> Image.Image:
    from PIL import Image, ImageOps, UnidentifiedImageError

    if len(data) > policy.max_bytes:
        raise RequestError(
            f"the image is over the {policy.max_bytes}-byte limit", param=where, type="payload_too_large"
        )
    try:
        image = Image.open(io.BytesIO(data))  # reads the header only
    except Image.DecompressionBombError as exc:
        raise RequestError(f"the image is over the pixel limit: {exc}", param=where, type="payload_too_large") from exc
    except (UnidentifiedImageError, OSError) as exc:
        raise RequestError("the image data is not a readable PNG, JPEG or WEBP", param=where) from exc
    except (ValueError, SyntaxError, EOFError) as exc:  # PIL's own limits (a huge text chunk)
        raise RequestError(f"the image is not accepted: {exc}", param=where) from exc
    if image.format not in policy.formats:
        raise RequestError(f"image format {image.format} is not allowed ({', '.join(policy.formats)})", param=where)
    width, height = image.size
    if width * height > policy.max_pixels:
        raise RequestError(
            f"the image is {width}x{height}, over the limit of {policy.max_pixels} pixels",
            param=where,
            type="payload_too_large",
        )
    if width < 1 or height < 1 or max(width, height) > policy.max_aspect_ratio * min(width, height):
        raise RequestError(
            f"the image is {width}x{height}; its sides may differ by at most {policy.max_aspect_ratio:g}x",
            param=where,
        )
    if budget is not None:
        budget.take(width * height, where)
    if getattr(image, "n_frames", 1) > 1:
        raise RequestError("animated / multi-frame images are not accepted", param=where)
    try:
        image.load()
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise RequestError(f"the image is truncated or corrupt: {exc}", param=where) from exc
    return ImageOps.exif_transpose(image).convert("RGB")


def has_images(item: Item) -> bool:
    turns: list[Message] = item.messages or (item.prompt if isinstance(item.prompt, list) else [])
    return any(m.has_images() for m in turns)
