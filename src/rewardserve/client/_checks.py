"""Checking a list endpoint's answer against what was sent, before a trainer reads it.

A trainer pairs each reward with a completion: a reward put on the wrong completion is
worse than no reward. So every chunk is sent with ids that tell its items apart (the
caller's own where they already do), and the results are put back by id, not by
position: a result for an item not sent, a repeated or missing one, or a count that
differs is an ``APIResponseValidationError``, as are a body that does not parse and a
result marked valid whose score is not a finite number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from rewardserve.client.errors import APIResponseValidationError

M = TypeVar("M", bound=BaseModel)
_TAG = "rs-"  # the ids the client makes for items that have none (or share one)


def with_distinct_ids(items: Sequence[M]) -> tuple[list[M], list[str], list[Any]]:
    """The items to send (each with an id of its own), those ids, and the ids the
    caller gave (restored on the results)."""
    given = [getattr(item, "id", None) for item in items]
    named = [i for i in given if isinstance(i, str)]
    if len(named) == len(given) and len(set(named)) == len(named):
        return list(items), named, given
    tags = [f"{_TAG}{k}" for k in range(len(items))]
    return [item.model_copy(update={"id": tag}) for item, tag in zip(items, tags)], tags, given


def parsed(response_cls: type[M], content: bytes, what: str) -> M:
    try:
        return response_cls.model_validate_json(content)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise APIResponseValidationError(
            f"{what}: the service's answer is not valid: {where}: {first.get('msg')}"
        ) from None


def in_sent_order(results: Sequence[Any], sent: list[str], given: list[Any], what: str) -> list[Any]:
    """``results`` in the order of ``sent`` ids, each with the caller's id back."""
    if len(results) != len(sent):
        raise APIResponseValidationError(f"{what}: the service returned {len(results)} results for {len(sent)} items")
    position = {rid: k for k, rid in enumerate(sent)}
    ordered: list[Any] = [None] * len(sent)
    for result in results:
        rid = getattr(result, "id", None)
        k = position.get(rid, -1) if isinstance(rid, str) else -1
        if k < 0 or ordered[k] is not None:
            raise APIResponseValidationError(
                f"{what}: the service returned a result for id {rid!r}, which "
                f"{'was answered twice' if k >= 0 else 'matches no item sent'}"
            )
        _check_score(result, what)
        ordered[k] = result if result.id == given[k] else result.model_copy(update={"id": given[k]})
    return ordered


def _check_score(result: Any, what: str) -> None:
    """A valid result's score (or a compare result's scores) must be finite numbers."""
    if not getattr(result, "valid", False):
        return
    fields = type(result).model_fields
    scores = [result.score] if "score" in fields else list(result.scores or []) if "scores" in fields else []
    for score in scores:
        if not isinstance(score, (int, float)) or not math.isfinite(score):
            raise APIResponseValidationError(
                f"{what}: the result for id {result.id!r} is marked valid but its "
                f"score is {score!r}, not a finite number"
            )
