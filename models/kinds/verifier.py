"""Kind ``verifier``: a causal LM judge.

    logprob   ONE forward pass over the judge prompt with the verdict slot prefilled; the
              score weighs each choice's next-token probability (P(yes) for yes / no)
    generate  sample a rationale (n samples), parse each verdict with the template's
              parser; unparsable samples are invalid, never guessed
    judge     rubric criteria of one item: the shared context runs once and every
              criterion is a short continuation attending to it (a batch's items in
              one packed row, see prefix.read_units)

Options: ``template`` (default ``yes_no``), ``templates`` (your own, by name),
``cache_size`` (judge results kept per prompt, default 10,000).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rewardserve.client.protocol import (
    Item,
    ScoreOptions,
    VerifyOptions,
    VerifyResult,
    VerifySample,
)
from rewardserve.models.backends import Sequence, make_backend
from rewardserve.models.reward_model import BatchPolicy, ItemError, RequestError, RewardModel, Work, work_key
from rewardserve.models.cache import LRUCache
from rewardserve.models.text.chat import MAX_CHARS_PER_TOKEN, render_chat, rendered_ids
from rewardserve.models.text.judge_templates import JudgeTemplate, ParseError, item_variables, load_templates
from rewardserve.models.prefix_sharing import SharedUnit, read_units, shared_prefix_groups
from rewardserve.models.kinds import register_kind


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
    seq: Sequence
    choices: Choices
    key: tuple


@dataclass(frozen=True)
class _Generate:
    prompt: list[int]
    template: JudgeTemplate
    options: VerifyOptions


@dataclass(frozen=True)
class _Judge:
    """Criteria of one item: a shared prefix and one continuation per criterion."""

    prefix: list[int]
    suffixes: list[Sequence]
    choices: list[Choices]
    keys: list[tuple]


@register_kind("verifier")
class VerifierModel(RewardModel):
    default_policy = BatchPolicy(max_batch_tokens=16384, max_wait_ms=5.0)
    endpoints = frozenset({"score", "verify", "judge", "compare"})
    inputs = frozenset({"chat", "text", "input_ids"})

    def load(self) -> None:
        self.backend = make_backend(self.spec, "lm")
        self.templates = load_templates(self.options.get("templates"))
        self.default_template = self.options.get("template", "yes_no")
        self.template(self.default_template)
        self.cache = LRUCache(int(self.options.get("cache_size", 10_000)))
        self._choices: dict[tuple, Choices] = {}

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
        key = (tuple(names), tuple(map(tuple, spellings)), tuple(values))
        if key not in self._choices:
            tok = self.backend.tokenizer
            ids, owner, seen = [], [], {}
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
            self._choices[key] = Choices(tuple(names), tuple(ids), tuple(owner), tuple(values))
        return self._choices[key]

    def template_choices(self, template: JudgeTemplate) -> Choices:
        if not template.choices:
            raise RequestError(
                f"template {template.name!r} has no choices to read; use mode 'generate'",
                param="options.mode",
            )
        names = [forms[0].strip() for forms in template.choices]
        return self.choices(names, template.choices, template.values)

    def encode_prompt(self, template: JudgeTemplate, variables: dict, prefill: str) -> list[int]:
        text = render_chat(self.backend.tokenizer, template.render(variables),
                           add_generation_prompt=True) + prefill
        if len(text) > self.backend.max_tokens * MAX_CHARS_PER_TOKEN:  # not worth tokenizing
            raise ItemError(
                f"the judge prompt has {len(text)} characters, more than this model's limit of "
                f"{self.backend.max_tokens} tokens can hold"
            )
        ids = self.backend.tokenizer(text)["input_ids"]
        if len(ids) > self.backend.max_tokens:
            raise ItemError(
                f"the judge prompt has {len(ids)} tokens, over this model's limit of "
                f"{self.backend.max_tokens}"
            )
        return ids

    # ------------------------------------------------------------------ prepare

    def prepare(self, items: list[Item], options) -> list[Work | ItemError]:
        if isinstance(options, ScoreOptions):
            options = VerifyOptions()  # /v1/score on a judge: P(yes) of the default template
        template = self.template(options.template)
        choices = self.template_choices(template) if options.mode == "logprob" else None
        entries: list[Work | ItemError] = []
        for index, item in enumerate(items):
            try:
                if options.mode == "logprob":
                    prefill = template.logprob_prefill if template.logprob_prefill is not None else template.prefill
                    ids = self._prompt_ids(item, index, template, options, prefill)
                    payload = _Logprob(Sequence(ids, (len(ids) - 1,)), choices,
                                       key=(tuple(ids), choices.token_ids))
                    entries.append(Work(len(ids), payload, prompt_tokens=len(ids),
                                        key=work_key(ids, choices.token_ids, choices.values)))
                else:
                    ids = self._prompt_ids(item, index, template, options, template.prefill)
                    cost = len(ids) + options.max_new_tokens * options.n
                    entries.append(Work(cost, _Generate(ids, template, options), prompt_tokens=len(ids)))
            except ItemError as exc:
                entries.append(exc)
        return entries

    def _prompt_ids(self, item: Item, index: int, template: JudgeTemplate, options, prefill: str) -> list[int]:
        """The judge prompt's ids: the template over the item, or a pre-rendered item as
        the caller wrote it (its whole prompt, the verdict read right after it)."""
        if not item.rendered:
            return self.encode_prompt(template, item_variables(item, options.variables), prefill)
        ids, _ = rendered_ids(self.backend, item, index, "error")
        if len(ids) > self.backend.max_tokens:
            raise RequestError(f"items[{index}] has {len(ids)} tokens, over this model's limit of "
                               f"{self.backend.max_tokens}", param=f"items[{index}]", status=413)
        return ids

    def combine(self, works: list[Work]) -> list[tuple[Work, list[int]]]:
        """Judge prompts of one request share their system prompt and often the
        question: such logprob work becomes one shared-prefix unit."""
        logprob = [i for i, w in enumerate(works) if isinstance(w.payload, _Logprob)]
        units = [(w, [i]) for i, w in enumerate(works) if not isinstance(w.payload, _Logprob)]
        seqs = [works[i].payload.seq for i in logprob]
        for prefix, members in shared_prefix_groups([s.ids for s in seqs]):
            indices = [logprob[m] for m in members]
            if prefix == 0:
                units.append((works[indices[0]], indices))
            else:
                prompts = [works[i].payload.seq.ids for i in indices]
                units.append((self.prepare_judge(prompts, [works[i].payload.choices for i in indices]), indices))
        return units

    def prepare_judge(self, prompts: list[list[int]], choices: list[Choices]) -> Work:
        """One item's judge prompts as one unit: their longest common token prefix runs
        once, each prompt's rest attends to it (``_judge``)."""
        first, common = prompts[0], len(prompts[0])
        for ids in prompts[1:]:
            k, limit = 0, min(common, len(ids))
            while k < limit and ids[k] == first[k]:
                k += 1
            common = k
        common = min(common, min(len(p) for p in prompts) - 1)  # every suffix reads a token
        suffixes = [Sequence(p[common:], (len(p) - common - 1,)) for p in prompts]
        cost = common + sum(len(s.ids) for s in suffixes)
        keys = [(tuple(p), c.token_ids) for p, c in zip(prompts, choices)]
        return Work(cost, _Judge(prompts[0][:common], suffixes, choices, keys), prompt_tokens=cost)

    # ------------------------------------------------------------------ predict

    def predict(self, batch: list[Work]) -> list:
        results: list = [None] * len(batch)
        logprob = [i for i, w in enumerate(batch) if isinstance(w.payload, _Logprob)]
        by_ids: dict[tuple, list[int]] = {}
        for i in logprob:
            cached = self.cache.get(batch[i].payload.key)
            if cached is not None:
                results[i] = self._logprob_result(batch[i].payload.choices, cached)
            else:
                by_ids.setdefault(batch[i].payload.choices.token_ids, []).append(i)
        for token_ids, members in by_ids.items():
            rows = self.backend.read([batch[i].payload.seq for i in members], list(token_ids))
            for i, (row,) in zip(members, rows):
                self.cache.put(batch[i].payload.key, row)
                results[i] = self._logprob_result(batch[i].payload.choices, row)
        judges = [i for i, w in enumerate(batch) if isinstance(w.payload, _Judge)]
        for i, judged in zip(judges, self._judge([batch[i].payload for i in judges])):
            results[i] = judged
        for i, work in enumerate(batch):
            if isinstance(work.payload, _Generate):
                results[i] = self._generate(work.payload)
        return results

    def _logprob_result(self, choices: Choices, row: np.ndarray) -> VerifyResult | ItemError:
        if not np.all(np.isfinite(row)):
            return ItemError("the model produced non-finite logits")
        probs = choices.probabilities(row)
        best = int(np.argmax(probs))
        return VerifyResult(
            score=choices.score(probs),
            verdict=choices.names[best],
            probabilities=dict(zip(choices.names, probs)),
        )

    def _generate(self, job: _Generate) -> VerifyResult | ItemError:
        o = job.options
        texts = self.backend.generate(job.prompt, n=o.n, temperature=o.temperature, top_p=o.top_p,
                                      max_new_tokens=o.max_new_tokens, seed=o.seed)
        samples = []
        for text in texts:
            try:
                verdict = job.template.parse(job.template.prefill + text)
                samples.append(VerifySample(text=text, score=verdict.score, verdict=verdict.verdict))
            except ParseError:
                samples.append(VerifySample(text=text))
        valid = [s for s in samples if s.score is not None]
        if not valid:
            return ItemError(f"no verdict could be parsed from {len(samples)} sample(s)")
        return VerifyResult(
            score=sum(s.score for s in valid) / len(valid),
            verdict=valid[0].verdict,
            rationale=valid[0].text,
            samples=samples,
        )

    def _judge(self, jobs: list[_Judge]) -> list[list[VerifyResult | ItemError]]:
        """Each job's criteria. The uncached ones of all jobs are read together through
        prefix.read_units: one packed row, one engine read (vLLM), or each prefix once on
        its KV cache, as the backend does best."""
        # Cached rows hold the logits of each criterion's own choices, as logprob's do.
        rows = [[self.cache.get(k) for k in job.keys] for job in jobs]
        todo = [[i for i, row in enumerate(own) if row is None] for own in rows]
        reading = [(job, own, ids) for job, own, ids in zip(jobs, rows, todo) if ids]
        if reading:
            token_ids = sorted({t for job, _, ids in reading for i in ids for t in job.choices[i].token_ids})
            column = {t: k for k, t in enumerate(token_ids)}
            units = [Work(0, SharedUnit(job.prefix, [], [job.suffixes[i] for i in ids])) for job, _, ids in reading]
            # Every unit is shared: read_units needs no sequence of plain work (None).
            for (job, own, ids), fresh in zip(reading, read_units(self.backend, units, None, token_ids)):
                for i, (row,) in zip(ids, fresh):
                    own[i] = row[[column[t] for t in job.choices[i].token_ids]]
                    self.cache.put(job.keys[i], own[i])
        return [[self._logprob_result(c, row) for c, row in zip(job.choices, own)] for job, own in zip(jobs, rows)]
