"""Kind ``verifier``: a causal LM judge.

    logprob   ONE forward pass over the judge prompt with the verdict slot prefilled; the
              score weighs each choice's next-token probability (P(yes) for yes / no)
    generate  sample a rationale (n samples), parse each verdict with the template's
              parser; unparsable samples are invalid, never guessed
    judge     rubric criteria of one item: the shared context runs once and every
              criterion is a short continuation attending to it (a batch's items in
              one packed row, see prefix_sharing.read_units)

Options: ``template`` (default ``yes_no``), ``templates`` (your own, by name),
``cache_size`` (judge results kept per prompt, default 10,000).

The judge may be served elsewhere: a ``source`` that is an OpenAI-compatible URL
(backends/remote_backend.py) with the judge's ``tokenizer`` beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from pydantic import Field

from rewardserve.models.backends import Backend, TokenSequence, make_backend
from rewardserve.models.batch_policy import BatchPolicy
from rewardserve.models.cache import LRUCache
from rewardserve.models.errors import ItemError, RequestError
from rewardserve.models.kinds import register_kind
from rewardserve.models.operations.compare import compare_by_judge
from rewardserve.models.operations.groups import group_advantages
from rewardserve.models.operations.rubric import CriterionOutcome, Key
from rewardserve.models.options import WeightedKindOptions
from rewardserve.models.plan import Job, PeerLookup, Plan, Unit, UnitOutput
from rewardserve.models.prefix_sharing import SharedUnit, read_units, shared_prefix_groups
from rewardserve.models.reward_model import RewardModel, work_key
from rewardserve.models.text.chat import MAX_CHARS_PER_TOKEN, render_chat, rendered_ids
from rewardserve.models.text.judge_templates import JudgeTemplate, ParseError, item_variables, load_templates
from rewardserve.protocol import (
    CompareItem,
    CompareOptions,
    CompareResult,
    Criterion,
    Item,
    ItemResult,
    ScoreOptions,
    VerifyOptions,
    VerifyResult,
    VerifySample,
)


@dataclass(frozen=True)
class Choices:
    """A verdict's possible answers as next-token ids (several spellings each)."""

    names: tuple[str, ...]
    token_ids: tuple[int, ...]  # flattened over choices
    owner: tuple[int, ...]  # which choice each token id belongs to
    values: tuple[float, ...]

    def probabilities(self, logits: np.ndarray) -> list[float]:
        z = logits.astype(np.float64)
        z = np.exp(z - z.max())
        mass = [0.0] * len(self.names)
        for value, choice in zip(z, self.owner):
            mass[choice] += float(value)
        total = sum(mass)
        return [m / total for m in mass]

    def score(self, probabilities: list[float]) -> float:
        return float(sum(p * v for p, v in zip(probabilities, self.values)))


@dataclass(frozen=True)
class _Logprob:
    seq: TokenSequence
    choices: Choices
    key: tuple[tuple[int, ...], tuple[int, ...]]  # (prompt ids, choice token ids)


@dataclass(frozen=True)
class _Generate:
    prompt: list[int]
    template: JudgeTemplate
    options: VerifyOptions


@dataclass(frozen=True)
class _Judge:
    """Criteria of one item: a shared prefix and one continuation per criterion."""

    prefix: list[int]
    suffixes: list[TokenSequence]
    choices: list[Choices]
    keys: list[tuple[tuple[int, ...], tuple[int, ...]]]  # as _Logprob.key


class VerifierOptions(WeightedKindOptions):
    template: str = Field("yes_no", description="The judge template used when a request names none.")
    templates: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Judge templates of your own by name (the keys of presets/judge_templates.yaml).",
    )
    cache_size: int = Field(10_000, ge=0, description="Judge logits kept per prompt.")


_Payload = _Logprob | _Generate
CHOICES_KEPT = 256


@register_kind("verifier")
class VerifierModel(RewardModel):
    Options = VerifierOptions
    options: VerifierOptions
    default_policy = BatchPolicy(max_batch_tokens=16384, max_wait_ms=5.0)
    endpoints = frozenset({"score", "verify", "judge", "compare"})
    inputs = frozenset({"chat", "text", "input_ids"})
    backend: Backend  # set in load(), before any other method runs

    def load(self) -> None:
        self.backend = make_backend(self.spec, "lm", self.options.backend())
        self.templates = load_templates(self.options.templates)
        self.default_template = self.options.template
        self.template(self.default_template)
        self.cache = LRUCache(self.options.cache_size)
        # Requests bring their own choices (rubric criteria): kept for reuse, boundedly.
        self._choices = LRUCache(CHOICES_KEPT)

    # ------------------------------------------------------------------ pieces

    def template(self, name: str | None) -> JudgeTemplate:
        name = name or self.default_template
        if name not in self.templates:
            raise RequestError(
                f"unknown template {name!r}; templates: {', '.join(sorted(self.templates))}",
                param="options.template",
            )
        return self.templates[name]

    def choices(self, names: list[str], spellings: list[list[str]], values: list[float]) -> Choices:
        if not self.backend.reads_logits:
            raise ItemError(
                f"the judge server of model {self.name!r} returns no logprobs, and this reads each "
                "choice's probability from them (/v1/verify with options.mode 'generate' parses instead)"
            )
        key = (tuple(names), tuple(map(tuple, spellings)), tuple(values))
        known: Choices | None = self._choices.get(key)
        if known is None:
            tok = self.backend.tokenizer
            ids: list[int] = []
            owner: list[int] = []
            seen: dict[int, int] = {}
            for index, forms in enumerate(spellings):
                for form in forms:
                    encoded = tok.encode(form, add_special_tokens=False)
                    if not encoded:
                        continue
                    first = encoded[0]  # the verdict's first token decides it
                    if seen.get(first, index) != index:
                        raise RequestError(
                            f"choices {names[seen[first]]!r} and {names[index]!r} start with the "
                            "same token for this tokenizer; logprob mode cannot tell them apart",
                            param="options.template",
                        )
                    if first not in seen:
                        seen[first] = index
                        ids.append(first)
                        owner.append(index)
            if set(owner) != set(range(len(names))):
                raise RequestError("a choice encodes to no token", param="options.template")
            known = Choices(tuple(names), tuple(ids), tuple(owner), tuple(values))
            self._choices.put(key, known)
        return known

    def template_choices(self, template: JudgeTemplate) -> Choices:
        if not template.choices:
            raise RequestError(
                f"template {template.name!r} has no choices to read; use mode 'generate'",
                param="options.mode",
            )
        names = [forms[0].strip() for forms in template.choices]
        return self.choices(names, template.choices, template.values)

    def encode_prompt(self, template: JudgeTemplate, variables: dict[str, Any], prefill: str) -> list[int]:
        text = render_chat(self.backend.tokenizer, template.render(variables), add_generation_prompt=True) + prefill
        if len(text) > self.backend.max_tokens * MAX_CHARS_PER_TOKEN:  # not worth tokenizing
            raise ItemError(
                f"the judge prompt has {len(text)} characters, more than this model's limit of "
                f"{self.backend.max_tokens} tokens can hold"
            )
        ids: list[int] = self.backend.tokenizer(text)["input_ids"]
        if len(ids) > self.backend.max_tokens:
            raise ItemError(
                f"the judge prompt has {len(ids)} tokens, over this model's limit of {self.backend.max_tokens}"
            )
        return ids

    # ------------------------------------------------------------------ prepare

    def plan_score(
        self, items: list[Item], options: ScoreOptions, cache: LRUCache | None = None, peers: PeerLookup | None = None
    ) -> Plan[ItemResult]:
        """/v1/score on a judge: P(yes) of the default template."""
        normalize = options.normalize == "group"
        return self.plan_items(
            items,
            VerifyOptions(),
            cache,
            ItemResult,
            lambda results: group_advantages(items, results) if normalize else results,
        )

    def plan_compare(
        self,
        items: list[CompareItem],
        options: CompareOptions,
        cache: LRUCache | None = None,
        peers: PeerLookup | None = None,
    ) -> Plan[CompareResult]:
        """Every ordered pair judged, both orders averaged (operations/compare.py)."""
        return compare_by_judge(self, items, options)

    def prepare(self, items: list[Item], options: VerifyOptions) -> list[Job[_Payload] | ItemError]:
        template = self.template(options.template)
        # A remote judge whose server returns no logprobs generates and parses instead.
        mode = options.mode if self.backend.reads_logits else "generate"
        choices = self.template_choices(template) if mode == "logprob" else None
        entries: list[Job[_Payload] | ItemError] = []
        for index, item in enumerate(items):
            try:
                if mode == "logprob":
                    assert choices is not None  # made above for logprob mode
                    prefill = template.logprob_prefill if template.logprob_prefill is not None else template.prefill
                    ids = self._prompt_ids(item, index, template, options, prefill)
                    payload = _Logprob(
                        TokenSequence(ids, (len(ids) - 1,)), choices, key=(tuple(ids), choices.token_ids)
                    )
                    entries.append(
                        Job(
                            len(ids),
                            payload,
                            prompt_tokens=len(ids),
                            key=work_key(ids, choices.token_ids, choices.values),
                        )
                    )
                else:
                    ids = self._prompt_ids(item, index, template, options, template.prefill)
                    cost = len(ids) + options.max_new_tokens * options.n
                    entries.append(Job(cost, _Generate(ids, template, options), prompt_tokens=len(ids)))
            except ItemError as exc:
                entries.append(exc)
        return entries

    def _prompt_ids(
        self, item: Item, index: int, template: JudgeTemplate, options: VerifyOptions, prefill: str
    ) -> list[int]:
        """The judge prompt's ids: the template over the item, or a pre-rendered item as
        the caller wrote it (its whole prompt, the verdict read right after it)."""
        if not item.rendered:
            return self.encode_prompt(template, item_variables(item, options.variables), prefill)
        ids, _ = rendered_ids(self.backend, item, index, "error")
        if len(ids) > self.backend.max_tokens:
            raise RequestError(
                f"items[{index}] has {len(ids)} tokens, over this model's limit of {self.backend.max_tokens}",
                param=f"items[{index}]",
                type="payload_too_large",
            )
        return ids

    def combine(self, jobs: list[Job[_Payload]]) -> list[tuple[Unit[Any], list[int]]]:
        """Judge prompts of one request share their system prompt and often the
        question: such logprob jobs become one shared-prefix unit."""
        logprob = [i for i, j in enumerate(jobs) if isinstance(j.payload, _Logprob)]
        units: list[tuple[Unit[Any], list[int]]] = [
            (Unit(j.length, j), [i]) for i, j in enumerate(jobs) if not isinstance(j.payload, _Logprob)
        ]
        seqs = [_logprob(jobs[i]).seq for i in logprob]
        for prefix, members in shared_prefix_groups([s.ids for s in seqs]):
            indices = [logprob[m] for m in members]
            if prefix == 0:
                units.append((Unit(jobs[indices[0]].length, jobs[indices[0]]), indices))
            else:
                prompts = [_logprob(jobs[i]).seq.ids for i in indices]
                units.append((self.prepare_judge(prompts, [_logprob(jobs[i]).choices for i in indices]), indices))
        return units

    def prepare_judge(self, prompts: list[list[int]], choices: list[Choices]) -> Unit[_Judge]:
        """Judge prompts as one unit: their longest common token prefix runs once, each
        prompt's rest attends to it (``_judge``)."""
        first, common = prompts[0], len(prompts[0])
        for ids in prompts[1:]:
            k, limit = 0, min(common, len(ids))
            while k < limit and ids[k] == first[k]:
                k += 1
            common = k
        common = min(common, min(len(p) for p in prompts) - 1)  # every suffix reads a token
        suffixes = [TokenSequence(p[common:], (len(p) - common - 1,)) for p in prompts]
        cost = common + sum(len(s.ids) for s in suffixes)
        keys = [(tuple(p), c.token_ids) for p, c in zip(prompts, choices)]
        return Unit(cost, _Judge(prompts[0][:common], suffixes, choices, keys), members=len(prompts))

    def plan_judge(
        self,
        items: list[Item],
        criteria: list[list[Criterion]],
        params: list[str],
        texts: dict[Key, Any],
        template: str | None,
    ) -> tuple[list[Unit[Any]], Callable[[list[UnitOutput]], dict[Key, CriterionOutcome]], int]:
        """Rubric judge questions: one unit per item (its criteria share the item's
        context), how the units' outputs become criterion outcomes, and the tokens they
        hold. A criterion whose text failed, or whose prompt is over the limit, fails
        alone."""
        judged: dict[Key, CriterionOutcome] = {}
        units: list[Unit[Any]] = []
        owners: list[list[Key]] = []
        for index, (item, own) in enumerate(zip(items, criteria)):
            keys, prompts, choices = [], [], []
            variables: dict[str, Any] | None = None
            for k, c in enumerate(own):
                if c.text is None:
                    continue
                text = texts[(index, k)]
                if isinstance(text, ItemError):
                    judged[(index, k)] = (text, None)
                    continue
                try:
                    variables = variables if variables is not None else item_variables(item)
                    if c.choices is None:  # the judge template's own verdicts (Yes / No)
                        chosen = self.template(template)
                        choice = self.template_choices(chosen)
                    else:  # ordered best first, valued 1 down to 0
                        chosen = self.template("criterion_choices")
                        n = len(c.choices)
                        try:
                            choice = self.choices(
                                c.choices, [[x, " " + x] for x in c.choices], [1.0 - i / (n - 1) for i in range(n)]
                            )
                        except RequestError as exc:
                            raise RequestError(exc.message, param=f"{params[index]}[{k}].choices") from exc
                    prefill = chosen.logprob_prefill if chosen.logprob_prefill is not None else chosen.prefill
                    variables_k = {**variables, "criterion": text, "choices": c.choices or []}
                    prompts.append(self.encode_prompt(chosen, variables_k, prefill))
                    choices.append(choice)
                    keys.append((index, k))
                except ItemError as exc:
                    judged[(index, k)] = (exc, None)
            if keys:
                units.append(self.prepare_judge(prompts, choices))
                owners.append(keys)

        def outcomes(outputs: list[UnitOutput]) -> dict[Key, CriterionOutcome]:
            for keys, produced in zip(owners, outputs):
                for key, result in zip(keys, produced):
                    if isinstance(result, ItemError):
                        judged[key] = (result, None)
                    else:
                        judged[key] = (result.score, f"{result.verdict} ({result.probabilities[result.verdict]:.3f})")
            return judged

        return units, outcomes, sum(unit.length for unit in units)

    # ------------------------------------------------------------------ run

    def run(self, units: list[Unit[Any]]) -> list[UnitOutput]:
        results: list[UnitOutput] = [[] for _ in units]
        alone = [i for i, u in enumerate(units) if isinstance(u.payload, Job)]
        logprob = [i for i in alone if isinstance(units[i].payload.payload, _Logprob)]
        by_ids: dict[tuple[int, ...], list[int]] = {}
        for i in logprob:
            job = _logprob(units[i].payload)
            cached = self.cache.get(_own(units[i], job.key))
            if cached is not None:
                results[i] = [self._logprob_result(job.choices, cached)]
            else:
                by_ids.setdefault(job.choices.token_ids, []).append(i)
        for token_ids, members in by_ids.items():
            rows = self.backend.read([_logprob(units[i].payload).seq for i in members], list(token_ids))
            for i, (row,) in zip(members, rows):
                job = _logprob(units[i].payload)
                self.cache.put(_own(units[i], job.key), row)
                results[i] = [self._logprob_result(job.choices, row)]
        judges = [i for i, u in enumerate(units) if isinstance(u.payload, _Judge)]
        for i, judged in zip(judges, self._judge([units[i] for i in judges])):
            results[i] = judged
        for i in alone:
            payload = units[i].payload.payload
            if isinstance(payload, _Generate):
                results[i] = [self._generate(payload)]
        return results

    def _logprob_result(self, choices: Choices, row: np.ndarray) -> VerifyResult | ItemError:
        # -inf is a choice a remote judge's top logprobs left out: no mass, while another has some.
        if np.any(np.isnan(row)) or np.any(row == np.inf):
            return ItemError("the model produced non-finite logits")
        if not np.any(np.isfinite(row)):
            return ItemError("none of the verdict's choices is among the judge's top logprobs")
        probs = choices.probabilities(row)
        best = int(np.argmax(probs))
        return VerifyResult(
            score=choices.score(probs),
            verdict=choices.names[best],
            probabilities=dict(zip(choices.names, probs)),
        )

    def _generate(self, job: _Generate) -> VerifyResult | ItemError:
        o = job.options
        texts = self.backend.generate(
            job.prompt, n=o.n, temperature=o.temperature, top_p=o.top_p, max_new_tokens=o.max_new_tokens, seed=o.seed
        )
        samples = []
        for text in texts:
            try:
                verdict = job.template.parse(job.template.prefill + text)
                samples.append(VerifySample(text=text, score=verdict.score, verdict=verdict.verdict))
            except ParseError:
                samples.append(VerifySample(text=text))
        valid = [s for s in samples if s.score is not None]
        if not valid:
            # Invalid, with what the judge wrote, so the caller can see why.
            return VerifyResult(
                score=None,
                valid=False,
                samples=samples,
                error=f"no verdict could be parsed from {len(samples)} sample(s)",
            )
        return VerifyResult(
            score=sum(cast(float, s.score) for s in valid) / len(valid),  # valid: the samples with a score
            verdict=valid[0].verdict,
            rationale=valid[0].text,
            samples=samples,
        )

    def _judge(self, judged: list[Unit[Any]]) -> list[list[VerifyResult | ItemError]]:
        """Each job's criteria. The uncached ones of all jobs are read together through
        prefix_sharing.read_units: one packed row, one engine read (vLLM), or each prefix once on
        its KV cache, as the backend does best."""
        jobs: list[_Judge] = [unit.payload for unit in judged]
        # Cached rows hold the logits of each criterion's own choices, as logprob's do.
        keys = [[_own(unit, k) for k in job.keys] for unit, job in zip(judged, jobs)]
        rows = [[self.cache.get(k) for k in own] for own in keys]
        todo = [[i for i, row in enumerate(own) if row is None] for own in rows]
        reading = [(job, own, ids, cache_keys) for job, own, ids, cache_keys in zip(jobs, rows, todo, keys) if ids]
        if reading:
            token_ids = sorted({t for job, _, ids, _ in reading for i in ids for t in job.choices[i].token_ids})
            column = {t: k for k, t in enumerate(token_ids)}
            units = [Unit(0, SharedUnit(job.prefix, [], [job.suffixes[i] for i in ids])) for job, _, ids, _ in reading]
            # Every unit is shared: read_units needs no sequence of a unit alone (None).
            for (job, own, ids, cache_keys), fresh in zip(reading, read_units(self.backend, units, None, token_ids)):
                for i, (row,) in zip(ids, fresh):
                    own[i] = row[[column[t] for t in job.choices[i].token_ids]]
                    self.cache.put(cache_keys[i], own[i])
        # Every row is there now: from the cache, or read just above.
        return [
            [self._logprob_result(c, cast(np.ndarray, row)) for c, row in zip(job.choices, own)]
            for job, own in zip(jobs, rows)
        ]


def _own(unit: Unit[Any], key: Any) -> tuple[str | None, Any]:
    """A judge cache key taken with the unit's tenant: no tenant reads another's."""
    return (unit.scope.tenant if unit.scope is not None else None, key)


def _logprob(job: Job[Any]) -> _Logprob:
    assert isinstance(job.payload, _Logprob)
    return job.payload
