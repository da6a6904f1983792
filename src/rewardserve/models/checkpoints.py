"""Where a model's weights come from, checked before anything loads: a local directory,
or a hub id that is in the local cache or reachable now. A problem is one sentence that
says what to do, found in seconds (transformers would retry an unreachable hub for about
a minute, then fail deep inside loading)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

# owner/name, as the hub spells repository ids.
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
HUB_TIMEOUT_S = 3.0


def looks_like_path(source: str) -> bool:
    return source.startswith(("/", "./", "../", "~")) or source.count("/") > 1 or "\\" in source


def is_local(source: str) -> bool:
    return Path(source).expanduser().is_dir()


def is_remote(source: str) -> bool:
    """A model served elsewhere (a judge behind an OpenAI-compatible URL): no weights here."""
    return source.startswith(("http://", "https://"))


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def in_hub_cache(repo_id: str, revision: str | None = None) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json", revision=revision), str)


@lru_cache(maxsize=1)
def hub_unreachable() -> str | None:
    """None when the hub answers; else why not (one request per process)."""
    import httpx
    from huggingface_hub import constants

    try:
        httpx.head(constants.ENDPOINT, timeout=HUB_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return f"{constants.ENDPOINT} is unreachable ({type(exc).__name__}: {exc})"
    return None


def checkpoint_problem(source: str, revision: str | None = None) -> str | None:
    """None when ``source`` (at ``revision``, a hub id's branch, tag or commit) can be
    loaded from here; else what is wrong and what to do."""
    path = Path(source).expanduser()
    if path.is_dir():
        if revision is not None:
            return f"{source} is a local directory, which has no revisions: drop 'revision', or give a hub id"
        if not (path / "config.json").is_file():
            return f"{source} has no config.json: give the directory that holds the checkpoint"
        return None
    if path.exists():
        return f"{source} is a file: give the checkpoint's directory"
    # A relative path is looked up from the working directory, which is often not the
    # one the user had in mind (a config's own folder, say): the message names it.
    where = "" if path.is_absolute() else f"; looked up in {Path.cwd()}"
    nor_here = "" if path.is_absolute() else f" (nor a directory in {Path.cwd()})"
    # owner/name whose owner is a local directory (demo/skywork beside demo/) is a path.
    meant_as_path = not path.is_absolute() and path.parent.is_dir() and path.parent != Path(".")
    if looks_like_path(source) or not HUB_ID.fullmatch(source) or meant_as_path:
        return f"no such directory: {source} (a local checkpoint directory or a hub id owner/name{where})"
    if in_hub_cache(source, revision):
        return None
    at = f" at revision {revision}" if revision is not None else ""
    if hub_offline():
        download = f"huggingface-cli download {source}" + (f" --revision {revision}" if revision else "")
        return (
            f"{source}{at} is not in the local Hugging Face cache{nor_here} and HF_HUB_OFFLINE is set: "
            f"download it first ({download}) or give a local directory"
        )
    unreachable = hub_unreachable()
    if unreachable is not None:
        return (
            f"{source}{at} is not in the local Hugging Face cache{nor_here} and {unreachable}: download it "
            f"where there is a network, or give a local directory"
        )
    return None


def go_offline_if_unreachable(sources: list[str]) -> None:
    """Hub ids all served from the cache while the hub is unreachable: tell the hub
    client so, before it loads, so no call waits on retries."""
    hub_ids = [s for s in sources if not is_local(s) and HUB_ID.fullmatch(s)]
    if hub_ids and not hub_offline() and hub_unreachable() is not None:
        os.environ["HF_HUB_OFFLINE"] = "1"
        from huggingface_hub import constants

        constants.HF_HUB_OFFLINE = True


def checkpoint_context(source: str) -> int | None:
    """The context length the checkpoint's config declares, when it is on disk."""
    import json

    path = Path(source).expanduser() / "config.json"
    if not path.is_file() and HUB_ID.fullmatch(source):
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(source, "config.json")
        path = Path(cached) if isinstance(cached, str) else path
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for part in (config, config.get("text_config") or {}):
        for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
            if isinstance(part.get(key), int):
                return int(part[key])
    return None


def pinned_source(source: str, revision: str | None) -> str:
    """The local directory of hub id ``source`` at ``revision`` (downloaded into the hub
    cache when it is not there yet): every file a kind reads then comes from that one
    snapshot. ``source`` itself without a revision, or when it is served elsewhere."""
    if revision is None or is_local(source) or is_remote(source):
        return source
    from huggingface_hub import snapshot_download

    return str(snapshot_download(source, revision=revision))


def load_tokenizer(
    source: str, *, tokenizer: str | None = None, chat_template: str | None = None, trust_remote_code: bool = False
) -> Any:
    """The model's tokenizer (from ``tokenizer`` where the config names another), with
    ``chat_template`` put in place of the one it carries: a Jinja template, or the path
    of a file holding one."""
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(tokenizer or source, trust_remote_code=trust_remote_code)
    if chat_template is not None:
        loaded.chat_template = read_chat_template(chat_template)
    return loaded


def read_chat_template(template: str) -> str:
    """A template given inline, or read from a file (``.jinja`` or any file that exists)."""
    path = Path(template).expanduser()
    if "{" not in template and path.is_file():
        return path.read_text(encoding="utf-8")
    return template


# safetensors' dtype names, as torch dtypes' names (read with a plain file read, no map).
_SAFETENSORS_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}
MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own bound on a header


class CheckpointWeights:
    """The tensors of a checkpoint a trainer wrote (a directory of ``*.safetensors``
    files, or one such file): names, dtypes and shapes from the files' headers, each
    tensor read when asked (a plain read at its offset, never a memory map: a file a
    trainer truncates or rewrites meanwhile is a short read, a ValueError, not a SIGBUS
    that kills the process) and let go after, so no second copy of the weights is held.
    Safetensors only: a pickled ``.bin`` runs code when it is read."""

    def __init__(self, path: str):
        try:
            where = Path(path).expanduser()
            self.files = sorted(where.glob("*.safetensors")) if where.is_dir() else [where]
            ok = bool(self.files) and all(f.is_file() and f.suffix == ".safetensors" for f in self.files)
        except (OSError, RuntimeError) as exc:  # an unknown ~user, a name too long
            raise ValueError(f"{path}: {exc}") from None
        if not ok:
            raise ValueError(f"{path}: no *.safetensors weights there (a directory of them, or one such file)")
        self.shapes: dict[str, tuple[int, ...]] = {}
        self._entries: list[tuple[Path, int, str, str, tuple[int, ...], int, int]] = []
        for file in self.files:
            for name, dtype, shape, start, end, base in self._header(file):
                self.shapes[name] = shape
                self._entries.append((file, base, name, dtype, shape, start, end))

    @staticmethod
    def _header(file: Path) -> list[tuple[str, str, tuple[int, ...], int, int, int]]:
        import json
        import struct

        try:
            with open(file, "rb") as f:
                (size,) = struct.unpack("<Q", f.read(8))
                if size > MAX_HEADER_BYTES:
                    raise ValueError(f"a header of {size} bytes")
                header = json.loads(f.read(size))
            entries = []
            for name, entry in header.items():
                if name == "__metadata__":
                    continue
                dtype = _SAFETENSORS_DTYPES.get(entry["dtype"])
                if dtype is None:
                    raise ValueError(f"{name}: dtype {entry['dtype']} is not one this reads")
                start, end = entry["data_offsets"]
                entries.append((name, dtype, tuple(int(d) for d in entry["shape"]), int(start), int(end), 8 + size))
            return entries
        except Exception as exc:  # noqa: BLE001 - a torn or foreign file, said in one line
            raise ValueError(f"{file}: not a readable safetensors file ({type(exc).__name__}: {exc})") from None

    def tensors(self) -> Iterator[tuple[str, Any]]:
        """Every (name, tensor), each read as it comes."""
        import torch

        for file, base, name, dtype, shape, start, end in self._entries:
            try:
                with open(file, "rb") as f:
                    f.seek(base + start)
                    data = f.read(end - start)
            except OSError as exc:
                raise ValueError(f"{file}: {exc}") from None
            if len(data) != end - start:
                raise ValueError(f"{file}: ends before {name} does (the file changed while it was read)")
            if not data:
                yield name, torch.empty(shape, dtype=getattr(torch, dtype))
                continue
            try:
                tensor = torch.frombuffer(bytearray(data), dtype=getattr(torch, dtype)).reshape(shape)
            except Exception as exc:  # noqa: BLE001 - sizes that do not agree with the header
                raise ValueError(f"{file}: {name}: {type(exc).__name__}: {exc}") from None
            yield name, tensor
