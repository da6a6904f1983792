"""Kind ``implicit_prm``: process rewards from a causal LM and its reference, PRIME's
implicit PRM (Yuan et al. 2024, "Free Process Rewards without Process Labels"; PRIME,
Cui et al. 2025).

Each response token t gets ``beta * (log pi(y_t | y_<t) - log pi_ref(y_t | y_<t))``, pi
the model (``source``) and pi_ref its reference (``options.reference``), both read from
one forward each over the prompt and the response. A step's score is the sum of its
tokens' rewards: a token belongs to the step its last character is in, a separator and
anything after the last step to the step before it. The trajectory's default aggregate
is ``sum``: beta times the log-ratio of the whole response, the implicit outcome reward.

The prompt is the conversation before the response through the model's chat template
with the generation prompt (its plain text where the tokenizer has no template); the
response is the item's ``response_token_ids`` where it sends them (the policy's own
tokens: the model must share the policy's tokenizer), else the response as the model's
tokenizer splits it. Where the ids were sent and every token was scored, the result
carries ``token_rewards``, one per id: the per-token rewards PRIME trains with.

The items of a group share their prompt: it runs once per model (prefix_sharing). On
the vllm backend the model and its reference are two engines, the log-probabilities
vLLM's ``prompt_logprobs`` (which skip vLLM's prefix cache: every position computed).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import Field

from rewardserve.client.token_alignment import token_ends
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
from rewardserve.models.text.chat import MAX_CHARS_PER_TOKEN, render_chat
from rewardserve.models.text.steps import Trajectory, aggregate, extract
from rewardserve.protocol import Aggregate, Item, ItemResult, ScoreOptions, StepOptions, StepSpan, StepsResult


class ImplicitPRMOptions(WeightedKindOptions):
    reference: str = Field(
        description="The reference model pi_ref (a directory or hub id) with the model's own tokenizer; "
        "PRIME's is the policy it started from."
    )
    beta: float = Field(0.05, gt=0, description="The scale of the log-ratio (PRIME's beta_train).")
    aggregate: Aggregate = Field(
        "sum", description="A trajectory's score from its step scores; sum: the implicit outcome reward."
    )
    separator: str | None = Field(None, description="How a response splits into steps when the request does not say.")
    max_steps: int = Field(256, gt=0, description="Steps per trajectory; more is a 413.")
    share_prompt: bool = Field(
        True, description="Completions of one prompt in a batch run the prompt once (off: each runs it whole)."
    )


@dataclass(frozen=True)
class _Response:
    seq: TokenSequence  # positions: each response token's predecessor; targets: the tokens
    step_of: tuple[int, ...]  # per scored token, its step
    n_steps: int
    complete: int  # steps whose every token was scored (the rest were cut off)
    n_tokens: int  # the response's tokens, scored or not
    spans: list[StepSpan]
    aggregate: str
    threshold: float | None
    per_token: bool  # the item sent its ids: give a reward per id


@register_kind("implicit_prm")
class ImplicitPRMModel(RewardModel):
    Options = ImplicitPRMOptions
    options: ImplicitPRMOptions
    default_policy = BatchPolicy(max_batch_tokens=16384, max_wait_ms=5.0)
    endpoints = frozenset({"score", "steps", "compare"})
    backend: Backend  # set in load(), before any other method runs
    reference: Backend | None = None

    def backends(self) -> list[Backend]:
        return [*super().backends(), *([self.reference] if self.reference is not None else [])]

    def load(self) -> None:
        from rewardserve.models.checkpoints import checkpoint_problem

        if self.spec.backend not in ("auto", "transformers", "vllm"):
            raise ValueError(
                f"model {self.name!r}: implicit_prm reads every token's log-probability over the whole "
                "vocabulary, which the transformers and vllm backends do; set backend: transformers or vllm"
            )
        problem = checkpoint_problem(self.options.reference, None)
        if problem is not None:
            raise ValueError(f"model {self.name!r}: options.reference: {problem}")
        spec = self.spec
        self.backend = make_backend(spec, "lm", self.options.backend())
        # The reference runs where the model does (two engines on vllm, each taking its
        # gpu_memory_utilization).
        spec = spec.model_copy(update={"backend": self.backend.name})
        ref_spec = spec.model_copy(
            update={
                "name": f"{self.name}:reference",
                "source": self.options.reference,
                "revision": None,
                "adapter": None,
            }
        )
        self.reference = reference = make_backend(ref_spec, "lm", self.options.backend())
        if reference.tokenizer.get_vocab() != self.backend.tokenizer.get_vocab():
            raise ValueError(
                f"model {self.name!r}: options.reference {self.options.reference} has another tokenizer; "
                "the log-ratio compares the two models on the same tokens"
            )

    def probe(self) -> None:
        (entry,) = self.prepare([Item(prompt="1+1?", steps=["1+1=2.", " So 2."])], StepOptions())
        if isinstance(entry, ItemError):
            raise RuntimeError(f"probe item was rejected: {entry}")
        ((result,),) = self.run([Unit(entry.length, entry)])
        if isinstance(result, ItemError):
            raise RuntimeError(f"probe failed: {result}")

    def close(self) -> None:
        super().close()
        reference = getattr(self, "reference", None)  # None before load, and once dropped
        if reference is not None:
            reference.close()

    # ------------------------------------------------------------------ prepare

    def plan_score(
        self, items: list[Item], options: ScoreOptions, cache: LRUCache | None = None, peers: PeerLookup | None = None
    ) -> Plan[ItemResult]:
        steps = StepOptions(truncate="error" if options.truncate == "error" else "steps")
        normalize = options.normalize == "group"
        return self.plan_items(
            items, steps, cache, ItemResult, lambda results: group_advantages(items, results) if normalize else results
        )

    def prepare(self, items: list[Item], options: StepOptions) -> list[Job[_Response] | ItemError]:
        entries: list[Job[_Response] | ItemError] = []
        for index, item in enumerate(items):
            try:
                entries.append(self._prepare_one(index, item, options))
            except ItemError as exc:
                entries.append(exc)
        return entries

    def _prepare_one(self, index: int, item: Item, options: StepOptions) -> Job[_Response]:
        traj = extract(item, options, self.options.separator)
        if traj.step_turns is not None:
            raise ItemError(
                "implicit_prm scores the steps of one response; this item's steps are assistant turns "
                "(send steps, or options.steps_from 'separator')"
            )
        if not traj.steps:
            raise ItemError("the item has no steps to score")
        if len(traj.steps) > self.options.max_steps:
            raise RequestError(
                f"items[{index}] has {len(traj.steps)} steps, over this model's limit of {self.options.max_steps}",
                param=f"items[{index}]",
                type="payload_too_large",
            )
        limit, n_steps = self.backend.max_tokens, len(traj.steps)
        if traj.chars() > limit * MAX_CHARS_PER_TOKEN and item.response_token_ids is None:
            self._too_long(index, options, f"{traj.chars()} characters, more than {limit} tokens can hold")
            fitted = traj.leading(limit * MAX_CHARS_PER_TOKEN)
            if fitted is None:
                raise ItemError(f"the first step ends past this model's context of {limit} tokens")
            cut: int | None = fitted.spans[-1].end if len(fitted.steps) < n_steps else None
            traj = fitted
        else:
            cut = None
        prompt = self._prompt_ids(traj)
        response, ends = self._response_ids(item, traj, cut)
        starts = [span.start for span in traj.spans]
        step_of = [max(0, min(bisect.bisect_left(starts, end) - 1, len(starts) - 1)) for end in ends]
        ids = prompt + response
        if len(ids) > limit:
            self._too_long(index, options, f"{len(ids)} tokens, over this model's limit of {limit}")
            ids = ids[:limit]
        scored = len(ids) - len(prompt)
        if scored < 1:
            raise ItemError(f"the first step ends past this model's context of {limit} tokens")
        # A step is scored when all of its tokens are: the first cut token's step is not.
        complete = step_of[scored] if scored < len(step_of) else len(traj.steps)
        if complete == 0:
            raise ItemError(f"the first step ends past this model's context of {limit} tokens")
        payload = _Response(
            seq=TokenSequence(ids, tuple(range(len(prompt) - 1, len(ids) - 1)), tuple(response[:scored])),
            step_of=tuple(step_of[:scored]),
            n_steps=n_steps,
            complete=complete,
            n_tokens=len(response),
            spans=traj.spans,
            aggregate=options.aggregate or self.options.aggregate,
            threshold=options.threshold,
            per_token=item.response_token_ids is not None,
        )
        key_spans = tuple((span.start, span.end) for span in traj.spans)
        return Job(
            length=len(ids),
            payload=payload,
            prompt_tokens=len(ids),
            truncated=complete < payload.n_steps,
            key=work_key(
                ids, payload.step_of, n_steps, payload.aggregate, payload.threshold, key_spans, payload.per_token
            ),
        )

    def _too_long(self, index: int, options: StepOptions, what: str) -> None:
        if options.truncate == "error":
            raise RequestError(
                f"items[{index}] has {what}; send options.truncate = 'steps' to score the steps that fit",
                param=f"items[{index}]",
                type="payload_too_large",
            )

    def _prompt_ids(self, traj: Trajectory) -> list[int]:
        tok = self.backend.tokenizer
        if tok.chat_template is not None:
            text = render_chat(tok, traj.context, add_generation_prompt=True)
        else:
            text = traj.question()
        ids: list[int] = list(tok(text)["input_ids"])
        if not ids:
            raise ItemError("the prompt is empty and the tokenizer adds no BOS: no token precedes the response")
        return ids

    def _response_ids(self, item: Item, traj: Trajectory, cut: int | None) -> tuple[list[int], list[int]]:
        """The response's token ids (its first ``cut`` characters where steps were
        dropped) and where each ends in the text the spans index."""
        tok = self.backend.tokenizer
        text = ("".join(traj.steps) if item.steps is not None else _response_text(item))[:cut]
        if item.response_token_ids is not None:
            ids = [int(t) for t in item.response_token_ids]
            bad = next((t for t in ids if not 0 <= t < self.backend.vocab_size), None)
            if bad is not None:
                raise ItemError(f"response_token_ids hold {bad}, outside this model's vocabulary")
            try:
                return ids, token_ends(tok, ids, text)
            except ValueError as exc:
                raise ItemError(f"response_token_ids, decoded by this model's tokenizer: {exc}") from None
        encoded = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        ends, reached = [], 0
        for _, end in encoded["offset_mapping"]:
            reached = max(reached, int(end))
            ends.append(reached)
        if not encoded["input_ids"]:
            raise ItemError("the response is empty")
        return list(encoded["input_ids"]), ends

    # ------------------------------------------------------------------ run

    def combine(self, jobs: list[Job[_Response]]) -> list[tuple[Unit[Any], list[int]]]:
        if not self.options.share_prompt:
            return super().combine(jobs)
        return share_prefixes(jobs, lambda j: j.payload.seq)

    def run(self, units: list[Unit[Any]]) -> list[UnitOutput]:
        policy = read_units(self.backend, units, lambda j: j.payload.seq)
        assert self.reference is not None, "run() follows load()"
        reference = read_units(self.reference, units, lambda j: j.payload.seq)
        return [
            [self._result(job, mine, ref) for job, mine, ref in zip(jobs_of(unit), mine_rows, ref_rows)]
            for unit, mine_rows, ref_rows in zip(units, policy, reference)
        ]

    def _result(self, job: Job[_Response], mine: np.ndarray, ref: np.ndarray) -> StepsResult | ItemError:
        response = job.payload
        ratio = mine[:, 0].astype(np.float64) - ref[:, 0].astype(np.float64)
        if not np.isfinite(ratio).all():
            return ItemError("the model or its reference gave a token no probability (a non-finite log-ratio)")
        rewards = self.options.beta * ratio
        sums = np.zeros(response.n_steps)
        np.add.at(sums, np.asarray(response.step_of, dtype=np.int64), rewards)
        step_scores: list[float | None] = [
            float(v) if i < response.complete else None for i, v in enumerate(sums.tolist())
        ]
        stats = aggregate(step_scores, response.threshold)
        whole = response.per_token and len(rewards) == response.n_tokens
        return StepsResult(
            score=stats.aggregates[response.aggregate],
            step_scores=step_scores,
            steps_scored=response.complete,
            aggregates=stats.aggregates,
            first_error_step=stats.first_error_step,
            spans=response.spans,
            tokens=job.length,
            truncated=job.truncated,
            token_rewards=[float(r) for r in rewards] if whole else None,
        )


def _response_text(item: Item) -> str:
    if item.messages is not None:
        last = max(i for i, m in enumerate(item.messages) if m.role == "assistant")
        return item.messages[last].text()
    return item.response or ""
