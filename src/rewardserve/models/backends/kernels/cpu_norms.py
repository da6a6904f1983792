"""RMSNorm layers compiled by torch.compile (inductor) for bf16 on CPU: those outside the
decoder layers compiled whole (compiled_layers.py), i.e. the last layer's (cut to the
read rows) and the final norm, or every one when layers are not compiled.

transformers' RMSNorm in bf16 is six passes over the activations (to fp32, square, mean,
scale, back to bf16, times the weight); inductor fuses them into one loop, a measurable
gain on a whole forward (figures: bench/results/design-measurements.md). The norms are the model's
own code, compiled as they are (one graph per norm class and input rank); the numbers
stay within bf16's rounding of the eager ones (differences in the last bit of
intermediates, as between any two bf16 kernels). fp32 has no casts to fuse and is not
compiled (each compiled graph is one more entry in dynamo's per-function cache, which
holds 8).

Compiling costs a few seconds at load (inductor's C++ compiler); the backend checks the
compiled norms' numbers with its packed probe and keeps the eager ones on any failure (no
compiler on the machine, an unsupported op).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

log = logging.getLogger(__name__)


def is_rms_norm(module: nn.Module) -> bool:
    return type(module).__name__.endswith("RMSNorm") and isinstance(getattr(module, "weight", None), torch.Tensor)


def compile_norms(module: nn.Module, skip: tuple[type, ...] = ()) -> int:
    """Give every RMSNorm under ``module`` but those inside a ``skip`` module (compiled
    whole already) a compiled forward (one compiled function per norm class, the module
    passed in, so its layers share graphs); returns how many."""
    compiled: dict[type, Callable[..., Any]] = {}
    count = 0
    for child in _outside(module, skip):
        if is_rms_norm(child):
            forward = compiled.setdefault(type(child), torch.compile(type(child).forward, dynamic=True))
            child.forward = functools.partial(forward, child)
            count += 1
    return count


def _outside(module: nn.Module, skip: tuple[type, ...]) -> Iterator[nn.Module]:
    if isinstance(module, skip):
        return
    yield module
    for child in module.children():
        yield from _outside(child, skip)


def uncompile_norms(module: nn.Module) -> None:
    for child in module.modules():
        if is_rms_norm(child) and "forward" in vars(child):
            del child.forward  # back to the class's own
