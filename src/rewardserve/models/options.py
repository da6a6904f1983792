"""Typed per-kind options: what a model spec's ``options:`` may hold.

Every kind declares its options as a pydantic model that refuses unknown keys; the
preset's options and the user's are merged and validated when the model is built, at
start, so a misspelled key stops the service naming the model, the key and the closest
valid name. The README's option tables are generated from these models
(``python -m rewardserve.models.options_reference``).
"""

from __future__ import annotations

import difflib
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class KindOptions(BaseModel):
    """Options every kind takes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    score_cache_size: int = Field(
        20_000,
        ge=0,
        description="Finished results kept by what they depend on (GRPO sends a completion many times); "
        "0 turns the cache off.",
    )


class BackendOptions(BaseModel):
    """How the forward passes run (kinds with weights)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    packing: bool = Field(
        True, description="transformers: many sequences in one unpadded row, each prefix once (off: padded batches)."
    )
    attention: Literal["auto", "segments", "flex"] = Field(
        "auto",
        description="transformers, packed rows: an SDPA call per segment, or one FlexAttention call per row "
        "and layer (compiled on CUDA); auto: flex on CUDA, segments on CPU.",
    )
    cpu_linear: Literal["onednn", "torch"] = Field(
        "onednn", description="transformers on CPU: the backbone's linears as prepacked oneDNN kernels, or torch's own."
    )
    compile_layers: bool = Field(True, description="transformers on CPU: decoder layers through torch.compile.")
    compile_norms: bool = Field(True, description="transformers on CPU in bfloat16: RMSNorms through torch.compile.")
    layer_boundaries: bool = Field(
        True,
        description="transformers: while tenants share the model, another tenant's batch may run between two "
        "layers of the batch in flight (off: it waits for the whole batch).",
    )
    gpu_memory_utilization: float = Field(
        0.85, gt=0, le=1, description="vllm: the share of GPU memory the engine may take."
    )
    seed: int = Field(0, description="vllm: the engine's sampling seed.")
    enforce_eager: bool = Field(
        False, description="vllm: no graph capture or compilation (starts in seconds, runs slower)."
    )
    block_size: int | None = Field(
        None,
        gt=0,
        description="vllm: tokens per KV-cache block, the unit its prefix cache shares (a prompt's tail "
        "past the last full block is computed again for every completion); unset: 32 on a CPU, vLLM's own on a GPU.",
    )
    quantization: str | None = Field(
        None,
        description="vllm: the engine's weight quantization (awq, gptq, fp8, ...), as vLLM's --quantization; GPU-side.",
    )
    tensor_parallel_size: int = Field(
        1, gt=0, description="vllm: GPUs the engine splits the model over, as vLLM's --tensor-parallel-size."
    )
    remote_model: str | None = Field(
        None, description="remote: the model name the judge server serves (unset: this model's name)."
    )
    api_key_env: str | None = Field(
        None, description="remote: the environment variable that holds the judge server's API key (sent as Bearer)."
    )
    max_concurrency: int = Field(16, gt=0, le=1024, description="remote: requests to the judge server at once.")
    request_timeout_s: float = Field(120.0, gt=0, description="remote: the longest one request to the server may take.")
    top_logprobs: int = Field(
        20,
        gt=0,
        description="remote, on servers without vLLM's logprob_token_ids: the top log-probabilities asked for, "
        "among which the verdict's choices are found (a choice outside them has no mass).",
    )


class WeightedKindOptions(KindOptions, BackendOptions):
    """Options of kinds that run a checkpoint."""

    def backend(self) -> BackendOptions:
        return BackendOptions(**{name: getattr(self, name) for name in BackendOptions.model_fields})


OptionsT = TypeVar("OptionsT", bound=BaseModel)


class OptionsError(ValueError):
    """A model's options are not what its kind takes."""


def validate_options(model_name: str, kind: str, options_type: type[OptionsT], given: dict[str, Any]) -> OptionsT:
    """``given`` as ``options_type``, or an OptionsError naming the model, each bad key
    and, for an unknown key, the closest valid one."""
    try:
        return options_type.model_validate(given)
    except ValidationError as exc:
        raise OptionsError(describe(model_name, kind, options_type, exc)) from None


def request_options() -> frozenset[str]:
    """What a request's ``options`` may hold, on any scoring route (the wire contract's)."""
    from rewardserve.protocol import CompareOptions, ScoreOptions, StepOptions, VerifyOptions

    return frozenset(
        name for options in (ScoreOptions, StepOptions, VerifyOptions, CompareOptions) for name in options.model_fields
    )


def describe(model_name: str, kind: str, options_type: type[BaseModel], exc: ValidationError) -> str:
    known = list(options_type.model_fields)
    problems = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "options"
        if error["type"] == "extra_forbidden" and len(error["loc"]) == 1 and key in request_options():
            # Not a misspelled model option (``activation`` is not ``attention``): the
            # request chooses it, each request in its own ``options``.
            problems.append(
                f"{key!r} is a request option (send it in the request's options), not a model option of kind {kind}"
            )
        elif error["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(error["loc"][0]), known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else f"; options of kind {kind}: {', '.join(known)}"
            problems.append(f"unknown option {key!r}{hint}")
        else:
            problems.append(f"option {key!r}: {error['msg']}")
    return f"model {model_name!r} (kind {kind}): " + "; ".join(problems)
