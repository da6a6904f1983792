"""The pieces every route's body is made of: base classes, messages, items, the
score options, one item's result."""

from __future__ import annotations

from typing import Annotated, Any, Literal

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

# Rule arguments and template variables are read as code (Jinja templates, JSON schemas,
# patterns): their size is checked here, before anything parses them.
MAX_ARGS_CHARS = 65_536


def json_chars(value: Any) -> int:
    """Characters of a JSON value's strings and keys, plus one per value: a bound on
    what parsing its templates and patterns can cost. Walked without recursion."""
    total, stack = 0, [value]
    while stack:
        node = stack.pop()
        total += 1
        if isinstance(node, str):
            total += len(node)
        elif isinstance(node, dict):
            total += sum(len(k) for k in node if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return total


def _bounded_args(value: dict[str, Any]) -> dict[str, Any]:
    size = json_chars(value)
    if size > MAX_ARGS_CHARS:
        raise ValueError(f"{size} characters of arguments, over the limit of {MAX_ARGS_CHARS}")
    return value


CodeArgs = Annotated[dict[str, JSONValue], AfterValidator(_bounded_args)]

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


ContentPart = Annotated[TextPart | ImageURLPart | ImagePart, Field(discriminator="type")]


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
        return isinstance(self.content, list) and any(not isinstance(p, TextPart) for p in self.content)


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
    # /v1/score/steps with options.policy_tokenizer: the policy's ids of the response
    # (special tokens such as EOS included), for a reward per token in its tokenization.
    response_token_ids: list[TokenId] | None = Field(default=None, max_length=131072)

    @model_validator(mode="after")
    def _one_shape(self) -> Item:
        rendered = [f for f in ("text", "input_ids") if getattr(self, f) is not None]
        if rendered:
            others = [
                f
                for f in ("input_ids", "messages", "prompt", "response", "steps")
                if f != rendered[0] and getattr(self, f) is not None
            ]
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


class CodeOptions(_Request):
    """For the ``code`` model (models/rules/code.py), this request's way of running and
    judging each item's tests; unset fields keep the model's own."""

    language: str | None = Field(default=None, max_length=32)
    # "tokens": whitespace tokens, numbers within 1e-6; "exact": verl's rule (trailing
    # newlines stripped, nothing else); "lines": LiveCodeBench's (stripped lines, equal as
    # text or as decimals); "sandbox_fusion": SandboxFusion's (stripped lines, case-insensitive,
    # numbers within 1e-5 relative).
    compare: Literal["tokens", "exact", "lines", "sandbox_fusion"] | None = None
    # 1.0 when every test passes, else 0.0 (stopping at the first failure); else the
    # fraction passed.
    binary: bool | None = None
    # Each within the model's caps (its args max_timeout_s and max_memory_mb; for the
    # built-in model the settings code_max_timeout_s, 60, and code_max_memory_mb, 4096).
    timeout_s: float | None = Field(
        default=None, gt=0, le=600, description="CPU time per test (its wall clock: twice it)."
    )
    memory_mb: int | None = Field(default=None, ge=32, le=65536, description="Address space per test.")
    # Each test's stdout and stderr in its result (the first MiB of each).
    outputs: bool | None = None
    # The response's last fenced block for the language (default), or the response as it is.
    extract: bool | None = None
    harness: Literal["lcb", "prime_code", "human_eval", "mbpp", "plain"] | None = Field(
        default=None,
        description=(
            "The environment the tests run in, as their dataset's own grader runs them; unset, the"
            " reference's shape decides (LiveCodeBench rows: lcb; APPS/TACO input_output: prime_code;"
            " human-eval: human_eval; MBPP: mbpp; others: plain). lcb and prime_code run each program"
            " after that grader's import prelude and recursion limit and compare call results by its =="
            " (lcb also compares stdout by LiveCodeBench's lines rule); the others as python3 prog.py."
        ),
    )


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
    code: CodeOptions | None = None


# --------------------------------------------------------------------------- results


class Usage(_Response):
    items: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0


class TestVerdict(_Response):
    """One test of a code item (the ``code`` model): AC, WA, TLE, MLE, RE, CE or OLE, with
    the run's wall time, peak memory, and how it ended."""

    verdict: str
    time_s: float | None = None
    memory_kb: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    # Why, in words: a compile error's message, an RE's last line of stderr (its
    # exception), what ended a test its own run did not judge (the item's time budget, the
    # tests' output total).
    detail: str | None = None
    # With ``options.code.outputs``: the start of what the run printed. One answer shows at
    # most 16 MiB of its item's output, each test an equal share (at most 1 MiB a stream).
    stdout: str | None = None
    stderr: str | None = None
    truncated: bool = Field(
        default=False, description="stdout or stderr was cut to its share of the answer; the run printed more."
    )
    files: dict[str, str] | None = None  # the reference's fetch_files: {path: base64}


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
    # Code items: each test's verdict, in the reference's order.
    tests: list[TestVerdict] | None = None
