"""How one served model is described: the entries of the config file's ``models:`` list."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Backend = Literal["auto", "transformers", "vllm", "none"]
DType = Literal["auto", "float32", "bfloat16", "float16"]


class ShadowSpec(BaseModel):
    """A candidate served model that scores ``fraction`` of this model's /v1/score
    requests off the response path (service/shadow.py)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    fraction: float = Field(gt=0, le=1)


class ModelSpec(BaseModel):
    """One model to serve. ``kind`` picks the file in ``models/`` that computes it;
    ``options`` holds what only that kind understands (a rule's ``fn``, a template)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$", max_length=128)
    kind: str | None = None  # None: taken from the preset
    source: str
    preset: str | None = None
    backend: Backend = "auto"
    dtype: DType = "auto"
    device: str = "auto"
    max_tokens: int | None = Field(default=None, gt=0)
    max_batch_tokens: int | None = Field(default=None, gt=0)
    max_wait_ms: float | None = Field(default=None, ge=0)
    max_queue_tokens: int | None = Field(default=None, gt=0)
    # Close a batch before padding passes this share of it (the CPU default is 0.05).
    max_padding_ratio: float | None = Field(default=None, ge=0, le=1)
    options: dict[str, Any] = Field(default_factory=dict)
    shadow: ShadowSpec | None = None
