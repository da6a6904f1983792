"""What a served model holds in memory, and handing it back when the model goes (a
level-2 sleep, a replaced version, a failed load)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys

from rewardserve.models.reward_model import RewardModel


def drop(model: RewardModel) -> None:
    """Close the model and free what it held: its backend's modules go with the last
    reference, then the allocator hands the pages back."""
    try:
        model.close()
    finally:
        for attr in ("backend", "reference"):
            if attr in vars(model):
                setattr(model, attr, None)
        gc.collect()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()  # the caching allocator's blocks back to the GPU
        _trim()


def _trim() -> None:
    name = ctypes.util.find_library("c")
    if name:
        libc = ctypes.CDLL(name)
        if hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)


def held_bytes(model: RewardModel) -> int:
    """The bytes of the torch parameters and buffers its backends hold, or the model
    itself where a kind loads its modules without a backend (vlm, clip_goal); 0 for none."""
    seen: set[int] = set()
    total = 0
    for holder in (*model.backends(), model):
        for value in vars(holder).values():
            for tensor in _tensors(value):
                try:
                    key = tensor.data_ptr()
                except RuntimeError:  # an opaque tensor (a oneDNN-packed weight): no storage pointer
                    key = id(tensor)
                if key not in seen:
                    seen.add(key)
                    total += tensor.numel() * tensor.element_size()
    return total


def _tensors(value: object) -> list:  # type: ignore[type-arg]  # torch is untyped here
    parameters = getattr(value, "parameters", None)
    buffers = getattr(value, "buffers", None)
    if not callable(parameters) or not callable(buffers):
        return []
    try:
        return [*parameters(), *buffers()]
    except Exception:  # noqa: BLE001 - an object with a parameters() of another meaning
        return []
