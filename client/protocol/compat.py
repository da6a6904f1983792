"""The peers' routes this service also answers: OpenRLHF's /get_reward and vLLM's
pooling routes (/pooling, /classify, /embeddings) and /tokenize."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rewardserve.client.protocol.common import JSONValue, Message, RenderedInput, _Request, _Response

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
    def _truncation_not_zero(self) -> PoolingRequest:
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
    def _truncation_not_zero(self) -> ClassifyRequest:
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


# --------------------------------------------------------------------------- vLLM /tokenize


class TokenizeRequest(_Request):
    """vLLM's ``/tokenize`` body, either of its two shapes (TokenizeCompletionRequest,
    TokenizeChatRequest in vllm/entrypoints/serve/tokenize/protocol.py, 0.32): ``prompt``
    (text, tokenized as it is) or ``messages`` (the model's chat template applied first).
    The tokenizer is the served model's own."""

    model: str | None = None
    prompt: str | None = None
    messages: list[Message] | None = Field(default=None, min_length=1)
    # None: vLLM's default for the shape (true with ``prompt``, false with ``messages``:
    # the chat template writes the special tokens).
    add_special_tokens: bool | None = None
    # Chat only: the template's generation prompt (vLLM's default: true), or the final
    # message left open to be continued (not both).
    add_generation_prompt: bool | None = None
    continue_final_message: bool = False
    return_token_strs: bool | None = False

    @model_validator(mode="after")
    def _one_shape(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("send either 'prompt' (text) or 'messages' (a chat), not both")
        if self.prompt is not None and (self.add_generation_prompt is not None or self.continue_final_message):
            raise ValueError("add_generation_prompt and continue_final_message apply to 'messages' only")
        if self.continue_final_message and self.add_generation_prompt:
            raise ValueError("continue_final_message and add_generation_prompt cannot both be true")
        return self


class TokenizeResponse(_Response):
    """vLLM's ``/tokenize`` answer (its TokenizeResponse)."""

    count: int  # len(tokens)
    max_model_len: int  # the model's context: the most tokens it reads
    tokens: list[int]
    # Each token's string (the tokenizer's convert_ids_to_tokens), only when asked.
    token_strs: list[str] | None = None


# --------------------------------------------------------------------------- SandboxFusion /run_code


class RunCodeRequest(_Request):
    """SandboxFusion's ``POST /run_code`` body (sandbox/server/sandbox_api.py,
    ``RunCodeRequest``), as verl 0.9.1's sandbox_fusion reward sends it."""

    code: str = Field(max_length=1_000_000)
    language: str = Field(max_length=32)
    stdin: str | None = Field(default=None, max_length=8_000_000)
    compile_timeout: float = Field(default=10.0, gt=0)
    run_timeout: float = Field(default=10.0, gt=0, le=60)
    memory_limit_MB: int = -1  # noqa: N815 - SandboxFusion's spelling; -1: the service's default
    files: dict[str, str | None] = Field(default_factory=dict, max_length=64)
    fetch_files: list[str] = Field(default_factory=list, max_length=64)


class CommandRunResult(_Response):
    status: Literal["Finished", "Error", "TimeLimitExceeded"]
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


class RunCodeResponse(_Response):
    """SandboxFusion's answer, always with HTTP 200: ``Success`` (exit 0), ``Failed``
    (another exit, a time limit) or ``SandboxError`` (the sandbox itself failed)."""

    status: Literal["Success", "Failed", "SandboxError"]
    message: str = ""
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)


# --------------------------------------------------------------------------- SandboxFusion /submit


class SubmitConfig(_Request):
    """SandboxFusion's ``TestConfig`` (sandbox/datasets/types.py): every field its client
    sends. The rows come in ``provided_data`` (this service keeps no datasets);
    ``custom_extract_logic`` is Python that SandboxFusion runs in its server, so it is refused."""

    dataset_type: str | None = Field(default=None, max_length=64)
    language: str | None = Field(default=None, max_length=32)
    locale: str | None = Field(default=None, max_length=16)
    is_fewshot: bool | None = None
    compile_timeout: float | None = Field(default=None, gt=0)
    run_timeout: float | None = Field(default=None, gt=0, le=60)
    custom_extract_logic: str | None = Field(default=None, max_length=100_000)
    provided_data: JSONValue = None
    extra: dict[str, JSONValue] = Field(default_factory=dict, max_length=64)


class SubmitRequest(_Request):
    """SandboxFusion's ``POST /submit`` body (sandbox/datasets/types.py ``SubmitRequest``)."""

    dataset: str = Field(max_length=256)
    id: int | str
    completion: str = Field(max_length=1_000_000)
    config: SubmitConfig


class EvalTestCase(_Response):
    passed: bool
    exec_info: RunCodeResponse
    test_info: dict[str, Any] | None = None


class EvalResult(_Response):
    """SandboxFusion's answer to ``/submit``: ``accepted`` when every test passed."""

    id: int | str
    accepted: bool
    extracted_code: str
    full_code: str | None = None
    test_code: str | None = None
    tests: list[EvalTestCase]
    extracted_type: Literal["fenced", "incomplete_fenced", "heuristic", "empty"] | None = None
    extra: dict[str, Any] | None = None
