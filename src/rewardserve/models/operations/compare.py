"""Pairwise and listwise preference (/v1/compare).

From a scoring model: each response scored alone, then Bradley-Terry,
P(i better than j) = sigmoid(s_i - s_j). From a judge: the judge reads every ordered
pair (A, B); each order's P(A) is averaged with the other order's P(B), so the position a
response is shown in cannot bias the result.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rewardserve.models.cache import LRUCache
from rewardserve.models.errors import ItemError
from rewardserve.models.plan import PeerLookup, Plan, Unit, UnitOutput, then
from rewardserve.protocol import CompareItem, CompareOptions, CompareResult, Item, ItemResult, ScoreOptions

if TYPE_CHECKING:
    from rewardserve.models.kinds.verifier import VerifierModel
    from rewardserve.models.reward_model import RewardModel


def _preference_result(item_id: str | None, scores: list[float], preference: list[list[float]]) -> CompareResult:
    ranking = sorted(range(len(scores)), key=lambda i: -scores[i])
    return CompareResult(id=item_id, scores=scores, preference=preference, ranking=ranking)


def bradley_terry(scores: list[float]) -> list[list[float]]:
    return [
        [1.0 / (1.0 + math.exp(scores[j] - scores[i])) if i != j else 0.5 for j in range(len(scores))]
        for i in range(len(scores))
    ]


def compare_by_scores(
    model: RewardModel, items: list[CompareItem], cache: LRUCache | None, peers: PeerLookup | None = None
) -> Plan[CompareResult]:
    flat = [Item(prompt=it.prompt, response=r, reference=it.reference) for it in items for r in it.responses]
    scoring = model.plan_score(flat, ScoreOptions(), cache, peers)

    def preferences(scored: list[ItemResult]) -> list[CompareResult]:
        results, at = [], 0
        for item in items:
            chunk: list[ItemResult] = scored[at : at + len(item.responses)]
            at += len(item.responses)
            bad = [r.error for r in chunk if not r.valid]
            if bad:
                results.append(CompareResult(id=item.id, valid=False, error=bad[0]))
                continue
            scores = [r.score for r in chunk if r.score is not None]
            results.append(_preference_result(item.id, scores, bradley_terry(scores)))
        return results

    def finish(outputs: list[UnitOutput], values: list[Any]) -> list[CompareResult] | Plan[CompareResult]:
        return then(scoring.finish(outputs, values), preferences)

    return Plan(
        units=scoring.units,
        finish=finish,
        calls=scoring.calls,
        prompt_tokens=scoring.prompt_tokens,
        cached_tokens=scoring.cached_tokens,
        cache_hits=scoring.cache_hits,
        cache_misses=scoring.cache_misses,
        deduplicated=scoring.deduplicated,
        scored_items=len(flat),
        parts=scoring.parts,
    )


def compare_by_judge(judge: VerifierModel, items: list[CompareItem], options: CompareOptions) -> Plan[CompareResult]:
    from rewardserve.models.text.judge_templates import item_variables

    template_name = options.template or "prometheus_relative"

    def pairs_of(item: CompareItem) -> tuple[list[tuple[int, int]], Unit[Any]]:
        template = judge.template(template_name)
        base = Item(prompt=item.prompt, response=item.responses[0], reference=item.reference)
        variables = item_variables(base, {"responses": item.responses, **options.variables})
        prefill = template.logprob_prefill if template.logprob_prefill is not None else template.prefill
        n = len(item.responses)
        pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
        prompts = [
            judge.encode_prompt(
                template, {**variables, "response_a": item.responses[i], "response_b": item.responses[j]}, prefill
            )
            for i, j in pairs
        ]
        choices = judge.template_choices(template)
        return pairs, judge.prepare_judge(prompts, [choices] * len(prompts))

    planned: list[tuple[list[tuple[int, int]], Unit[Any]] | ItemError] = []
    for item in items:
        try:
            planned.append(pairs_of(item))
        except ItemError as exc:
            planned.append(exc)
    units = [p[1] for p in planned if not isinstance(p, ItemError)]

    def finish(outputs: list[UnitOutput], _values: list[Any]) -> list[CompareResult]:
        produced = iter(outputs)
        results = []
        for item, plan in zip(items, planned):
            if isinstance(plan, ItemError):
                results.append(CompareResult(id=item.id, valid=False, error=str(plan)))
                continue
            pairs, _ = plan
            verdicts = next(produced)
            bad = [v for v in verdicts if isinstance(v, ItemError)]
            if bad:
                results.append(CompareResult(id=item.id, valid=False, error=str(bad[0])))
                continue
            n = len(item.responses)
            p_first = {pair: v.score for pair, v in zip(pairs, verdicts)}  # P(A) = P(i better)
            preference = [
                [0.5 if i == j else (p_first[(i, j)] + 1.0 - p_first[(j, i)]) / 2.0 for j in range(n)] for i in range(n)
            ]
            scores = [sum(preference[i][j] for j in range(n) if j != i) / (n - 1) for i in range(n)]
            result = _preference_result(item.id, scores, preference)
            result.first_shown = [[0.5 if i == j else p_first[(i, j)] for j in range(n)] for i in range(n)]
            results.append(result)
        return results

    return Plan(units=units, finish=finish, prompt_tokens=sum(u.length for u in units))
