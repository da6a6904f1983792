"""What reward health and shadow scoring see of the routes whose answers are not one
served model's score per item: a rubric's aggregate reward (under ``RUBRIC``) and the
scores its ``model`` criteria got from their served models; a comparison's scores, one
per response, the responses of one item as one group."""

from __future__ import annotations

from collections.abc import Sequence

from rewardserve.protocol import CompareItem, CompareResult, Item, ItemResult, RubricRequest, RubricResult

RUBRIC = "rubric"  # the reward-health name of /v1/rubric's aggregate rewards


def criterion_scores(body: RubricRequest, results: Sequence[RubricResult]) -> dict[str, list[ItemResult]]:
    """Per served model a request-wide criterion reads, each item's score as that model
    gave it (the criterion's ``raw``); the first criterion of a model, if several."""
    scored: dict[str, list[ItemResult]] = {}
    for k, criterion in enumerate(body.criteria or []):
        if criterion.model is None or criterion.model in scored:
            continue
        column = []
        for result in results:
            got = result.criteria[k] if k < len(result.criteria) else None
            if got is None or not got.valid or got.raw is None:
                column.append(ItemResult(valid=False, error="not scored"))
            else:
                column.append(ItemResult(score=got.raw))
        scored[criterion.model] = column
    return scored


def response_items(
    items: Sequence[CompareItem], results: Sequence[CompareResult]
) -> tuple[list[Item], list[ItemResult]]:
    """Each compared response as an item with its score; an item's responses share a
    group. Items whose comparison failed are left out."""
    flat: list[Item] = []
    scores: list[ItemResult] = []
    for index, (item, result) in enumerate(zip(items, results)):
        if not result.valid or result.scores is None:
            continue
        group = item.id or f"compared-{index}"
        for response, score in zip(item.responses, result.scores):
            if isinstance(item.prompt, list):
                conversation = [*item.prompt, {"role": "assistant", "content": response}]
                flat.append(Item.model_validate({"messages": conversation, "group_id": group}))
            else:
                flat.append(Item(prompt=item.prompt, response=response, reference=item.reference, group_id=group))
            scores.append(ItemResult(score=score))
    return flat, scores
