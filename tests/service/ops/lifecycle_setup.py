"""What the lifecycle tests share (test_lifecycle.py, test_lifecycle_rollback.py,
test_admin_operations.py): checkpoint versions of one tiny classifier, a service with
scoring and admin keys, and the scores it gives."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.builders import build_sequence_classifier

ADMIN = {"authorization": "Bearer admin-key"}
SCORER = {"authorization": "Bearer score-key"}
ITEMS = [{"prompt": "What is 2+2?", "response": r} for r in ("4", "five", "It is 4.")]
# Linears left as torch's and nothing compiled: the weights are plain tensors to rewrite.
IN_PLACE = {"cpu_linear": "torch", "compile_layers": False}


def build_versions(root: Path) -> tuple[Path, Path, Path]:
    """Two versions of one model (other seeds), and a copy of the first cut in half."""
    first = build_sequence_classifier(root / "v1", seed=0)
    second = build_sequence_classifier(root / "v2", seed=1)
    broken = root / "broken"
    shutil.copytree(first, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return first, second, broken


def keyed(models: list[ModelSpec], **settings: Any) -> Settings:
    """A service of ``models`` with a scoring key and an admin key."""
    return Settings(
        builtin_rules=False,
        api_keys=["score-key"],
        admin_keys=["admin-key"],
        compile=False,
        models=models,
        **settings,
    )


def two_served(first: Path, second: Path, **options: Any) -> Settings:
    """``rm`` (v1, from ``first``) and ``other`` (``second``: what new weights should score)."""
    return keyed(
        [
            ModelSpec(name="rm", source=str(first), version="v1", options={"score_cache_size": 64, **options}),
            ModelSpec(name="other", source=str(second)),
        ]
    )


async def scores_of(http: Any, model: str) -> list[float]:
    answer = await http.post("/v1/score", json={"model": model, "items": ITEMS}, headers=SCORER)
    assert answer.status_code == 200, answer.text
    return [r["score"] for r in answer.json()["results"]]
