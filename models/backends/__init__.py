"""Forward-pass engines. ``make_backend`` picks one from the model spec."""

from __future__ import annotations

from rewardserve.models.backends.base import Backend, Sequence
from rewardserve.models.spec import ModelSpec

__all__ = ["Backend", "Sequence", "make_backend"]


def make_backend(spec: ModelSpec, task: str) -> Backend:
    """``task``: one of ``backends.base.TASKS``."""
    if spec.backend in ("auto", "transformers"):
        from rewardserve.models.backends.transformers_backend import TransformersBackend

        return TransformersBackend(spec, task)
    raise ValueError(f"model {spec.name!r}: backend {spec.backend!r} is not available")
