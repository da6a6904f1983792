"""Kind ``process``: a reward for every step of a reasoning chain or agent trajectory, all
steps read from ONE forward pass over the whole trajectory.

The PRM family (``options.format``, set by the presets) decides how steps are laid out
and read; see ``prm_formats``. Options: ``format``, ``aggregate`` (the default ``score``),
``separator`` (how a response splits into steps when the request does not say),
``max_steps``, and the format's own (tags, label tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import Field

from rewardserve.models.backends import Backend, TokenSequence, make_backend
from rewardserve.models.batch_policy import BatchPolicy
from rewardserve.models.cache import LRUCache
from rewardserve.models.errors import ItemError, RequestError
from rewardserve.models.kinds import register_kind
from rewardserve.models.operations.groups import group_advantages
from rewardserve.models.options import WeightedKindOptions
from rewardserve.models.plan import Job, PeerLookup, Plan, Unit, UnitOutput
from rewardserve.models.prefix_sharing import jobs_of, read_units, share_prefixes
from rewardserve.models.reward_model import RewardModel, work_key
from rewardserve.models.text.chat import MAX_CHARS_PER_TOKEN, fit_text, rendered_ids
from rewardserve.models.text.prm_formats import FORMATS, StepFormat, StepFormatOptions
from rewardserve.models.text.steps import aggregate, extract
from rewardserve.protocol import (
    Aggregate,
    Item,
    ItemResult,
    ScoreOptions,
    StepOptions,
    StepSpan,
    StepsResult,
)


class ProcessOptions(WeightedKindOptions, StepFormatOptions):
    format: Literal["separator_chat", "classifier_tags", "tag_lm", "value_head", "chat_turn"] = Field(
        description="How steps are laid out and read (models/text/prm_formats.py); presets set it."
    )
    aggregate: Aggregate = Field(
        "min", description="A trajectory's score from its step scores: min, prod, mean, last, sum."
    )
    separator: str | None = Field(None, description="How a response splits into steps when the request gives none.")
    max_steps: int = Field(256, gt=0, description="Steps per trajectory; more is a 413.")


@dataclass(frozen=True)
class _Trajectory:
    seq: TokenSequence
    n_steps: int
    spans: list[StepSpan]
    aggregate: str
    threshold: float | None


@dataclass(frozen=True)
class _Pooling:
    seq: TokenSequence


_Payload = _Trajectory | _Pooling


@register_kind("process")
class ProcessModel(RewardModel):
    Options = ProcessOptions
    options: ProcessOptions
    default_policy = BatchPolicy(max_batch_tokens=16384, max_wait_ms=5.0)
    endpoints = frozenset({"score", "steps", "pooling", "compare"})
    inputs = frozenset({"chat", "text", "input_ids"})
    backend: Backend  # set in load(), before any other method runs

    def load(self) -> None:
        fmt_class = FORMATS[self.options.format]
        self.backend = make_backend(self.spec, fmt_class.task, self.options.backend())
        self.format: StepFormat = fmt_class(self.backend.tokenizer, self.options)
        self.max_steps = self.options.max_steps
        self.default_aggregate = self.options.aggregate

    def probe(self) -> None:
        (entry,) = self.prepare([Item(prompt="1+1?", steps=["1+1=2.", "So 2."])], StepOptions())
        if isinstance(entry, ItemError):
            raise RuntimeError(f"probe item was rejected: {entry}")
        ((result,),) = self.run([Unit(entry.length, entry)])
        if isinstance(result, ItemError):
            raise RuntimeError(f"probe failed: {result}")

    # ------------------------------------------------------------------ prepare

    def plan_score(
        self, items: list[Item], options: ScoreOptions, cache: LRUCache | None = None, peers: PeerLookup | None = None
    ) -> Plan[ItemResult]:
        """/v1/score on a PRM: the trajectory reward is the preset's aggregate."""
        steps = StepOptions(truncate="error" if options.truncate == "error" else "steps")
        normalize = options.normalize == "group"
        return self.plan_items(
            items, steps, cache, ItemResult, lambda results: group_advantages(items, results) if normalize else results
        )

    def prepare(self, items: list[Item], options: StepOptions) -> list[Job[_Payload] | ItemError]:
        entries: list[Job[_Payload] | ItemError] = []
        for index, item in enumerate(items):
            try:
                entries.append(self._prepare_one(index, item, options))
            except ItemError as exc:
                entries.append(exc)
        return entries

    def _prepare_one(self, index: int, item: Item, options: StepOptions) -> Job[_Payload]:
        if item.rendered:
            return self._prepare_rendered(index, item, options)
        traj = extract(item, options, self.options.separator)
        if not traj.steps:
            raise ItemError("the item has no steps to score")
        if len(traj.steps) > self.max_steps:
            raise RequestError(
                f"items[{index}] has {len(traj.steps)} steps, over this model's limit of {self.max_steps}",
                param=f"items[{index}]",
                type="payload_too_large",
            )
        limit = self.backend.max_tokens
        n_steps, spans = len(traj.steps), traj.spans
        if traj.chars() > limit * MAX_CHARS_PER_TOKEN:  # not tokenized whole: it cannot fit
            if options.truncate == "error":
                raise RequestError(
                    f"items[{index}] has {traj.chars()} characters, more than this model's limit of "
                    f"{limit} tokens can hold; send options.truncate = 'steps' to score the steps that fit",
                    param=f"items[{index}]",
                    type="payload_too_large",
                )
            fitted = traj.leading(limit * MAX_CHARS_PER_TOKEN)
            if fitted is None:
                raise ItemError(f"the first step ends past this model's context of {limit} tokens")
            traj = fitted
        ids, positions = self._fit(*self.format.encode(traj), f"items[{index}]", options.truncate)
        return self._trajectory_work(ids, positions, n_steps, spans, options)

    def _fit(self, ids: list[int], positions: list[int], field: str, truncate: str) -> tuple[list[int], list[int]]:
        """A trajectory within the model's context: 413 naming ``field``, or (truncate
        "steps") its tail cut off. Causal attention: cutting the tail leaves every earlier
        position unchanged, so the steps that fit keep their exact scores; the rest are
        not scored."""
        limit = self.backend.max_tokens
        if len(ids) <= limit:
            return ids, positions
        if truncate == "error":
            raise RequestError(
                f"{field} has {len(ids)} tokens, over this model's limit of {limit}; "
                "send options.truncate = 'steps' to score the steps that fit",
                param=field,
                type="payload_too_large",
            )
        positions = [p for p in positions if p < limit]
        if not positions:
            raise ItemError(f"the first step ends past this model's context of {limit} tokens")
        return ids[:limit], positions

    def _prepare_rendered(self, index: int, item: Item, options: StepOptions) -> Job[_Payload]:
        """Text (or ids) already laid out with step tags, as vLLM's STEP pooling reads
        it: each tag is a step. Spans are not reported (there are no step texts)."""
        field = f"items[{index}].{item.rendered}"
        tag_id = self.format.tag_id
        if tag_id is None:
            raise RequestError(
                f"{field}: model {self.name!r} ({self.options.format}) marks steps "
                "without a tag token, so pre-rendered input cannot show them; send steps",
                param=field,
            )
        ids, _ = rendered_ids(self.backend, item, index, "error" if options.truncate == "error" else "right")
        positions = [p for p, token in enumerate(ids) if token == tag_id]
        if not positions:
            raise ItemError(f"the {item.rendered} holds no step tag")
        if len(positions) > self.max_steps:
            raise RequestError(
                f"{field} has {len(positions)} steps, over this model's limit of {self.max_steps}",
                param=field,
                type="payload_too_large",
            )
        n_steps = len(positions)
        ids, positions = self._fit(ids, positions, field, options.truncate)
        return self._trajectory_work(ids, positions, n_steps, [], options)

    def _trajectory_work(
        self, ids: list[int], positions: list[int], n_steps: int, spans: list[StepSpan], options: StepOptions
    ) -> Job[_Payload]:
        payload = _Trajectory(
            seq=TokenSequence(ids=ids, positions=tuple(positions)),
            n_steps=n_steps,
            spans=spans,
            aggregate=options.aggregate or self.default_aggregate,
            threshold=options.threshold,
        )
        key_spans = tuple((span.message, span.start, span.end) for span in spans)
        return Job(
            length=len(ids),
            payload=payload,
            prompt_tokens=len(ids),
            truncated=len(positions) < n_steps,
            key=work_key(ids, tuple(positions), n_steps, payload.aggregate, payload.threshold, key_spans),
        )

    # ------------------------------------------------------------------ run

    def combine(self, jobs: list[Job[_Payload]]) -> list[tuple[Unit[Any], list[int]]]:
        # Trajectories of one prompt share it (up to their first step): it runs once.
        return share_prefixes(jobs, lambda j: j.payload.seq)

    def run(self, units: list[Unit[Any]]) -> list[UnitOutput]:
        read = read_units(self.backend, units, lambda j: j.payload.seq, self.format.token_ids)
        return [
            [
                self._pooled(job, rows) if isinstance(job.payload, _Pooling) else self._result(job, rows)
                for job, rows in zip(jobs_of(unit), members)
            ]
            for unit, members in zip(units, read)
        ]

    def _pooled(self, job: Job[_Payload], rows: np.ndarray) -> list[list[float]]:
        return [self.format.pooled(row) for row in rows]

    def _result(self, work: Job[_Payload], scored: np.ndarray) -> StepsResult | ItemError:
        traj = work.payload
        assert isinstance(traj, _Trajectory)
        values = [self.format.score(row) for row in scored]
        if not all(math.isfinite(v) for v in values):
            return ItemError("the model produced a non-finite step score")
        step_scores = values + [None] * (traj.n_steps - len(values))
        stats = aggregate(step_scores, traj.threshold)
        return StepsResult(
            score=stats.aggregates[traj.aggregate],
            step_scores=step_scores,
            steps_scored=len(values),
            aggregates=stats.aggregates,
            first_error_step=stats.first_error_step,
            spans=traj.spans,
            tokens=work.length,
            truncated=work.truncated,
        )

    # ------------------------------------------------------------------ vLLM /pooling

    def plan_pooling(
        self, inputs: list[str | list[int]], keep: int | None = None, side: str = "right"
    ) -> Plan[list[list[float]]]:
        """Text already laid out with step tags (or its token ids), as verl and slime send
        it to vLLM; every tag position yields that step's probability vector. ``keep``:
        at most that many tokens, the first ones (the last ones when ``side`` is left)."""
        tag_id = self.format.tag_id
        if tag_id is None:
            raise RequestError(
                f"model {self.name!r} ({self.options.format}) marks steps without a tag "
                "token, so /pooling cannot find them; use POST /v1/score/steps",
                param="model",
            )
        if keep == -1:  # vLLM's "as many as the model takes"
            keep = self.backend.max_tokens
        works = []
        for index, given in enumerate(inputs):
            if isinstance(given, str):
                given = fit_text(given, self.backend.max_tokens, side if keep else "error", index=index, field="input")
            ids = self.backend.tokenizer.encode(given) if isinstance(given, str) else list(given)
            bad = next((t for t in ids if not 0 <= t < self.backend.vocab_size), None)
            if bad is not None:
                raise RequestError(
                    f"input[{index}] holds token id {bad}, outside this model's vocabulary "
                    f"[0, {self.backend.vocab_size})",
                    param=f"input[{index}]",
                )
            if keep and len(ids) > keep:
                ids = ids[len(ids) - keep :] if side == "left" else ids[:keep]
            if not ids:
                raise RequestError(f"input[{index}] is empty", param=f"input[{index}]")
            if len(ids) > self.backend.max_tokens:
                raise RequestError(
                    f"input[{index}] has {len(ids)} tokens, over this model's limit of {self.backend.max_tokens}",
                    param=f"input[{index}]",
                    type="payload_too_large",
                )
            positions = tuple(i for i, t in enumerate(ids) if t == tag_id)
            works.append(
                Job[_Payload](length=len(ids), payload=_Pooling(TokenSequence(ids, positions)), prompt_tokens=len(ids))
            )
        units = [Unit(job.length, job) for job in works]

        def finish(outputs: list[UnitOutput], _values: list[Any]) -> list[list[list[float]]]:
            vectors = [output for (output,) in outputs]
            failed = next((i for i, v in enumerate(vectors) if isinstance(v, ItemError)), None)
            if failed is not None:  # vLLM's shape has no per-input error: fail the request, name the input
                raise RequestError(f"input[{failed}]: {vectors[failed]}", param=f"input[{failed}]")
            return vectors

        return Plan(units=units, finish=finish, prompt_tokens=sum(job.prompt_tokens for job in works))
