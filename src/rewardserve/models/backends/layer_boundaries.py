"""Points between a forward's layers where the thread running it may do other work first.

A CPU runs one forward at a time, and a forward of a full batch lasts tens of
milliseconds. While tenants share a model (engine/batcher.py), a light tenant's item
that arrives just after a flood's batch has started would wait for all of it; instead
the batcher hands that item's batch to the model's thread, which runs it whole between
two layers of the batch in flight and then goes on with that one. Each forward computes
with its own tensors only, so neither's numbers change: the same scores, another order.

The backend marks the points (``mark_layers``: a hook before each decoder layer); the
batcher says what to run there (``run_between_layers``, around a batch's run on its
thread). Work run at a point is not itself interrupted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the service imports this module, and loads torch only with a model
    from torch import nn

_local = threading.local()


@contextmanager
def run_between_layers(callback: Callable[[], None] | None) -> Iterator[None]:
    """While inside, every layer boundary of a forward on this thread calls ``callback``."""
    previous = getattr(_local, "callback", None)
    _local.callback = callback
    try:
        yield
    finally:
        _local.callback = previous


def layer_boundary(module: nn.Module | None = None, args: object = None) -> None:
    """A forward pre-hook (``module``, ``args`` unused): the thread's callback, if any."""
    callback = getattr(_local, "callback", None)
    if callback is None:
        return
    _local.callback = None  # the work run here runs its own forwards through
    try:
        callback()
    finally:
        _local.callback = callback


def mark_layers(decoder: nn.Module) -> bool:
    """Hooks before each of ``decoder.layers`` (the modules there now: call it after any
    wrapping); False where the decoder has no such list."""
    from torch import nn

    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        return False
    for layer in layers:
        layer.register_forward_pre_hook(layer_boundary)
    return True
