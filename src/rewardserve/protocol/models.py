"""What the service says of its models: /v1/models, a shadow report, /health, the admin API."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rewardserve.protocol.common import _Request, _Response

# --------------------------------------------------------------------------- /v1/models, health


ModelKind = Literal["outcome", "process", "verifier", "rule", "vlm", "clip_goal"]


class ModelCard(_Response):
    """One served model: OpenAI's model object (``id``, ``object``, ``created``,
    ``owned_by``), so OpenAI-style clients list it, and this service's own fields."""

    id: str = Field(default="", description="The model's name (OpenAI's id).")
    object: Literal["model"] = Field(default="model", description='Always "model".')
    created: int = Field(default=0, description="OpenAI's creation time (Unix seconds); 0 here.")
    owned_by: str = Field(default="rewardserve", description='Always "rewardserve".')
    name: str = Field(description="The model's name in the config.")
    kind: str = Field(
        description=("What it is: a reward model kind, a rule, a judge, ... (it sets the routes it answers).")
    )
    backend: str = Field(description="What runs it: transformers, vllm, rule, ...")
    source: str = Field(description="Where it loaded from: a hub id, a directory, or a rule's name.")
    revision: str | None = Field(default=None, description="The hub revision it was pinned to.")
    preset: str | None = Field(default=None, description="The preset its config started from.")
    max_tokens: int | None = Field(default=None, description="The most tokens one item may have.")
    chat_template_sha256: str | None = Field(
        default=None,
        description=(
            "The sha256 of the chat template its conversations are rendered with (None: it "
            "renders none), so an evaluation can record which template scored it."
        ),
    )
    ready: bool = Field(default=False, description="Whether it is loaded and answers now.")
    running: RunningStats | None = Field(
        default=None,
        description=("Its scores' running statistics (what ``normalize: running`` reads), once it has any."),
    )


class ShadowReport(_Response):
    """GET /v1/models/{name}/shadow: how the shadow candidate's scores compare with the
    served model's, over the last items it scored (None: too few to tell)."""

    model: str = Field(description="The served model.")
    candidate: str = Field(description="The shadow candidate compared with it.")
    fraction: float = Field(description="The share of the model's requests the candidate also scores.")
    requests: int = Field(default=0, description="Requests the candidate scored.")
    skipped: int = Field(
        default=0, description="Picked requests it skipped: too many in flight, or the candidate's queue full."
    )
    failed: int = Field(default=0, description="Requests it failed.")
    items: int = Field(default=0, description="Items compared.")
    groups: int = Field(default=0, description="Groups compared.")
    spearman: float | None = Field(
        default=None, description="The rank correlation of the two models' scores; None: too few to tell."
    )
    best_changed: float | None = Field(
        default=None, description="The share of groups whose best completion differs between the two models."
    )
    sign_flips: float | None = Field(default=None, description="The share of items whose group advantage changes sign.")


class RunningStats(_Response):
    count: int = Field(description="How many scores the statistics hold.")
    mean: float = Field(description="Their mean.")
    std: float = Field(description="Their standard deviation.")


class ModelList(_Response):
    object: Literal["list"] = Field(default="list", description='Always "list".')
    data: list[ModelCard] = Field(description="The served models.")


class Health(_Response):
    status: str = Field(description='"ok", or "failed: " and why (with HTTP 503) when a model failed to load.')
    models: dict[str, bool] = Field(default_factory=dict, description="Whether each model is ready, by name.")
    isolation: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "What runs a model's work outside the service, by model (the code model's "
            "sandbox: its isolation); to callers the models may be named to."
        ),
    )


# --------------------------------------------------------------------------- /version, /info


class VersionInfo(_Response):
    """GET /version, in vLLM's shape."""

    version: str = Field(description="The service's version.")


class ModelInfo(_Response):
    """One served model on GET /info (TEI's per-model fields, adapted)."""

    id: str = Field(description="The served name: what requests put in `model`.")
    kind: str = Field(description="What it is: outcome, process, verifier, rule, vlm, clip_goal, ensemble, ...")
    backend: str = Field(description="What runs it.")
    source: str = Field(description="The checkpoint (hub id or path), or the rule's function.")
    dtype: str | None = Field(
        default=None,
        description=(
            'The dtype and device its forwards run in (e.g. "bfloat16", "cuda:0"); None for a'
            " model without weights (a rule, an ensemble)."
        ),
    )
    device: str | None = Field(
        default=None, description="The device its forwards run on; None for a model without weights."
    )
    max_input_tokens: int | None = Field(
        default=None,
        description=(
            "The most tokens one input may have (the model's context, or the spec's "
            "max_tokens); None when the model reads no tokens or has not loaded yet."
        ),
    )
    max_batch_tokens: int | None = Field(
        default=None, description="The padded tokens one forward batch may hold; None for a model without weights."
    )
    tokenizer: bool = Field(default=False, description="Whether it has a tokenizer, i.e. answers POST /tokenize.")
    ready: bool = Field(default=False, description="Whether it is loaded and answers now.")


class ServiceLimits(_Response):
    """The per-request limits every route enforces (the service's settings)."""

    max_items_per_request: int = Field(description="The most items one request may carry (a longer list is a 413).")
    max_work_per_request: int = Field(
        description=("The most work one request may ask: items, judge prompts, pairs, rule calls and renders together.")
    )
    max_body_bytes: int = Field(description="The largest request body, in bytes.")
    max_json_values: int = Field(description="The most JSON values one request body may hold.")


class ServiceInfo(_Response):
    """GET /info: TEI's /info adapted to several served models."""

    version: str = Field(description="The service's version.")
    models: list[ModelInfo] = Field(description="Every served model.")
    limits: ServiceLimits = Field(description="The per-request limits.")


# --------------------------------------------------------------------------- /v1/admin

ModelState = Literal["awake", "sleeping", "loading", "draining"]


class SleepRequest(_Request):
    """POST /v1/admin/models/{name}/sleep. Level 1 stops serving and frees what the
    backend holds beside the weights; level 2 frees the weights too (reloaded on wake)."""

    level: Literal[1, 2] = Field(
        default=1,
        description=("1: stop serving and free what the backend holds beside the weights; 2: free the weights too."),
    )


class LoadRequest(_Request):
    """POST /v1/admin/models/{name}/load: a new version from ``source`` (a directory or hub
    id), loaded beside the serving one, which keeps serving until it is ready."""

    source: str = Field(min_length=1, max_length=4096, description="The new version's directory or hub id.")
    version: str = Field(min_length=1, max_length=128, description="The name of the new version.")
    force: bool = Field(
        default=False,
        description="serve a checkpoint whose architecture, label count or kind differs from the serving "
        "model's (refused otherwise: another model's scores under the same name)",
    )


class WeightsRequest(_Request):
    """POST /v1/admin/models/{name}/weights: the weights a trainer wrote at ``path`` (a
    directory of safetensors files of this model, or one file) serve as ``version``,
    written in place where the backend can."""

    path: str = Field(
        min_length=1,
        max_length=4096,
        description="A directory of safetensors files of this model, or one file, the trainer wrote.",
    )
    version: str = Field(min_length=1, max_length=128, description="The name these weights serve as.")


class CanaryRequest(_Request):
    """POST /v1/admin/models/{name}/canary: ``percent`` of the model's requests go to a
    version loaded from ``source`` beside the serving one; 0 ends the canary."""

    source: str = Field(
        default="", max_length=4096, description="The canary's directory or hub id (empty: the version already loaded)."
    )
    version: str = Field(default="canary", min_length=1, max_length=128, description="The canary version's name.")
    percent: float = Field(
        ge=0, le=100, description="The percentage of the model's requests the canary takes; 0 ends the canary."
    )


class AdminOperation(_Response):
    """An admin call made with ``?async=true``: polled by its id
    (GET /v1/admin/operations/{id}), or on its model's state while it is the latest."""

    id: str = Field(description="The operation's id, polled at GET /v1/admin/operations/{id}.")
    model: str | None = Field(default=None, description="The model it acts on.")
    operation: str = Field(description="What it does: sleep, wake_up, load, weights, rollback, promote or canary.")
    status: Literal["running", "succeeded", "failed", "cancelled"] = Field(
        description="running, succeeded, failed, or cancelled (the service shut down)."
    )
    error: str | None = Field(default=None, description="Why it failed.")
    started: float = Field(description="When it started, in Unix seconds.")
    seconds: float | None = Field(default=None, description="How long it took, once finished.")


class AdminModelState(_Response):
    """GET /v1/admin/models/{name}, and what every admin call answers."""

    name: str = Field(description="The served name: what requests put in `model`.")
    state: ModelState = Field(description="Its lifecycle state: awake, sleeping, loading or draining.")
    version: str = Field(description="The version serving.")
    source: str = Field(description="Where the serving version loaded from.")
    sleep_level: int | None = Field(default=None, description="The sleep level while sleeping.")
    sleep_mode: str | None = Field(
        default=None,
        description=(
            'While sleeping: what the sleep freed, and how ("weights moved from cuda:0 to '
            'host memory", "vLLM\'s sleep mode, level 1: ...", "nothing freed: ...", "weights '
            'freed: ...").'
        ),
    )
    loading_version: str | None = Field(default=None, description="A version loading beside the serving one.")
    in_flight: int = Field(default=0, description="Requests it is working on now.")
    memory_bytes: int = Field(default=0, description="The bytes its weights and buffers hold in this process.")
    last_operation_s: float | None = Field(
        default=None, description="How long its last admin operation took, in seconds."
    )
    canary_version: str | None = Field(default=None, description="The canary version, while one runs.")
    canary_percent: float | None = Field(default=None, description="The percentage of requests the canary takes.")
    canary_stopped: str | None = Field(
        default=None, description="Why the last canary was stopped (0%) on its own: unhealthy on real traffic."
    )
    operation: AdminOperation | None = Field(default=None, description="The latest admin operation on it.")
    weights_update: str | None = Field(
        default=None, description='How its last weights call was applied: "in place", or "loaded beside: <why>".'
    )
