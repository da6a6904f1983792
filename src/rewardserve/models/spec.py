"""How one served model is described: the entries of the config file's ``models:`` list."""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

Backend = Literal["auto", "transformers", "vllm", "remote", "none"]
DType = Literal["auto", "float32", "bfloat16", "float16"]


class ShadowSpec(BaseModel):
    """A candidate served model that scores ``fraction`` of this model's /v1/score
    requests off the response path (service/observability/shadow.py)."""

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
    # A hub id's branch, tag or commit: its files all come from that snapshot, and
    # /v1/models says which (vLLM's --revision).
    revision: str | None = Field(default=None, min_length=1, max_length=200)
    # Run the checkpoint's own Python (its auto_map classes); off unless asked, logged when on.
    trust_remote_code: bool = False
    # The tokenizer from another directory or hub id, and a chat template (inline Jinja
    # or a file) in place of the one the tokenizer carries.
    tokenizer: str | None = None
    chat_template: str | None = None
    # A LoRA adapter (peft's save_pretrained directory or hub id) merged into the weights
    # at load: outcome, process and verifier models on the transformers backend.
    adapter: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    shadow: ShadowSpec | None = None
    # What results call this model's weights (``model_version``); an admin load names the
    # next one. Unset: the revision, else "0".
    version: str | None = Field(default=None, min_length=1, max_length=128)
    # Asleep (the admin API), a request wakes it rather than getting a 503.
    wake_on_request: bool = False


def describe_spec_error(entry: Any, where: str, exc: ValidationError) -> str:
    """One line for a ``models:`` entry that is not a ModelSpec: the model (its name, else
    ``where``), each bad field, and for an unknown field the closest valid one."""
    name = entry.get("name") if isinstance(entry, dict) else None
    model = f"model {name!r} ({where})" if isinstance(name, str) and name else where
    if not isinstance(entry, dict):
        return f"{model}: expected a mapping with name, source and kind, got {type(entry).__name__}"
    problems = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        if error["type"] == "extra_forbidden":
            problems.append(unknown_field(loc, ShadowSpec if loc[:1] == ["shadow"] else ModelSpec))
        else:
            problems.append(f"{'.'.join(loc) or 'the entry'}: {error['msg']}")
    return f"{model}: " + "; ".join(problems)


def unknown_field(loc: list[str], spec_type: type[BaseModel]) -> str:
    from rewardserve.models.options import request_options

    key, known = loc[-1], list(spec_type.model_fields)
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        hint = f"did you mean {close[0]!r}?"
    elif spec_type is ModelSpec and key in request_options():
        hint = "it is a request option (send it in the request's options)"
    elif spec_type is ModelSpec:
        hint = f"a kind's own settings go under 'options:'; fields: {', '.join(known)}"
    else:
        hint = f"fields: {', '.join(known)}"
    return f"unknown field {'.'.join(loc)!r}; {hint}"
