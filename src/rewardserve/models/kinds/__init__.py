"""Kinds register by name; a model spec becomes a ``RewardModel`` here.

A kind lives in ``models/<kind>.py`` and registers itself with ``@register_kind``. Its
module is imported the first time a spec names it, so adding a kind needs no edit here.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any, TypeVar

from rewardserve.models import presets
from rewardserve.models.reward_model import ModelContext, RewardModel
from rewardserve.models.spec import ModelSpec

_KINDS: dict[str, type[RewardModel]] = {}
M = TypeVar("M", bound=type[RewardModel])


def register_kind(name: str) -> Callable[[M], M]:
    def add(cls: M) -> M:
        cls.kind = name
        _KINDS[name] = cls
        return cls

    return add


def kind_class(name: str) -> type[RewardModel]:
    if name not in _KINDS and re.fullmatch(r"[a-z][a-z0-9_]*", name):
        try:
            importlib.import_module(f"rewardserve.models.kinds.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"rewardserve.models.kinds.{name}":
                raise
    if name not in _KINDS:
        raise ValueError(f"unknown model kind {name!r}; kinds: {', '.join(known_kinds())}")
    return _KINDS[name]


def known_kinds() -> list[str]:
    """The kinds in this folder and any registered from elsewhere."""
    import pkgutil

    here = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
    return sorted(set(here) | set(_KINDS))


def infer_kind(source: str) -> str | None:
    """A kind from the checkpoint's architecture, for sources no preset knows."""
    for arch in presets.checkpoint_architectures(source):
        if arch.endswith("ForSequenceClassification"):
            return "outcome"
    return None


def build_model(spec: ModelSpec, context: ModelContext | None = None) -> RewardModel:
    preset: dict[str, Any] | None = presets.resolve(spec.source, spec.preset)
    kind = spec.kind or (preset or {}).get("kind") or infer_kind(spec.source)
    if kind is None:
        from rewardserve.models.checkpoints import checkpoint_problem

        problem = checkpoint_problem(spec.source, spec.revision)
        if problem is not None:
            raise ValueError(f"model {spec.name!r}: {problem}")
        raise ValueError(
            f"model {spec.name!r}: cannot tell the kind of {spec.source}: no preset knows it and "
            f"its config.json names no *ForSequenceClassification architecture; set 'kind' "
            f"(kind: in the config, NAME=SOURCE:KIND or --kind on the command line)"
        )
    if preset is not None and preset.get("kind") != kind:
        preset = None  # a preset of another kind says nothing about this model
    try:
        cls = kind_class(kind)
    except ValueError as exc:
        raise ValueError(f"model {spec.name!r}: {exc}") from None
    if context is not None and not context.compile:
        off = {k: False for k in ("compile_layers", "compile_norms") if k in cls.Options.model_fields}
        spec = spec.model_copy(update={"options": {**off, **spec.options}})
    return cls(spec, preset, context)


def build_checked(spec: ModelSpec, context: ModelContext | None = None) -> RewardModel:
    """``build_model`` for a model about to be served: a kind with weights first has its
    checkpoint found (a local directory, or a hub id cached or reachable), so a missing
    path is named as such rather than as whatever reading it would break."""
    from rewardserve.models.checkpoints import checkpoint_problem, is_remote

    try:
        has_weights = spec.kind is None or kind_class(spec.kind).runs_torch
    except ValueError:
        has_weights = False  # build_model names the unknown kind
    problem = checkpoint_problem(spec.source, spec.revision) if has_weights and not is_remote(spec.source) else None
    if problem is not None:
        raise ValueError(f"model {spec.name!r}: {problem}")
    return build_model(spec, context)
