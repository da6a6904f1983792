"""The vLLM engine as a backend: the same token ids and readout positions the kinds hand
to transformers, run by vLLM's async engine (continuous batching, prefix caching).

The engine lives on an event loop of its own, in a daemon thread: the batcher's worker
threads call ``read`` synchronously, and each call submits its sequences as concurrent
engine requests and waits for all of them. vLLM batches across those requests (and
across batches in flight: the batcher runs several at once for this backend), and its
prefix cache is what shares a GRPO group's prompt: ``caches_prefixes``, so the kinds
hand it whole sequences (prefix_sharing.read_units). Sending one continuation first, so
the rest would find the prompt cached, is slower: the engine waits on it instead of
batching them all (figures: bench/results/design-measurements.md).

    classify   pooling runner, task ``classify``: the head at the last token (or
               ``token_classify`` when a kind reads it at other positions, as PRMs do)
    prm_head   pooling runner, task ``token_classify``: the head at every token, read at
               the step positions (vLLM's Qwen2ForProcessRewardModel)
    lm         generate runner, one step: the log-probabilities of ``token_ids`` at the
               last token (``logprob_token_ids``), which every reader takes as logits (a
               softmax over a few choices is the same over either); or, for sequences
               with ``targets``, the log-probability of each position's next id
               (``prompt_logprobs``: the implicit PRM's token log-probabilities)
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Coroutine
from typing import Any, TypeVar

import numpy as np

from rewardserve.models.backends.backend import Backend, TokenSequence
from rewardserve.models.checkpoints import load_tokenizer
from rewardserve.models.options import BackendOptions
from rewardserve.models.spec import ModelSpec

log = logging.getLogger("rewardserve.vllm")

VLLM_TASKS = ("classify", "prm_head", "lm")
CPU_BLOCK_SIZE = 32
T = TypeVar("T")


def vllm_available() -> bool:
    try:
        import vllm  # type: ignore[import-not-found]  # noqa: F401 (an optional extra, absent where mypy runs)
    except Exception:  # ImportError, or a broken install that fails at import
        return False
    return True


async def _final(outputs: AsyncIterator[Any]) -> Any:
    """An engine request's last output: the whole answer (the earlier ones are partial)."""
    output: Any = None
    async for output in outputs:  # noqa: B007 (the last is the answer)
        pass
    return output


async def _gather(coroutines: list[Awaitable[T]]) -> list[T]:
    return list(await asyncio.gather(*coroutines))


class VllmBackend(Backend):
    name = "vllm"
    # vLLM schedules its own batches: ours only group what arrives together, a few in
    # flight, so the engine always has the next work queued.
    batch_preferences = {
        "pads": False,
        "max_batch_tokens": 65536,
        "max_batch_items": 1024,
        "max_wait_ms": 2.0,
        "concurrency": 4,
        "max_padding_ratio": 1.0,
    }
    caches_prefixes = True

    def __init__(self, spec: ModelSpec, task: str, options: BackendOptions | None = None):
        if task not in VLLM_TASKS:
            raise ValueError(
                f"model {spec.name!r}: the vllm backend serves {', '.join(VLLM_TASKS)} models, "
                f"not {task!r}; use backend: transformers"
            )

        self.options = options or BackendOptions.model_validate(spec.options)
        self.task = task
        self.spec = spec
        self.tokenizer = load_tokenizer(
            spec.source,
            tokenizer=spec.tokenizer,
            chat_template=spec.chat_template,
            trust_remote_code=spec.trust_remote_code,
        )
        self._ids = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"vllm-{spec.name}", daemon=True)
        self._thread.start()
        self.engine = self._call(self._start_engine())
        config = self.engine.model_config
        self.max_tokens = spec.max_tokens or config.max_model_len
        self.vocab_size = config.get_vocab_size()
        self.pad_token_id = self.tokenizer.pad_token_id

    async def _start_engine(self) -> Any:
        from vllm.v1.engine.async_llm import AsyncLLM  # type: ignore[import-not-found]

        args = engine_args(self.spec, self.task, self.options)
        self._sleep_mode = bool(args.enable_sleep_mode)
        return AsyncLLM.from_engine_args(args)

    def to_host(self) -> str:
        """vLLM's own sleep mode where its platform has one (CUDA, ROCm, XPU)."""
        if not self._sleep_mode:
            return "nothing freed: vLLM has no sleep mode on this platform (its KV cache stays allocated)"
        self._call(self.engine.sleep(1))
        return "vLLM's sleep mode, level 1: weights offloaded to host memory, KV cache freed"

    def from_host(self) -> None:
        if self._sleep_mode:
            self._call(self.engine.wake_up())

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the engine's loop and wait for it (from any other thread)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    # ------------------------------------------------------------------ readouts

    def read(self, seqs: list[TokenSequence], token_ids: list[int] | None = None) -> list[np.ndarray]:
        if self.task == "lm":
            if token_ids is None and seqs and all(s.targets is not None for s in seqs):
                return self._call(_gather([self._target_logprobs(s) for s in seqs]))
            if not token_ids:
                raise ValueError("the lm task reads the logits of given token_ids, or of each sequence's targets")
            return self._call(_gather([self._next_token_logits(s, token_ids) for s in seqs]))
        return self._call(_gather([self._pooled(s) for s in seqs]))

    async def _pooled(self, seq: TokenSequence) -> np.ndarray:
        from vllm import PoolingParams

        # A classifier read at its last token only pools that token (and may reuse the
        # prefix cache); any other readout takes the head at every token.
        last_only = self.task == "classify" and seq.positions == (len(seq.ids) - 1,)
        params = PoolingParams(task="classify" if last_only else "token_classify", use_activation=False)
        output = await _final(self.engine.encode({"prompt_token_ids": seq.ids}, params, self._request_id()))
        data = np.asarray(output.outputs.data.float().numpy(), dtype=np.float32)
        if last_only:
            return data.reshape(1, -1)
        return data.reshape(len(seq.ids), -1)[list(seq.positions)]

    async def _next_token_logits(self, seq: TokenSequence, token_ids: list[int]) -> np.ndarray:
        from vllm import SamplingParams

        if seq.positions != (len(seq.ids) - 1,):
            raise ValueError("the vllm lm task reads the next-token logits after the last token only")
        params = SamplingParams(
            max_tokens=1, temperature=0.0, logprobs=len(token_ids), logprob_token_ids=list(token_ids)
        )
        output = await _final(self.engine.generate({"prompt_token_ids": seq.ids}, params, self._request_id()))
        step = output.outputs[0].logprobs[0]
        return np.asarray([[step[t].logprob for t in token_ids]], dtype=np.float32)

    async def _target_logprobs(self, seq: TokenSequence) -> np.ndarray:
        from vllm import SamplingParams

        targets = seq.targets or ()
        if any(p + 1 >= len(seq.ids) or seq.ids[p + 1] != t for p, t in zip(seq.positions, targets)):
            raise ValueError("the vllm lm task reads the log-probability of each position's next id in the sequence")
        # prompt_logprobs=0: the sequence's own id at each position, nothing more. vLLM
        # does not read its prefix cache for such a request (every position is computed).
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        output = await _final(self.engine.generate({"prompt_token_ids": seq.ids}, params, self._request_id()))
        prompt = output.prompt_logprobs
        return np.asarray([[prompt[p + 1][t].logprob] for p, t in zip(seq.positions, targets)], dtype=np.float32)

    def generate(
        self, prompt: list[int], *, n: int, temperature: float, top_p: float, max_new_tokens: int, seed: int | None
    ) -> list[str]:
        if self.task != "lm":
            raise ValueError("generate needs a causal LM")
        return self._call(self._generate(prompt, n, temperature, top_p, max_new_tokens, seed))

    async def _generate(
        self, prompt: list[int], n: int, temperature: float, top_p: float, max_new_tokens: int, seed: int | None
    ) -> list[str]:
        from vllm import SamplingParams

        sampling = temperature > 0
        params = SamplingParams(
            n=n if sampling else 1,
            temperature=temperature,
            top_p=top_p if sampling else 1.0,
            max_tokens=max_new_tokens,
            seed=seed,
            skip_special_tokens=True,
        )
        output = await _final(self.engine.generate({"prompt_token_ids": prompt}, params, self._request_id()))
        return [choice.text for choice in output.outputs]

    def _request_id(self) -> str:
        return f"rs-{next(self._ids)}"

    def close(self) -> None:
        self.engine.shutdown()
        self._loop.call_soon_threadsafe(self._loop.stop)


def engine_args(spec: ModelSpec, task: str, options: BackendOptions) -> Any:
    """vLLM's engine arguments for a model: what the model's entry and options say."""
    from vllm import AsyncEngineArgs
    from vllm.config import PoolerConfig  # type: ignore[import-not-found]
    from vllm.platforms import current_platform  # type: ignore[import-not-found]

    # vLLM's prefix cache shares whole blocks only, so every completion of a group
    # computes its prompt's tail past the last full block again: up to 127 tokens at
    # vLLM's CPU default of 128 per block. The CPU kernels take multiples of 32; GPUs
    # keep vLLM's own (16). Figures: bench/results/issue-24-burst-stream.md.
    block_size = options.block_size or (CPU_BLOCK_SIZE if current_platform.is_cpu() else None)
    return AsyncEngineArgs(
        model=spec.source,
        runner="generate" if task == "lm" else "pooling",
        dtype=spec.dtype,  # the same names: auto, float32, bfloat16, float16
        enable_prefix_caching=True,
        # A level-1 sleep (to_host) offloads the weights and frees the KV cache.
        enable_sleep_mode=current_platform.is_sleep_mode_available(),
        gpu_memory_utilization=options.gpu_memory_utilization,
        max_model_len=spec.max_tokens,
        # Log-probabilities before any sampling processor: the prompt's (targets)
        # need them; logprob_token_ids' differ from their logits by one constant.
        logprobs_mode="raw_logprobs",
        # Every token's head output, read here at the kind's positions: vLLM's own
        # step filter only knows one tag id (Qwen's <extra_0> by default).
        pooler_config=None if task == "lm" else PoolerConfig(tok_pooling_type="ALL"),
        disable_log_stats=True,
        seed=options.seed,
        # Skips graph capture / compilation: starts in seconds, runs slower (tests).
        enforce_eager=options.enforce_eager,
        block_size=block_size,
        quantization=options.quantization,
        tensor_parallel_size=options.tensor_parallel_size,
        trust_remote_code=spec.trust_remote_code,
        tokenizer=spec.tokenizer,
        revision=spec.revision,
    )
