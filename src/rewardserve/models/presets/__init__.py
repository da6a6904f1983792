"""Presets for known checkpoints, read from ``presets.yaml`` beside this file."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import yaml

_PRESETS_FILE = Path(__file__).with_name("presets.yaml")


@cache
def all_presets() -> tuple[dict[str, Any], ...]:
    with open(_PRESETS_FILE, encoding="utf-8") as f:
        return tuple(yaml.safe_load(f))


def by_name(name: str) -> dict[str, Any]:
    for preset in all_presets():
        if preset["name"] == name:
            return preset
    known = ", ".join(p["name"] for p in all_presets())
    raise KeyError(f"unknown preset {name!r}; known presets: {known}")


def by_source(source: str) -> dict[str, Any] | None:
    wanted = source.rstrip("/").lower()
    for preset in all_presets():
        if any(s.lower() == wanted for s in preset.get("sources", ())):
            return preset
    return None


def by_architecture(source: str) -> dict[str, Any] | None:
    """The preset claiming the local checkpoint's architecture, when exactly one does."""
    architectures = checkpoint_architectures(source)
    claims = [p for p in all_presets() if set(p.get("architectures", ())) & set(architectures)]
    return claims[0] if len(claims) == 1 else None


def checkpoint_architectures(source: str) -> list[str]:
    config = Path(source) / "config.json"
    if not config.is_file():
        return []
    with open(config, encoding="utf-8") as f:
        return list(json.load(f).get("architectures") or [])


def resolve(source: str, preset: str | None) -> dict[str, Any] | None:
    """The preset a model gets: named explicitly, else by source, else by architecture."""
    if preset is not None:
        return by_name(preset)
    return by_source(source) or by_architecture(source)
