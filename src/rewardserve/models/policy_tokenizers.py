"""The policies' tokenizers the service was started with (settings policy_tokenizers),
and /v1/score/steps' rewards per token of an item's response_token_ids: the client's own
``token_rewards`` (rewardserve.client.token_alignment), so that both paths give the same
numbers."""

from __future__ import annotations

import logging
from typing import Any

from rewardserve.client.token_alignment import Spread, token_rewards
from rewardserve.protocol import Item, StepsResult

log = logging.getLogger(__name__)


class PolicyTokenizers:
    """Loaded once (``load``, off the event loop); a name that did not load keeps its
    error, to be named to a request that asks for it."""

    def __init__(self, sources: dict[str, str]):
        self.sources = dict(sources)
        self.loaded: dict[str, Any] = {}
        self.errors: dict[str, str] = {}

    def load(self) -> None:
        from transformers import AutoTokenizer

        for name, source in self.sources.items():
            try:
                self.loaded[name] = AutoTokenizer.from_pretrained(source)
            except Exception as exc:  # noqa: BLE001 - a missing directory, a hub id offline: said per request
                self.errors[name] = f"{type(exc).__name__}: {exc}"[:500]
                log.error("policy tokenizer %s (%s) did not load: %s", name, source, self.errors[name])

    def problem(self, name: str) -> str | None:
        """Why ``name`` cannot be used, or None."""
        if name in self.loaded:
            return None
        if name in self.errors:
            return f"policy tokenizer {name!r} did not load: {self.errors[name]}"
        if name in self.sources:
            return f"policy tokenizer {name!r} is still loading"
        known = ", ".join(sorted(self.sources)) or "none (the setting policy_tokenizers names them)"
        return f"unknown policy tokenizer {name!r}; known: {known}"


def response_text(item: Item, result: StepsResult) -> str:
    """The text the result's spans index: the response, the steps joined, or the
    message the steps were split from."""
    message = result.spans[0].message if result.spans else None
    if message is not None and item.messages is not None:
        return item.messages[message].text()
    if item.response is not None:
        return item.response
    return "".join(item.steps or [])


def with_token_rewards(
    items: list[Item], results: list[StepsResult], tokenizer: Any, spread: Spread
) -> list[StepsResult]:
    """Each valid result with its ``token_rewards``; an item whose ids cannot carry them
    (none given, or ids that do not decode to its response) becomes invalid, saying why."""
    out = []
    for item, result in zip(items, results):
        if not result.valid or result.token_rewards is not None:  # a kind that scored these ids gave its own
            out.append(result)
            continue
        if item.response_token_ids is None:
            out.append(_invalid(result, "options.policy_tokenizer needs the item's response_token_ids"))
            continue
        try:
            rewards = token_rewards(
                result, tokenizer, item.response_token_ids, spread=spread, response=response_text(item, result)
            )
        except ValueError as exc:
            out.append(_invalid(result, f"response_token_ids: {exc}"))
            continue
        out.append(result.model_copy(update={"token_rewards": rewards}))
    return out


def _invalid(result: StepsResult, why: str) -> StepsResult:
    return result.model_copy(update={"valid": False, "error": why, "score": None})
