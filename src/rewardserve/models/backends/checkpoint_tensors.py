"""A loaded model's tensors under the names its checkpoint gives them, and a trainer's
checkpoint checked against them before (and as) it is written in place
(TransformersBackend.check_weights / update_weights)."""

from __future__ import annotations

import torch
from torch import nn

from rewardserve.models.checkpoints import CheckpointWeights


def checkpoint_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """The module's state dict under the names its checkpoint gives them: the wrappers
    put around a layer at load (``.layer``) are not in a checkpoint. Views of the
    parameters themselves."""
    from rewardserve.models.backends.kernels.compiled_layers import CompiledLayer
    from rewardserve.models.backends.readouts import LastLayerAtReads

    wrapped = [
        f"{name}.layer." for name, m in module.named_modules() if isinstance(m, (CompiledLayer, LastLayerAtReads))
    ]
    state = {}
    for key, tensor in module.state_dict().items():
        for prefix in sorted(wrapped, key=len, reverse=True):  # the innermost first
            if key.startswith(prefix):
                key = prefix[: -len("layer.")] + key[len(prefix) :]
        state[key] = tensor
    return state


def check_fit(own: dict[str, torch.Tensor], weights: CheckpointWeights) -> None:
    """ValueError unless ``weights`` are this model's: the same names, shapes and kinds of
    number, each value finite in the model's dtype."""
    unexpected = sorted(set(weights.shapes) - set(own))
    # A tied weight (the LM head sharing the embeddings) is saved once, under one name.
    given = {own[k].data_ptr() for k in weights.shapes if k in own}
    missing = sorted(k for k in set(own) - set(weights.shapes) if own[k].data_ptr() not in given)
    if unexpected or missing:
        raise ValueError(
            f"not this model's weights: {len(missing)} missing (e.g. {missing[:3]}), "
            f"{len(unexpected)} unexpected (e.g. {unexpected[:3]})"
        )
    for name, shape in weights.shapes.items():
        if shape != tuple(own[name].shape):
            shapes = f"{shape}, this model's {tuple(own[name].shape)}"
            raise ValueError(f"not this model's weights: {name} has shape {shapes}")
    for name, tensor in weights.tensors():  # read once to check, then let go
        fitted(name, tensor, own[name])


def write_into(own: dict[str, torch.Tensor], weights: CheckpointWeights) -> None:
    for name, tensor in weights.tensors():
        if name not in own:
            raise ValueError(f"{name}: not this model's (the checkpoint changed while it was read)")
        own[name].copy_(fitted(name, tensor, own[name]))


def fitted(name: str, tensor: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """``tensor`` in ``own``'s dtype, or ValueError: another shape, a whole-number tensor
    for a floating-point weight, or a value the cast makes infinite (1e300 into float32)."""
    if tuple(tensor.shape) != tuple(own.shape):
        raise ValueError(
            f"not this model's weights: {name} has shape {tuple(tensor.shape)}, this model's {tuple(own.shape)}"
        )
    if own.is_floating_point() != tensor.is_floating_point():
        raise ValueError(f"not this model's weights: {name} is {tensor.dtype}, this model's {own.dtype}")
    try:
        cast = tensor.to(dtype=own.dtype)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"{name}: {tensor.dtype} does not cast to {own.dtype} ({exc})") from None
    if cast.is_floating_point() and not bool(torch.isfinite(cast).all()):
        raise ValueError(f"{name}: not finite (in {own.dtype})")
    return cast
