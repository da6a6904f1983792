"""Where a model's weights live and what they may be given: the device and dtype a spec's
``auto`` means here, the context a checkpoint can be read over, and weights copied out of
the checkpoint's file into the process's own memory."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rewardserve.models.backends.backend import IN_HOST_MEMORY

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# A position limit above this is a "no limit" sentinel some configs carry.
_MAX_SANE_POSITIONS = 1 << 20


def pick_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        # bf16 is the checkpoints' own dtype on GPUs; on CPU fp32 keeps scores exact.
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return _DTYPES[dtype]


def weights_to_host(modules: list[nn.Module], device: torch.device) -> str:
    """A level-1 sleep of weights on ``device`` (Backend.to_host): moved to host memory."""
    if device.type == "cpu":
        return IN_HOST_MEMORY
    move_to(modules, torch.device("cpu"))
    return f"weights moved from {device} to host memory"


def weights_from_host(modules: list[nn.Module], device: torch.device) -> None:
    """Undo ``weights_to_host``."""
    if device.type != "cpu":
        move_to(modules, device)


def move_to(modules: list[nn.Module], device: torch.device) -> None:
    """Every module's parameters and buffers onto ``device`` (tied weights stay tied: the
    shared parameter is moved once); leaving a GPU hands its cached blocks back. A move
    that fails (the device is full) takes all of them back to the host: a model is never
    left split across the two."""
    try:
        with torch.no_grad():
            for module in modules:
                module.to(device)
    except Exception:
        if device.type != "cpu":
            move_to(modules, torch.device("cpu"))
        raise
    if device.type == "cpu":
        for accelerator in (getattr(torch, name, None) for name in ("cuda", "xpu")):
            if accelerator is not None and accelerator.is_available():
                accelerator.empty_cache()


def own_memory(module: nn.Module) -> None:
    """Every parameter of ``module`` in the process's own memory. transformers keeps CPU
    weights of the checkpoint's dtype as a map of its safetensors file: a trainer saving
    over that file would change the served scores under the same version, or kill the
    process (SIGBUS) while the file is shorter than the map. One tensor at a time: no
    second copy of the weights is held."""
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.data = parameter.data.clone()


def context_limit(name: str, asked: int | None, config: Any, tokenizer: Any) -> int:
    """The tokens a model may be given: the checkpoint's position limit
    (``max_position_embeddings``, or the tokenizer's ``model_max_length`` where smaller and
    real), or less when the spec asks. Asking for more is a load error: a model read past
    the positions it was trained on gives numbers, not scores."""
    limits = [getattr(config, "max_position_embeddings", None), getattr(tokenizer, "model_max_length", None)]
    sane = [int(x) for x in limits if isinstance(x, int) and 0 < x < _MAX_SANE_POSITIONS]
    limit = min(sane) if sane else None
    if asked is None:
        return limit or 4096
    if limit is not None and asked > limit:
        raise ValueError(
            f"model {name!r}: max_tokens {asked} is over the checkpoint's context of {limit} "
            f"positions; set max_tokens to at most {limit} or leave it unset"
        )
    return asked
