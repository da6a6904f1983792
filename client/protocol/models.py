"""What the service says of its models: /v1/models, a shadow report, /health."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rewardserve.client.protocol.common import _Response

# --------------------------------------------------------------------------- /v1/models, health


ModelKind = Literal["outcome", "process", "verifier", "rule", "vlm", "clip_goal"]


class ModelCard(_Response):
    """One served model: OpenAI's model object (``id``, ``object``, ``created``,
    ``owned_by``), so OpenAI-style clients list it, and this service's own fields."""

    id: str = ""
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "rewardserve"
    name: str
    kind: str
    backend: str
    source: str
    preset: str | None = None
    max_tokens: int | None = None
    ready: bool = False
    # Its scores' running statistics (what ``normalize: running`` reads), once it has any.
    running: RunningStats | None = None


class ShadowReport(_Response):
    """GET /v1/models/{name}/shadow: how the shadow candidate's scores compare with the
    served model's, over the last items it scored (None: too few to tell)."""

    model: str
    candidate: str
    fraction: float
    requests: int = 0  # shadowed requests scored
    skipped: int = 0  # picked, but the candidate was busy
    failed: int = 0
    items: int = 0
    groups: int = 0
    spearman: float | None = None
    best_changed: float | None = None  # share of GRPO groups whose best completion changes
    sign_flips: float | None = None  # share of group advantages whose sign flips


class RunningStats(_Response):
    count: int
    mean: float
    std: float


class ModelList(_Response):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Health(_Response):
    status: str
    models: dict[str, bool] = Field(default_factory=dict)
