"""The rewardserve wire contract, v1.

This module is the single definition of every request and response body. The service
validates against it and the client builds and parses with it; nothing else may copy it.

Requests reject unknown fields (a typo such as ``"normalise"`` is a 422, not a silent
default); responses ignore unknown fields so an older client keeps working against a
newer server.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

API_VERSION = "v1"
MAX_JSON_DEPTH = 64


class _Request(BaseModel):
    # NaN and Infinity are not numbers a request may carry (JSON has no such values).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def _plain_json(value: Any) -> Any:
    """Free-form fields (references, metadata, rule arguments): finite numbers only, and
    nested at most MAX_JSON_DEPTH deep. Walked without recursion."""
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(node, float) and (node != node or node in (float("inf"), float("-inf"))):
            raise ValueError("NaN and Infinity are not allowed")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return value


JSONValue = Annotated[Any, AfterValidator(_plain_json)]

TokenId = Annotated[int, Field(ge=0, lt=2**31)]
# What vLLM's pooling routes take: text, texts, token ids, or lists of token ids.
RenderedInput = str | list[str] | list[TokenId] | list[list[TokenId]]


class _Response(BaseModel):
    model_config = ConfigDict(extra="ignore")


# --------------------------------------------------------------------------- messages


class TextPart(_Request):
    type: Literal["text"]
    text: str


class ImageURL(_Request):
    url: str
    detail: Literal["auto", "low", "high"] | None = None


class ImageURLPart(_Request):
    """OpenAI chat format: ``{"type": "image_url", "image_url": {"url": "data:..."}}``."""

    type: Literal["image_url"]
    image_url: ImageURL


class ImagePart(_Request):
    """transformers chat format: ``{"type": "image", "url": "..."}`` (or ``"image"``)."""

    type: Literal["image"]
    url: str | None = None
    image: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ImagePart:
        if (self.url is None) == (self.image is None):
            raise ValueError("an image part needs exactly one of 'url' or 'image'")
        return self


ContentPart = Annotated[Union[TextPart, ImageURLPart, ImagePart], Field(discriminator="type")]


class FunctionCall(_Request):
    name: str
    # OpenAI sends arguments as a JSON string; transformers chat templates take a dict.
    arguments: str | dict[str, Any] = "{}"


class ToolCall(_Request):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


Role = Literal["system", "developer", "user", "assistant", "tool"]


class Message(_Request):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The message's text parts joined (images dropped)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    def has_images(self) -> bool:
        return isinstance(self.content, list) and any(
            not isinstance(p, TextPart) for p in self.content
        )


# --------------------------------------------------------------------------- items


class Item(_Request):
    """One thing to score: a whole conversation, or a prompt and a response.

    - ``messages``: the conversation; the response is its final assistant turn.
    - ``response`` (with an optional ``prompt``, a string or a list of messages).
    - ``text``: already templated by the caller (the policy's chat template applied,
      special tokens written out), scored as it is: tokenized without adding special
      tokens, no chat template applied. ``input_ids``: the same, as token ids.
    ``reference`` is the ground truth rule rewards compare against (a string, or any
    JSON value a rule understands). ``steps`` lists the steps of a reasoning chain for
    process rewards. ``group_id`` groups completions of one prompt (GRPO).
    """

    id: str | None = None
    group_id: str | None = None
    messages: list[Message] | None = Field(default=None, min_length=1)
    prompt: str | list[Message] | None = None
    response: str | None = None
    text: str | None = None
    input_ids: list[TokenId] | None = Field(default=None, min_length=1)
    reference: JSONValue = None
    steps: list[str] | None = None
    metadata: dict[str, JSONValue] | None = None

    @model_validator(mode="after")
    def _one_shape(self) -> Item:
        rendered = [f for f in ("text", "input_ids") if getattr(self, f) is not None]
        if rendered:
            others = [f for f in ("input_ids", "messages", "prompt", "response", "steps")
                      if f != rendered[0] and getattr(self, f) is not None]
            if others:
                raise ValueError(f"give either '{rendered[0]}' or '{others[0]}', not both")
            return self
        if self.messages is not None:
            if self.prompt is not None or self.response is not None:
                raise ValueError("give either 'messages' or 'prompt' + 'response', not both")
        elif self.response is None and self.steps is None:
            raise ValueError("an item needs 'messages', 'response', 'steps', 'text' or 'input_ids'")
        return self

    @property
    def rendered(self) -> str | None:
        """Which pre-rendered field the item carries (``text``, ``input_ids``), if any."""
        return "text" if self.text is not None else "input_ids" if self.input_ids is not None else None

    def conversation(self) -> list[Message]:
        """The item as chat messages: prompt turns then one assistant turn."""
        if self.messages is not None:
            return list(self.messages)
        if self.prompt is None:
            turns: list[Message] = []
        elif isinstance(self.prompt, str):
            turns = [Message(role="user", content=self.prompt)]
        else:
            turns = list(self.prompt)
        response = self.response if self.response is not None else "".join(self.steps or [])
        return turns + [Message(role="assistant", content=response)]

    def response_text(self) -> str:
        """The text being graded: ``response``, else the last assistant message."""
        if self.response is not None:
            return self.response
        if self.messages is not None:
            for message in reversed(self.messages):
                if message.role == "assistant":
                    return message.text()
            return ""
        return "".join(self.steps or [])


# --------------------------------------------------------------------------- options

# "auto": a classifier's own (sigmoid for one label, softmax over several), as vLLM's
# /classify applies it.
Activation = Literal["none", "sigmoid", "softmax", "auto"]
Normalize = Literal["none", "group"]
Truncate = Literal["error", "left", "right"]


Prompt = Annotated[str, Field(max_length=2000)]  # a CLIP prompt (77 tokens are read)


class GoalOptions(_Request):
    """For ``clip_goal`` models (VLM-RM): the goal prompt(s), optional baseline prompt(s)
    and the projection strength alpha in 0..1; the model's config gives defaults."""

    goal: Prompt | Annotated[list[Prompt], Field(max_length=32)] | None = None
    baseline: Prompt | Annotated[list[Prompt], Field(max_length=32)] | None = None
    alpha: float | None = Field(default=None, ge=0.0, le=1.0)


class ScoreOptions(GoalOptions):
    activation: Activation = "none"
    # "group": add GRPO advantages per group_id, (r - mean) / (std + 1e-6), with the
    # sample standard deviation as torch and TRL compute it; invalid items are left out.
    normalize: Normalize = "none"
    # "error" (default): an item over the model's max tokens fails the request with 413.
    # "left" / "right": drop tokens from that end of the text so the item fits.
    truncate: Truncate = "error"
    # Pre-rendered ``text`` items: add the tokenizer's special tokens (a BOS) when
    # tokenizing, as vLLM's /classify does by default. Off: the text is scored as written.
    add_special_tokens: bool = False
    # Pre-rendered items: keep at most this many tokens, cut from the end ``truncate``
    # names ("right" keeps the first ones, otherwise the last ones are kept).
    truncate_tokens: int | None = Field(default=None, ge=1)


# --------------------------------------------------------------------------- results


class Usage(_Response):
    items: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0


class ItemResult(_Response):
    """The reward of one item. A result that could not be computed has ``valid: false``,
    an ``error`` and ``score: null``; it is never a silent 0."""

    id: str | None = None
    score: float | None = None
    valid: bool = True
    error: str | None = None
    advantage: float | None = None
    # Multi-head reward models: the whole head vector at the readout position.
    scores: list[float] | None = None
    # Classifiers: the checkpoint's name (id2label) of the head with the highest value.
    label: str | None = None
    tokens: int | None = None
    truncated: bool = False
    # Composite rewards (a rubric, an ensemble): each part's score by name, on the scale
    # it was mixed at (a rubric criterion's ``raw`` is in ``criteria``); None: invalid.
    components: dict[str, float | None] | None = None
    # Ensembles: the standard deviation of the members' scores that were mixed.
    uncertainty: float | None = None
    # Why the expensive model (``escalate.to``) scored this item; None: it did not.
    escalated: str | None = None


# --------------------------------------------------------------------------- /v1/score


class ScoreRequest(_Request):
    model: str
    items: list[Item] = Field(min_length=1)
    options: ScoreOptions = Field(default_factory=ScoreOptions)


def components_by_name(results: list[ItemResult]) -> dict[str, list[float | None]]:
    """Each component's scores in item order (None: invalid, or not part of that item)."""
    names = list(dict.fromkeys(name for r in results for name in (r.components or {})))
    return {name: [(r.components or {}).get(name) for r in results] for name in names}


class ScoreResponse(_Response):
    model: str
    results: list[ItemResult]
    usage: Usage = Field(default_factory=Usage)

    def components(self) -> dict[str, list[float | None]]:
        """An ensemble's members' scores, by member, in item order."""
        return components_by_name(list(self.results))


# --------------------------------------------------------------------------- /v1/score/steps

StepsFrom = Literal["auto", "steps", "separator", "turns"]
Aggregate = Literal["min", "prod", "mean", "last"]
Shaping = Literal["none", "raw", "delta", "group"]


class StepOptions(GoalOptions):
    """How steps are found, aggregated and shaped.

    steps_from: ``steps`` (the item's list), ``separator`` (split the final assistant
    message on ``separator``), ``turns`` (each assistant turn of ``messages`` is a step;
    tool calls and tool results stay as context), or ``auto``: the list if given, else
    turns when the conversation has several assistant turns or tool calls, else the
    separator (the request's, or the model's own), else the whole response as one step.
    """

    steps_from: StepsFrom = "auto"
    separator: str | None = Field(default=None, min_length=1)
    aggregate: Aggregate | None = None  # None: the model preset's aggregate
    threshold: float | None = None  # first_error_step = first step scoring below it
    # raw: step_rewards = step_scores; delta: s_t - s_(t-1) (s_(-1) = 0, so they sum to
    # the last score); group: GRPO process advantages over each group_id's steps.
    shaping: Shaping = "none"
    # "steps": a trajectory longer than the model's context is scored up to the last
    # step that fits, the rest reported unscored; "error": 413 instead.
    truncate: Literal["steps", "error"] = "steps"
    # clip_goal frames: each step reward is the mean over the last `window` frames.
    window: int | None = Field(default=None, ge=1, le=1000)


class StepSpan(_Response):
    """Where a step is in what the client sent: ``message`` indexes ``messages`` (None
    for ``response``, and for ``steps`` lists, whose offsets run over the steps
    concatenated), ``start``/``end`` are character offsets in that text."""

    message: int | None = None
    start: int
    end: int


class StepsResult(ItemResult):
    step_scores: list[float | None] = Field(default_factory=list)  # None: not scored
    steps_scored: int = 0
    aggregates: dict[str, float] | None = None  # min, prod, mean, last (scored steps)
    first_error_step: int | None = None
    spans: list[StepSpan] = Field(default_factory=list)
    step_rewards: list[float | None] | None = None  # per options.shaping


class StepsRequest(_Request):
    model: str
    items: list[Item] = Field(min_length=1)
    options: StepOptions = Field(default_factory=StepOptions)


class StepsResponse(_Response):
    model: str
    results: list[StepsResult]
    usage: Usage = Field(default_factory=Usage)


# --------------------------------------------------------------------------- /v1/verify


class SamplingOptions(_Request):
    """Generate mode: transformers ``generate`` parameters; ``n`` samples are averaged."""

    temperature: float = Field(default=0.0, ge=0.0, le=5.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(default=256, ge=1, le=4096)
    n: int = Field(default=1, ge=1, le=16)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)


class VerifyOptions(SamplingOptions):
    """``logprob``: ONE forward pass with the verdict slot prefilled; score = the
    template's choices' probabilities (P(yes) for yes/no) weighted by their values.
    ``generate``: sample a rationale, parse the verdict; unparsable = invalid."""

    mode: Literal["logprob", "generate"] = "logprob"
    template: str | None = None  # None: the model's default
    variables: dict[str, JSONValue] = Field(default_factory=dict)  # extra template fields


class VerifySample(_Response):
    text: str
    score: float | None = None
    verdict: str | None = None


class VerifyResult(ItemResult):
    verdict: str | None = None
    rationale: str | None = None
    probabilities: dict[str, float] | None = None  # logprob: per choice
    samples: list[VerifySample] | None = None  # generate: every sample


class VerifyRequest(_Request):
    model: str
    items: list[Item] = Field(min_length=1)
    options: VerifyOptions = Field(default_factory=VerifyOptions)


class VerifyResponse(_Response):
    model: str
    results: list[VerifyResult]
    usage: Usage = Field(default_factory=Usage)


# --------------------------------------------------------------------------- /v1/rubric


# How a score is put on a common scale before it is mixed: as given, through a sigmoid,
# z-scored within the item's group_id, or against the model's running mean and std.
Scale = Literal["none", "sigmoid", "group", "running"]


class Criterion(_Request):
    """A rule (``fn`` + ``args``), a judge question (``text``) or a served model's score
    (``model``: any model answering /v1/score). ``args`` and ``text`` may read the item
    with ``{{ item.reference.answer }}``-style fields. ``normalize`` puts the score on a
    common scale (``running``: model criteria only). ``polarity: negative`` reads a score
    in [0, 1] (a rule's, a judge's, a sigmoid's) as 1 - score, any other as -score."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=64)
    weight: float = Field(default=1.0, ge=0.0)
    fn: str | None = None
    args: dict[str, JSONValue] = Field(default_factory=dict)
    text: str | None = Field(default=None, max_length=4000)
    model: str | None = Field(default=None, max_length=128)
    normalize: Scale = "none"
    choices: list[str] | None = Field(default=None, min_length=2, max_length=10)  # best first
    polarity: Literal["positive", "negative"] = "positive"
    pass_threshold: float = 0.5  # for all / any pass

    @model_validator(mode="after")
    def _one_source(self) -> Criterion:
        if sum(x is not None for x in (self.fn, self.text, self.model)) != 1:
            raise ValueError("a criterion has exactly one of 'fn' (a rule), 'text' (a judge question) "
                             "or 'model' (a served model's score)")
        if self.normalize == "running" and self.model is None:
            raise ValueError("normalize 'running' keeps statistics per served model: model criteria only")
        return self

    @property
    def unit_scale(self) -> bool:
        """Whether the score it is aggregated at lies in [0, 1]."""
        return self.normalize == "sigmoid" or (self.model is None and self.normalize == "none")


class EscalateWhen(_Request):
    """When an item's cheap score is not enough: any condition that holds escalates it."""

    uncertainty_above: float | None = Field(default=None, ge=0)  # ensembles: members disagree
    margin_below: float | None = Field(default=None, ge=0)  # |score - threshold| is small
    threshold: float = 0.5  # what margin_below measures from
    group_zero_variance: bool = False  # a GRPO group scored all alike teaches nothing
    invalid: bool = False  # the cheap score could not be computed


class Escalation(_Request):
    """Ask ``to`` (a served model; a verifier answers with P(yes)) for the items ``when``
    picks, at most ``max_fraction`` of the request's items; its score, on ``normalize``'s
    scale, replaces the cheap one."""

    to: str = Field(max_length=128)
    when: EscalateWhen
    max_fraction: float = Field(default=1.0, ge=0, le=1)
    normalize: Literal["none", "sigmoid", "running"] = "none"


class RubricItem(Item):
    criteria: list[Criterion] | None = Field(default=None, max_length=64)


class Aggregation(_Request):
    mode: Literal["weighted_mean", "all", "any", "threshold", "formula"] = "weighted_mean"
    threshold: float = 0.5  # mode threshold: 1 when the weighted mean reaches it
    formula: str | None = Field(default=None, max_length=2000)  # over criterion names

    @model_validator(mode="after")
    def _formula_given(self) -> Aggregation:
        if self.mode == "formula" and not self.formula:
            raise ValueError("mode 'formula' needs a 'formula'")
        return self


class RubricRequest(_Request):
    judge: str | None = None  # the verifier model answering judge criteria
    items: list[RubricItem] = Field(min_length=1)
    criteria: list[Criterion] | None = Field(default=None, max_length=64)  # for items without their own
    aggregation: Aggregation = Field(default_factory=Aggregation)
    judge_template: str = "criterion"
    escalate: Escalation | None = None


class CriterionResult(_Response):
    name: str
    score: float | None = None  # as aggregated: normalised, polarity applied
    valid: bool = True
    error: str | None = None
    reason: str | None = None
    weight: float = 1.0
    raw: float | None = None  # as the rule, judge or model gave it
    # normalize running: how many scores the model's statistics held (below 100 they are
    # still settling).
    running_count: int | None = None


class RubricResult(ItemResult):
    criteria: list[CriterionResult] = Field(default_factory=list)


class RubricResponse(_Response):
    judge: str | None = None
    results: list[RubricResult]
    usage: Usage = Field(default_factory=Usage)

    def components(self) -> dict[str, list[float | None]]:
        """Each criterion's scores as aggregated, by name, in item order."""
        return components_by_name(list(self.results))


# --------------------------------------------------------------------------- /v1/compare


class CompareItem(_Request):
    id: str | None = None
    prompt: str | list[Message] | None = None
    responses: list[str] = Field(min_length=2, max_length=16)
    reference: JSONValue = None


class CompareOptions(_Request):
    template: str | None = None  # verifier models: a pairwise template (A / B)
    variables: dict[str, JSONValue] = Field(default_factory=dict)


class CompareRequest(_Request):
    model: str
    items: list[CompareItem] = Field(min_length=1)
    options: CompareOptions = Field(default_factory=CompareOptions)


class CompareResult(_Response):
    """``preference[i][j]`` = P(response i is better than response j); ``scores`` rank
    the responses (outcome scores, or mean win probability for a judge)."""

    id: str | None = None
    valid: bool = True
    error: str | None = None
    scores: list[float] | None = None
    preference: list[list[float]] | None = None
    ranking: list[int] | None = None  # best first


class CompareResponse(_Response):
    model: str
    results: list[CompareResult]
    usage: Usage = Field(default_factory=Usage)


# --------------------------------------------------------------------------- OpenRLHF /get_reward


class OpenRLHFRewardRequest(BaseModel):
    """OpenRLHF's ``--remote_rm_url`` body. Extra keys OpenRLHF versions add are ignored."""

    model_config = ConfigDict(extra="ignore")

    query: list[str] = Field(min_length=1)
    prompts: list[str] | None = None
    labels: list[JSONValue] | None = None


class OpenRLHFRewardResponse(_Response):
    rewards: list[float]
    scores: list[float]
    extra_logs: dict[str, list[float]] = Field(default_factory=dict)


# --------------------------------------------------------------------------- vLLM /pooling


class PoolingRequest(_Request):
    """vLLM's ``/pooling`` body, for PRMs: text already templated with step tags (or its
    token ids); each step tag yields one probability vector."""

    model: str | None = None
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float"] = "float"
    # vLLM 0.32's meaning: keep the first N tokens (the last N with truncation_side
    # "left"); -1 keeps as many as the model takes.
    truncate_prompt_tokens: int | None = Field(None, ge=-1)
    truncation_side: Literal["left", "right"] | None = None
    user: str | None = None

    @model_validator(mode="after")
    def _truncation_not_zero(self) -> "PoolingRequest":
        if self.truncate_prompt_tokens == 0:
            raise ValueError("truncate_prompt_tokens must be -1 or at least 1")
        return self


class PoolingUsage(_Response):
    """vLLM's usage block (its UsageInfo), as its pooling routes answer it."""

    prompt_tokens: int = 0
    total_tokens: int = 0
    completion_tokens: int | None = 0
    prompt_tokens_details: dict[str, Any] | None = None
    completion_tokens_details: dict[str, Any] | None = None


class ClassifyRequest(_Request):
    """vLLM's ``/classify`` body (vllm/entrypoints/pooling/classify/protocol.py, 0.32):
    text already templated (or its token ids), one classification per input."""

    model: str | None = None
    input: RenderedInput
    # vLLM's default: special tokens (a BOS) are added when tokenizing.
    add_special_tokens: bool = True
    # None: the classifier's own activation (sigmoid for one label, softmax for more).
    use_activation: bool | None = None
    activation: bool | None = None  # the older name of use_activation
    # Keep the first N tokens (the last N with truncation_side "left"); -1: as many as
    # the model takes.
    truncate_prompt_tokens: int | None = Field(None, ge=-1)
    truncation_side: Literal["left", "right"] | None = None
    user: str | None = None
    request_id: str | None = None
    priority: int = 0

    @model_validator(mode="after")
    def _truncation_not_zero(self) -> "ClassifyRequest":
        if self.truncate_prompt_tokens == 0:
            raise ValueError("truncate_prompt_tokens must be -1 or at least 1")
        return self


class ClassifyData(_Response):
    index: int
    label: str | None = None
    probs: list[float]
    num_classes: int


class ClassifyResponse(_Response):
    id: str
    object: Literal["list"] = "list"
    created: int
    model: str
    data: list[ClassifyData]
    usage: PoolingUsage


class EmbeddingRequest(_Request):
    """The OpenAI / SGLang ``/v1/embeddings`` body, for reward models: SGLang answers a
    reward model's score as the embedding (verl/experimental/reward_loop/reward_loop.py,
    0.9.1, reads ``data[-1].embedding[-1]``)."""

    model: str | None = None
    input: RenderedInput
    encoding_format: Literal["float"] = "float"
    dimensions: int | None = None
    user: str | None = None


class EmbeddingData(_Response):
    index: int
    object: Literal["embedding"] = "embedding"
    embedding: list[float]


class EmbeddingResponse(_Response):
    object: Literal["list"] = "list"
    model: str
    data: list[EmbeddingData]
    usage: PoolingUsage


class PoolingData(_Response):
    index: int
    object: Literal["pooling"] = "pooling"
    data: list[list[float]]


class PoolingResponse(_Response):
    id: str
    object: Literal["list"] = "list"
    created: int
    model: str
    data: list[PoolingData]
    usage: PoolingUsage


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


# --------------------------------------------------------------------------- errors

ErrorType = Literal[
    "authentication_error",
    "not_found",
    "method_not_allowed",
    "payload_too_large",
    "invalid_request",
    "overloaded",
    "internal_error",
    "not_ready",
    "deadline_exceeded",
]
# The one table from error type to HTTP status: the service answers with it, the client
# reads a bodiless status (a proxy's 502) back through it.
ERROR_STATUS: dict[ErrorType, int] = {
    "authentication_error": 401,
    "not_found": 404,
    "method_not_allowed": 405,
    "payload_too_large": 413,
    "invalid_request": 422,
    "overloaded": 429,
    "internal_error": 500,
    "not_ready": 503,
    "deadline_exceeded": 504,
}


class ErrorDetail(_Response):
    type: ErrorType
    message: str
    param: str | None = None


class ErrorBody(_Response):
    """Every non-2xx response: ``{"error": {"type", "message", "param"?}}``."""

    error: ErrorDetail
