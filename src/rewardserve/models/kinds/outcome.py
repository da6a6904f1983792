"""Kind ``outcome``: sequence-classification reward models (Skywork-Reward-V2 style).

score = the classification head at the last non-pad token of the chat-templated
conversation (a raw logit unless ``activation: sigmoid``). Multi-head models also return
the whole head vector as ``scores``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import Field

from rewardserve.models.backends import Backend, TokenSequence, make_backend
from rewardserve.models.batch_policy import BatchPolicy
from rewardserve.models.errors import ItemError
from rewardserve.models.kinds import register_kind
from rewardserve.models.options import WeightedKindOptions
from rewardserve.models.plan import Job, Unit, UnitOutput
from rewardserve.models.prefix_sharing import jobs_of, read_units, share_prefixes
from rewardserve.models.reward_model import RewardModel, sigmoid, work_key
from rewardserve.models.text.chat import fit_length, fit_text, readout_position, render_chat, rendered_ids, split_pair
from rewardserve.protocol import Item, ItemResult, ScoreOptions


@dataclass(frozen=True)
class _Scoring:
    seq: TokenSequence
    activation: str


def _activate(values: list[float], activation: str) -> list[float]:
    if activation == "auto":
        activation = "sigmoid" if len(values) == 1 else "softmax"
    if activation == "sigmoid":
        return [sigmoid(x) for x in values]
    if activation == "softmax":
        top = max(values)
        exps = [math.exp(x - top) for x in values]
        return [e / sum(exps) for e in exps]
    return values


class OutcomeOptions(WeightedKindOptions):
    input: Literal["chat", "pair"] = Field(
        "chat",
        description="chat: the tokenizer's chat template over the conversation; pair: tokenizer(prompt, response).",
    )
    strip_bos: bool = Field(True, description="Drop a BOS the template wrote when the tokenizer adds its own again.")


@register_kind("outcome")
class OutcomeModel(RewardModel):
    Options = OutcomeOptions
    options: OutcomeOptions
    default_policy = BatchPolicy(max_batch_tokens=16384, max_wait_ms=5.0)
    endpoints = frozenset({"score", "compare", "classify"})
    inputs = frozenset({"chat", "text", "input_ids"})
    backend: Backend  # set in load(), before any other method runs

    def load(self) -> None:
        from transformers import AutoConfig

        self.backend = make_backend(self.spec, "classify", self.options.backend())
        names = getattr(AutoConfig.from_pretrained(self.spec.source), "id2label", None) or {}
        self.labels = {int(k): str(v) for k, v in names.items()}

    def _encode(self, items: list[Item], options: ScoreOptions) -> list[tuple[list[int], bool] | ItemError]:
        """Per item, its token ids and whether a token budget cut them, or its error:
        pre-rendered items as sent, the others templated and tokenized in one batch."""
        out: list[Any] = [None] * len(items)  # every place is filled below
        chat = []
        for i, item in enumerate(items):
            if item.rendered:
                out[i] = rendered_ids(
                    self.backend,
                    item,
                    i,
                    options.truncate,
                    add_special_tokens=options.add_special_tokens,
                    keep=options.truncate_tokens,
                )
            else:
                chat.append(i)
        if chat:
            for i, ids in zip(chat, self._encode_chat([items[i] for i in chat], chat, options.truncate)):
                out[i] = ids if isinstance(ids, ItemError) else (ids, False)
        return out

    def _encode_chat(self, items: list[Item], indices: list[int], truncate: str) -> list[list[int] | ItemError]:
        """Templated conversations' ids; ``indices``: the items' places in the request."""
        tok = self.backend.tokenizer
        limit = self.backend.max_tokens
        out: list[list[int] | ItemError] = []
        if self.options.input == "pair":
            pairs = [split_pair(item) for item in items]
            for i, (q, a) in zip(indices, pairs):
                fit_text(q + a, limit, "error" if truncate == "error" else "right", index=i)
            pairs = [
                (fit_text(q, limit, truncate, index=i), fit_text(a, limit, truncate, index=i))
                for i, (q, a) in zip(indices, pairs)
            ]
            return list(tok([q for q, _ in pairs], [a for _, a in pairs])["input_ids"])
        texts: dict[int, str] = {}
        for k, (i, item) in enumerate(zip(indices, items)):
            try:
                texts[k] = fit_text(
                    render_chat(tok, item.conversation(), strip_bos=self.options.strip_bos), limit, truncate, index=i
                )
            except ItemError as exc:
                out.append(exc)
                continue
            out.append([])
        # One batched call: the fast tokenizer encodes in parallel, off the GIL.
        encoded = tok(list(texts.values()))["input_ids"] if texts else []
        for k, ids in zip(texts, encoded):
            out[k] = list(ids)
        return out

    def prepare(self, items: list[Item], options: ScoreOptions) -> list[Job[_Scoring] | ItemError]:
        backend = self.backend
        bos = backend.tokenizer.bos_token_id
        entries: list[Job[_Scoring] | ItemError] = []
        for index, encoded in enumerate(self._encode(items, options)):
            if isinstance(encoded, ItemError):
                entries.append(encoded)
                continue
            ids, kept_short = encoded
            if not ids:
                entries.append(ItemError("the item encodes to no tokens"))
                continue
            ids, cut = fit_length(ids, backend.max_tokens, options.truncate, index=index, bos_id=bos)
            cut = cut or kept_short
            # Pre-rendered text is read at its last token, as OpenRLHF's and vLLM's own
            # servers read it; a templated conversation where transformers reads.
            position = len(ids) - 1 if items[index].rendered else readout_position(ids, backend.pad_token_id)
            seq = TokenSequence(ids=ids, positions=(position,))
            entries.append(
                Job(
                    length=len(ids),
                    payload=_Scoring(seq, options.activation),
                    prompt_tokens=len(ids),
                    truncated=cut,
                    key=work_key(ids, seq.positions, options.activation),
                )
            )
        return entries

    def combine(self, jobs: list[Job[_Scoring]]) -> list[tuple[Unit[Any], list[int]]]:
        # A GRPO group's completions share the prompt: it runs once.
        return share_prefixes(jobs, lambda j: j.payload.seq)

    def run(self, units: list[Unit[Any]]) -> list[UnitOutput]:
        read = read_units(self.backend, units, lambda j: j.payload.seq)
        return [
            [self._result(job, rows) for job, rows in zip(jobs_of(unit), members)] for unit, members in zip(units, read)
        ]

    def _result(self, work: Job[_Scoring], rows: np.ndarray) -> ItemResult | ItemError:
        (head,) = rows
        raw = [float(v) for v in head]
        if not all(math.isfinite(v) for v in raw):
            return ItemError("the model produced a non-finite score")
        values = _activate(raw, work.payload.activation)
        best = max(range(len(raw)), key=raw.__getitem__)
        return ItemResult(
            score=values[0],
            scores=values if len(values) > 1 else None,
            label=self.labels.get(best),
            tokens=work.length,
            truncated=work.truncated,
        )
