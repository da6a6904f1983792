"""What the service says of its models: /v1/models, a shadow report, /health, the admin API."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rewardserve.client.protocol.common import _Request, _Response

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
    revision: str | None = None  # the hub revision it was pinned to, when the config names one
    preset: str | None = None
    max_tokens: int | None = None
    # The sha256 of the chat template its conversations are rendered with (None: it
    # renders none), so an evaluation can record which template scored it.
    chat_template_sha256: str | None = None
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
    # What runs a model's work outside the service, by model (the code model's sandbox:
    # its isolation); to callers the models may be named to.
    isolation: dict[str, str] = Field(default_factory=dict)


# --------------------------------------------------------------------------- /version, /info


class VersionInfo(_Response):
    """GET /version, in vLLM's shape."""

    version: str  # the rewardserve package's version


class ModelInfo(_Response):
    """One served model on GET /info (TEI's per-model fields, adapted)."""

    id: str  # the served name: what requests put in ``model``
    kind: str  # outcome, process, verifier, rule, vlm, clip_goal, ensemble, ...
    backend: str  # transformers, vllm, rule, ...
    source: str  # the checkpoint (hub id or path), or the rule's function
    # The dtype and device its forwards run in (e.g. "bfloat16", "cuda:0"); None for a
    # model without weights (a rule, an ensemble).
    dtype: str | None = None
    device: str | None = None
    # The most tokens one input may have (the model's context, or the spec's
    # max_tokens); None when the model reads no tokens or has not loaded yet.
    max_input_tokens: int | None = None
    # The padded tokens one forward batch may hold; None for a model without weights.
    max_batch_tokens: int | None = None
    # Whether it has a tokenizer, i.e. answers POST /tokenize.
    tokenizer: bool = False
    ready: bool = False


class ServiceLimits(_Response):
    """The per-request limits every route enforces (the service's settings)."""

    max_items_per_request: int  # items in one request (a longer list is a 413)
    max_work_per_request: int  # items, judge prompts, pairs, rule calls and renders together
    max_body_bytes: int  # a request body's bytes
    max_json_values: int  # JSON values (objects, lists, strings, numbers) in one body


class ServiceInfo(_Response):
    """GET /info: TEI's /info adapted to several served models."""

    version: str  # the rewardserve package's version
    models: list[ModelInfo]
    limits: ServiceLimits


# --------------------------------------------------------------------------- /v1/admin

ModelState = Literal["awake", "sleeping", "loading", "draining"]


class SleepRequest(_Request):
    """POST /v1/admin/models/{name}/sleep. Level 1 stops serving and frees what the
    backend holds beside the weights; level 2 frees the weights too (reloaded on wake)."""

    level: Literal[1, 2] = 1


class LoadRequest(_Request):
    """POST /v1/admin/models/{name}/load: a new version from ``source`` (a directory or hub
    id), loaded beside the serving one, which keeps serving until it is ready."""

    source: str = Field(min_length=1, max_length=4096)
    version: str = Field(min_length=1, max_length=128)
    force: bool = Field(
        False,
        description="serve a checkpoint whose architecture, label count or kind differs from the serving "
        "model's (refused otherwise: another model's scores under the same name)",
    )


class WeightsRequest(_Request):
    """POST /v1/admin/models/{name}/weights: the weights a trainer wrote at ``path`` (a
    directory of safetensors files of this model, or one file) serve as ``version``,
    written in place where the backend can."""

    path: str = Field(min_length=1, max_length=4096)
    version: str = Field(min_length=1, max_length=128)


class CanaryRequest(_Request):
    """POST /v1/admin/models/{name}/canary: ``percent`` of the model's requests go to a
    version loaded from ``source`` beside the serving one; 0 ends the canary."""

    source: str = Field(default="", max_length=4096)
    version: str = Field(default="canary", min_length=1, max_length=128)
    percent: float = Field(ge=0, le=100)


class AdminOperation(_Response):
    """An admin call made with ``?async=true``: polled by its id
    (GET /v1/admin/operations/{id}), or on its model's state while it is the latest."""

    id: str
    model: str | None = None
    operation: str  # sleep, wake_up, load, weights, rollback, promote, canary
    status: Literal["running", "succeeded", "failed", "cancelled"]  # cancelled: the service shut down
    error: str | None = None  # why it failed
    started: float  # unix time
    seconds: float | None = None  # how long it took, once done


class AdminModelState(_Response):
    """GET /v1/admin/models/{name}, and what every admin call answers."""

    name: str
    state: ModelState
    version: str
    source: str
    sleep_level: int | None = None  # while sleeping
    # While sleeping: what the sleep freed, and how ("weights moved from cuda:0 to host
    # memory", "vLLM's sleep mode, level 1: ...", "nothing freed: ...", "weights freed: ...").
    sleep_mode: str | None = None
    loading_version: str | None = None  # while a new version loads beside it
    in_flight: int = 0  # requests using it now
    memory_bytes: int = 0  # its weights and buffers held in this process
    last_operation_s: float | None = None  # how long the last lifecycle call took
    canary_version: str | None = None  # a version taking canary_percent of the requests
    canary_percent: float | None = None
    # Why the last canary was stopped (0%) on its own: unhealthy on real traffic.
    canary_stopped: str | None = None
    operation: AdminOperation | None = None  # the latest call made with ?async=true
    # How its last weights call was applied: "in place", or "loaded beside: <why>".
    weights_update: str | None = None
