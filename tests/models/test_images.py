"""Images from requests: every refusal, and the one way in."""

from __future__ import annotations

import base64
import io
import struct
import threading
import zlib
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from PIL import Image

from rewardserve.client.images import data_url, image_part
from rewardserve.models.errors import RequestError
from rewardserve.models.images import ImagePolicy, load_image, load_item_images
from rewardserve.protocol import ERROR_STATUS, Item

POLICY = ImagePolicy()


def png_bytes(size=(8, 6), color=(200, 10, 10)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def huge_png_header(width=20000, height=20000) -> bytes:
    """A PNG whose header claims 20000x20000 pixels; its pixel data never exists."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 10)) + chunk(b"IEND", b"")


def url_of(data: bytes, mime="image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def refused(source, status, policy=POLICY, match=None):
    with pytest.raises(RequestError) as err:
        load_image(source, policy, "items[0].messages[0].content[0]")
    assert ERROR_STATUS[err.value.type] == status and err.value.param == "items[0].messages[0].content[0]"
    if match:
        assert match in err.value.message
    return err.value


def test_a_good_png_decodes_to_rgb():
    image = load_image(url_of(png_bytes()), POLICY, "x")
    assert image.mode == "RGB" and image.size == (8, 6)


def test_decompression_bomb_is_refused_before_decoding():
    refused(url_of(huge_png_header()), 413)
    small_cap = ImagePolicy(max_pixels=10_000)
    refused(url_of(huge_png_header(200, 100)), 413, small_cap, "200x100")


def test_truncated_jpeg_is_422():
    import numpy as np

    buffer = io.BytesIO()
    noise = np.random.RandomState(0).randint(0, 255, (128, 128, 3), dtype=np.uint8)
    Image.fromarray(noise).save(buffer, format="JPEG")
    data = buffer.getvalue()
    refused(url_of(data[: len(data) // 2], "image/jpeg"), 422, match="truncated")


def test_gif_with_frames_is_422():
    buffer = io.BytesIO()
    frames = [Image.new("RGB", (8, 8), c) for c in ((255, 0, 0), (0, 255, 0))]
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:])
    refused(url_of(buffer.getvalue(), "image/gif"), 422, match="GIF")
    animated_webp = io.BytesIO()
    frames[0].save(animated_webp, format="WEBP", save_all=True, append_images=frames[1:])
    refused(url_of(animated_webp.getvalue(), "image/webp"), 422, match="multi-frame")


def test_fifty_megabyte_data_url_is_413_without_decoding():
    payload = "A" * (50 * 1024 * 1024)
    refused(f"data:image/png;base64,{payload}", 413, match="byte limit")


def test_urls_and_paths():
    refused("http://example.com/cat.png", 422, match="allowlist")
    refused("file:///etc/passwd", 422)
    refused("/etc/passwd", 422)
    refused("data:image/png,notbase64", 422)
    refused("data:image/png;base64,@@@@", 422)


@pytest.mark.parametrize("host", ["localhost", "2130706433", "127.1", "0x7f.0.0.1"])
def test_allowlisted_names_of_loopback_are_refused(host):
    policy = ImagePolicy(url_allowlist=(host,))
    refused(f"http://{host}:9/cat.png", 422, policy, "non-public")


def test_too_many_images_in_one_item_is_413():
    part = image_part(png_bytes())
    item = Item(messages=[{"role": "user", "content": [part] * 100}, {"role": "assistant", "content": "x"}])
    with pytest.raises(RequestError) as err:
        load_item_images(item, 3, POLICY)
    assert ERROR_STATUS[err.value.type] == 413 and err.value.param == "items[3]"


def test_exif_orientation_is_applied():
    image = Image.new("RGB", (40, 20), (9, 9, 9))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise when shown
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", exif=exif)
    assert load_image(url_of(buffer.getvalue(), "image/jpeg"), POLICY, "x").size == (20, 40)


def test_client_helper_makes_data_urls(tmp_path):
    path = tmp_path / "a.png"
    path.write_bytes(png_bytes())
    assert data_url(path).startswith("data:image/png;base64,")
    assert data_url(png_bytes()) == data_url(path)
    assert data_url(Image.new("RGB", (4, 4)), format="WEBP").startswith("data:image/webp;base64,")
    assert load_image(data_url(path), POLICY, "x").size == (8, 6)


class _Server(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        if self.path == "/cat.png":
            body = png_bytes((5, 5))
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_response(302)
            self.send_header("location", "/cat.png")
            self.end_headers()

    def log_message(self, *args):
        pass


def test_allowlisted_fetch_without_redirects():
    server = HTTPServer(("127.0.0.1", 0), _Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        # Loopback is only reachable with the test-only switch; the default refuses it.
        policy = ImagePolicy(url_allowlist=("127.0.0.1",), allow_private_addresses=True)
        assert load_image(f"http://127.0.0.1:{port}/cat.png", policy, "x").size == (5, 5)
        refused(f"http://127.0.0.1:{port}/elsewhere", 422, policy, "HTTP 302")
        refused(f"http://127.0.0.1:{port}/cat.png", 422, ImagePolicy(url_allowlist=("127.0.0.1",)))
    finally:
        server.shutdown()
