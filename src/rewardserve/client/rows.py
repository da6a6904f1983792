"""Turning a trainer's (prompt, completion, columns) into rewardserve items."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from rewardserve.protocol import Item

# Keyword arguments trainers pass that are not dataset columns.
_NOT_COLUMNS = {"trainer_state", "log_extra", "log_metric", "environments", "completion_ids"}


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def make_item(
    prompt: Any,
    completion: Any,
    reference: Any = None,
    columns: Mapping[str, Any] | None = None,
    group_id: str | None = None,
) -> Item:
    """A TRL-style prompt / completion pair (plain strings, or conversational message
    lists) as an item; other dataset columns travel as metadata, for templates."""
    metadata = {k: v for k, v in (columns or {}).items() if k not in _NOT_COLUMNS and _jsonable(v)}
    common = {"reference": reference, "metadata": metadata or None, "group_id": group_id}
    if isinstance(completion, list):  # conversational: a list of messages
        messages = (list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": prompt}]) + completion
        return Item.model_validate({"messages": messages, **common})
    return Item.model_validate({"prompt": prompt, "response": completion, **common})


def prompt_group(prompt: Any) -> str:
    """A group id for a prompt: trainers (TRL's GRPO, the included loop) send each prompt's
    completions together, and GRPO's groups are exactly the completions of one prompt."""
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)
    return "p-" + hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def column_rows(kwargs: Mapping[str, Any], n: int) -> list[dict[str, Any]]:
    """Per-row dicts from TRL's column lists (``{"answer": [...], ...}``)."""
    rows: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, values in kwargs.items():
        if key in _NOT_COLUMNS or not isinstance(values, list) or len(values) != n:
            continue
        for row, value in zip(rows, values):
            row[key] = value
    return rows


def split_query(query: str, prompt: str | None) -> tuple[str | None, str]:
    """OpenRLHF's query is prompt + response: the response is what follows the prompt."""
    if prompt and query.startswith(prompt):
        return prompt, query[len(prompt) :]
    return prompt, query
