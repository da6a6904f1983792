"""The peers' routes this service also answers: OpenRLHF's /get_reward and vLLM's
pooling routes (/pooling, /classify, /embeddings) and /tokenize."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rewardserve.protocol.common import JSONValue, Message, RenderedInput, _Request, _Response

# --------------------------------------------------------------------------- OpenRLHF /get_reward


class OpenRLHFRewardRequest(BaseModel):
    """OpenRLHF's ``--remote_rm_url`` body. Extra keys OpenRLHF versions add are ignored."""

    model_config = ConfigDict(extra="ignore")

    query: list[str] = Field(min_length=1, description="The rendered prompt and response of each sample.")
    prompts: list[str] | None = Field(default=None, description="Each sample's prompt, when OpenRLHF sends them.")
    labels: list[JSONValue] | None = Field(
        default=None, description="Each sample's label (reference), when OpenRLHF sends them."
    )


class OpenRLHFRewardResponse(_Response):
    rewards: list[float] = Field(description="The reward of each sample, in order.")
    scores: list[float] = Field(description="The same rewards (OpenRLHF reads either).")
    extra_logs: dict[str, list[float]] = Field(
        default_factory=dict, description="Extra per-sample values for OpenRLHF's logs, by name."
    )


# --------------------------------------------------------------------------- vLLM /pooling


class PoolingRequest(_Request):
    """vLLM's ``/pooling`` body, for PRMs: text already templated with step tags (or its
    token ids); each step tag yields one probability vector."""

    model: str | None = Field(default=None, description="The served model; unset: the only one answering this route.")
    input: str | list[str] | list[int] | list[list[int]] = Field(
        description="Text already templated with step tags, or its token ids (one or many)."
    )
    encoding_format: Literal["float"] = Field(default="float", description='Always "float".')
    truncate_prompt_tokens: int | None = Field(
        default=None,
        ge=-1,
        description=(
            "vLLM 0.32's meaning: keep the first N tokens (the last N with truncation_side "
            '"left"); -1 keeps as many as the model takes.'
        ),
    )
    truncation_side: Literal["left", "right"] | None = Field(
        default=None, description="Which end truncate_prompt_tokens cuts from; unset: right."
    )
    user: str | None = Field(default=None, description="An end-user id, accepted for compatibility and not used.")

    @model_validator(mode="after")
    def _truncation_not_zero(self) -> PoolingRequest:
        if self.truncate_prompt_tokens == 0:
            raise ValueError("truncate_prompt_tokens must be -1 or at least 1")
        return self


class PoolingUsage(_Response):
    """vLLM's usage block (its UsageInfo), as its pooling routes answer it."""

    prompt_tokens: int = Field(default=0, description="Tokens read.")
    total_tokens: int = Field(default=0, description="Tokens read and written.")
    completion_tokens: int | None = Field(default=0, description="Tokens written; 0.")
    prompt_tokens_details: dict[str, Any] | None = Field(default=None, description="vLLM's prompt token details; null.")
    completion_tokens_details: dict[str, Any] | None = Field(
        default=None, description="vLLM's completion token details; null."
    )


class ClassifyRequest(_Request):
    """vLLM's ``/classify`` body (vllm/entrypoints/pooling/classify/protocol.py, 0.32):
    text already templated (or its token ids), one classification per input."""

    model: str | None = Field(default=None, description="The served model; unset: the only one answering this route.")
    input: RenderedInput = Field(description="Text already templated, or its token ids (one or many).")
    add_special_tokens: bool = Field(
        default=True, description="vLLM's default: special tokens (a BOS) are added when tokenizing."
    )
    use_activation: bool | None = Field(
        default=None, description="None: the classifier's own activation (sigmoid for one label, softmax for more)."
    )
    activation: bool | None = Field(default=None, description="vLLM's older name of use_activation.")
    truncate_prompt_tokens: int | None = Field(
        default=None,
        ge=-1,
        description=(
            'Keep the first N tokens (the last N with truncation_side "left"); -1: as many as the model takes.'
        ),
    )
    truncation_side: Literal["left", "right"] | None = Field(
        default=None, description="Which end truncate_prompt_tokens cuts from; unset: right."
    )
    user: str | None = Field(default=None, description="An end-user id, accepted for compatibility and not used.")
    request_id: str | None = Field(default=None, description="vLLM's request id; accepted and not used.")
    priority: int = Field(default=0, description="vLLM's scheduling priority; accepted and not used.")

    @model_validator(mode="after")
    def _truncation_not_zero(self) -> ClassifyRequest:
        if self.truncate_prompt_tokens == 0:
            raise ValueError("truncate_prompt_tokens must be -1 or at least 1")
        return self


class ClassifyData(_Response):
    index: int = Field(description="The input's position.")
    label: str | None = Field(default=None, description="The label of the most probable class.")
    probs: list[float] = Field(description="Each class's value after the activation.")
    num_classes: int = Field(description="How many classes.")


class ClassifyResponse(_Response):
    id: str = Field(description="The response's id.")
    object: Literal["list"] = Field(default="list", description='Always "list".')
    created: int = Field(description="When it was answered, in Unix seconds.")
    model: str = Field(description="The model that answered.")
    data: list[ClassifyData] = Field(description="One classification per input, in order.")
    usage: PoolingUsage = Field(description="Tokens read.")


class EmbeddingRequest(_Request):
    """The OpenAI / SGLang ``/v1/embeddings`` body, for reward models: SGLang answers a
    reward model's score as the embedding (verl/experimental/reward_loop/reward_loop.py,
    0.9.1, reads ``data[-1].embedding[-1]``)."""

    model: str | None = Field(
        default=None, description="The served reward model; unset: the only one answering this route."
    )
    input: RenderedInput = Field(description="Text already templated, or its token ids (one or many).")
    encoding_format: Literal["float"] = Field(default="float", description='Always "float".')
    dimensions: int | None = Field(
        default=None,
        description=("OpenAI's output dimensions; accepted and not used (the answer is the model's own head values)."),
    )
    user: str | None = Field(default=None, description="An end-user id, accepted for compatibility and not used.")


class EmbeddingData(_Response):
    index: int = Field(description="The input's position.")
    object: Literal["embedding"] = Field(default="embedding", description='Always "embedding".')
    embedding: list[float] = Field(description="The reward model's score(s) for the input, as SGLang answers them.")


class EmbeddingResponse(_Response):
    object: Literal["list"] = Field(default="list", description='Always "list".')
    model: str = Field(description="The model that answered.")
    data: list[EmbeddingData] = Field(description="One entry per input, in order.")
    usage: PoolingUsage = Field(description="Tokens read.")


class PoolingData(_Response):
    index: int = Field(description="The input's position.")
    object: Literal["pooling"] = Field(default="pooling", description='Always "pooling".')
    data: list[list[float]] = Field(description="One probability vector per step tag in the input.")


class PoolingResponse(_Response):
    id: str = Field(description="The response's id.")
    object: Literal["list"] = Field(default="list", description='Always "list".')
    created: int = Field(description="When it was answered, in Unix seconds.")
    model: str = Field(description="The model that answered.")
    data: list[PoolingData] = Field(description="One entry per input, in order.")
    usage: PoolingUsage = Field(description="Tokens read.")


# --------------------------------------------------------------------------- vLLM /tokenize


class TokenizeRequest(_Request):
    """vLLM's ``/tokenize`` body, either of its two shapes (TokenizeCompletionRequest,
    TokenizeChatRequest in vllm/entrypoints/serve/tokenize/protocol.py, 0.32): ``prompt``
    (text, tokenized as it is) or ``messages`` (the model's chat template applied first).
    The tokenizer is the served model's own."""

    model: str | None = Field(
        default=None, description="The served model whose tokenizer is used; unset: the only one with a tokenizer."
    )
    prompt: str | None = Field(default=None, description="Text to tokenize (give this or `messages`).")
    messages: list[Message] | None = Field(
        default=None,
        min_length=1,
        description=("A conversation to render with the chat template and tokenize (give this or `prompt`)."),
    )
    add_special_tokens: bool | None = Field(
        default=None,
        description=(
            "None: vLLM's default for the shape (true with ``prompt``, false with "
            "``messages``: the chat template writes the special tokens)."
        ),
    )
    add_generation_prompt: bool | None = Field(
        default=None,
        description=(
            "Chat only: the template's generation prompt (vLLM's default: true), or the final"
            " message left open to be continued (not both)."
        ),
    )
    continue_final_message: bool = Field(
        default=False, description="Chat only: leave the final message open to be continued."
    )
    return_token_strs: bool | None = Field(default=False, description="Also return each token's string.")

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

    count: int = Field(description="How many tokens.")
    max_model_len: int = Field(description="The most tokens the model takes.")
    tokens: list[int] = Field(description="The token ids.")
    token_strs: list[str] | None = Field(
        default=None, description="Each token's string (the tokenizer's convert_ids_to_tokens), only when asked."
    )


# --------------------------------------------------------------------------- SandboxFusion /run_code


class RunCodeRequest(_Request):
    """SandboxFusion's ``POST /run_code`` body (sandbox/server/sandbox_api.py,
    ``RunCodeRequest``), as verl 0.9.1's sandbox_fusion reward sends it."""

    code: str = Field(max_length=1_000_000, description="The program's source.")
    language: str = Field(
        max_length=32, description="The language to run it as (SandboxFusion's names: python, cpp, ...)."
    )
    stdin: str | None = Field(
        default=None, max_length=8_000_000, description="What the program reads on standard input."
    )
    compile_timeout: float = Field(default=10.0, gt=0, description="Seconds the compile step may take.")
    run_timeout: float = Field(
        default=10.0, gt=0, le=60, description="The wall-clock seconds each run may take (at most 60)."
    )
    memory_limit_MB: int = Field(
        default=-1, description="The run's address space limit in MiB; -1: the code model's default."
    )  # noqa: N815 - SandboxFusion's spelling; -1: the service's default
    files: dict[str, str | None] = Field(
        default_factory=dict,
        max_length=64,
        description="Files written beside the program before it runs: path to base64 content.",
    )
    fetch_files: list[str] = Field(
        default_factory=list, max_length=64, description="Paths of files the run writes that come back in the answer."
    )


class CommandRunResult(_Response):
    status: Literal["Finished", "Error", "TimeLimitExceeded"] = Field(
        description="Finished, Error (the sandbox failed) or TimeLimitExceeded."
    )
    execution_time: float | None = Field(default=None, description="The step's wall time in seconds.")
    return_code: int | None = Field(default=None, description="The step's exit code.")
    stdout: str | None = Field(default=None, description="What the step printed on stdout.")
    stderr: str | None = Field(default=None, description="What the step printed on stderr.")


class RunCodeResponse(_Response):
    """SandboxFusion's answer, always with HTTP 200: ``Success`` (exit 0), ``Failed``
    (another exit, a time limit) or ``SandboxError`` (the sandbox itself failed)."""

    status: Literal["Success", "Failed", "SandboxError"] = Field(
        description="Success (exit 0), Failed (another exit, a time limit) or SandboxError."
    )
    message: str = Field(default="", description="Why, when not Success.")
    compile_result: CommandRunResult | None = Field(
        default=None, description="The compile step, for compiled languages."
    )
    run_result: CommandRunResult | None = Field(default=None, description="The run.")
    executor_pod_name: str | None = Field(default=None, description="SandboxFusion's pod name; null.")
    files: dict[str, str] = Field(
        default_factory=dict, description="The files fetch_files asked for: path to base64 content."
    )


# --------------------------------------------------------------------------- SandboxFusion /submit


class SubmitConfig(_Request):
    """SandboxFusion's ``TestConfig`` (sandbox/datasets/types.py): every field its client
    sends. The rows come in ``provided_data`` (this service keeps no datasets);
    ``custom_extract_logic`` is Python that SandboxFusion runs in its server, so it is refused."""

    dataset_type: str | None = Field(
        default=None, max_length=64, description="SandboxFusion's dataset type, which sets how tests run."
    )
    language: str | None = Field(default=None, max_length=32, description="The language the completion's code runs as.")
    locale: str | None = Field(
        default=None, max_length=16, description="SandboxFusion's locale; accepted and not used."
    )
    is_fewshot: bool | None = Field(default=None, description="SandboxFusion's few-shot flag; accepted and not used.")
    compile_timeout: float | None = Field(default=None, gt=0, description="Seconds the compile step may take.")
    run_timeout: float | None = Field(default=None, gt=0, le=60, description="Seconds each test may take.")
    custom_extract_logic: str | None = Field(
        default=None, max_length=100_000, description="SandboxFusion's custom code extraction; refused when set."
    )
    provided_data: JSONValue = Field(
        default=None, description="The dataset row with its tests (this service keeps no datasets)."
    )
    extra: dict[str, JSONValue] = Field(
        default_factory=dict, max_length=64, description="SandboxFusion's extra options."
    )


class SubmitRequest(_Request):
    """SandboxFusion's ``POST /submit`` body (sandbox/datasets/types.py ``SubmitRequest``)."""

    dataset: str = Field(max_length=256, description="The dataset's name.")
    id: int | str = Field(description="The row's id, echoed.")
    completion: str = Field(
        max_length=1_000_000, description="The model's completion, whose code is extracted and tested."
    )
    config: SubmitConfig = Field(description="How the tests run, with the row's data.")


class EvalTestCase(_Response):
    passed: bool = Field(description="Whether the test passed.")
    exec_info: RunCodeResponse = Field(description="The test's run.")
    test_info: dict[str, Any] | None = Field(default=None, description="The test as the row gave it.")


class EvalResult(_Response):
    """SandboxFusion's answer to ``/submit``: ``accepted`` when every test passed."""

    id: int | str = Field(description="The row's id, as sent.")
    accepted: bool = Field(description="True when every test passed.")
    extracted_code: str = Field(description="The code taken from the completion.")
    full_code: str | None = Field(default=None, description="The program run, with the test harness.")
    test_code: str | None = Field(default=None, description="The test code appended.")
    tests: list[EvalTestCase] = Field(description="Each test's result.")
    extracted_type: Literal["fenced", "incomplete_fenced", "heuristic", "empty"] | None = Field(
        default=None, description=("How the code was found: a fenced block, an unclosed one, a heuristic, or nothing.")
    )
    extra: dict[str, Any] | None = Field(default=None, description="Extra values of SandboxFusion's answer.")
