"""What ``POST /v1/admin/models/{name}/weights`` checks and writes (service/ops/lifecycle.py
orders it): the folder a trainer wrote, whether it is this model's, and the write into
the serving model's own tensors, read back from the model's source when the files
change under it."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from rewardserve.models.checkpoints import CheckpointWeights
from rewardserve.models.errors import RequestError
from rewardserve.models.reward_model import RewardModel

T = TypeVar("T")


class LoadFailed(RequestError):
    error_type = "invalid_request"


class WeightsLost(Exception):
    """A write torn, and the weights it served could not be read back either."""


def refuse_unless_checkpoint(path: str, serving: str) -> None:
    """422 unless ``path`` is a folder as save_pretrained writes it."""
    try:
        has_config = (Path(path).expanduser() / "config.json").is_file()
    except (OSError, RuntimeError):  # an unknown ~user, a name too long
        has_config = False
    if not has_config:
        raise LoadFailed(
            f"{path}: not a checkpoint folder as save_pretrained writes it (config.json and "
            f"*.safetensors; the tokenizer may be left out); version {serving!r} serves on",
            param="path",
        )


def config_differs(source: str, path: str) -> str | None:
    """Why the checkpoint at ``path`` is another model than ``source`` by its config (its
    weights then cannot be written into this one's), or None."""

    def read(folder: str) -> dict[str, object] | None:
        try:
            config = json.loads((Path(folder).expanduser() / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError, RuntimeError):
            return None
        if not isinstance(config, dict):
            return None
        for key in ("_name_or_path", "transformers_version", "torch_dtype", "dtype", "use_cache"):
            config.pop(key, None)
        return config

    old, new = read(source), read(path)
    if old is None or new is None or old == new:
        return None
    differ = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))[:5]
    return f"its config.json differs from the serving model's ({', '.join(differ)})"


def checked(model: RewardModel, path: str) -> CheckpointWeights:
    """The checkpoint's weights, checked against the model's (ValueError: why not)."""
    weights = CheckpointWeights(path)
    model.check_weights(weights)
    return weights


def write_or_read_back(model: RewardModel, weights: CheckpointWeights) -> str | None:
    """``weights`` written into the model's tensors: None. When the files change while
    they are written, the weights it served are read back from its source and the reason
    returned; WeightsLost when those cannot be read either (no half-written scores)."""
    try:
        model.update_weights(weights)
        return None
    except ValueError as exc:  # the files changed after they were checked
        try:
            model.update_weights(CheckpointWeights(model.spec.source))
        except ValueError as lost:
            raise WeightsLost(f"{exc} while it was written, and {lost}") from None
        return f"{exc} while it was written"


def folder_fingerprint(source: str) -> str | None:
    """What a checkpoint folder holds now, by its files' names, sizes and times (None for
    a source that is not a local folder): a rollback to weights read from a folder a
    trainer has saved over since would serve other weights under the old version."""
    try:
        folder = Path(source).expanduser()
        if not folder.is_dir():
            return None
        files = sorted(f for f in folder.iterdir() if f.suffix in (".safetensors", ".json") and f.is_file())
        seen = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    except (OSError, RuntimeError):
        return None
    return hashlib.sha256(repr(seen).encode()).hexdigest()[:16]


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a thread. A cancellation (a shutdown) waits for the thread to end
    before it goes on: a thread cannot be stopped, and nothing may close a model that one
    is still writing or loading."""
    future = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait([future])
        raise
