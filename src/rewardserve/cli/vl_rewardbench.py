"""VL-RewardBench (HF MMInstruction/VL-RewardBench, split "test"; the authors' code
vl-rewardbench/VL_RewardBench@9b10abd, cal.py) for ``rewardserve eval --format
vl-rewardbench``.

A row is ``{id, query, image, response: [two], human_ranking}``, ``human_ranking[k]``
the rank of response k (0: preferred). The image is a ``data:`` URL, or the dataset's
own ``{"bytes": ...}`` with the bytes in base64 (as a parquet row exported to JSON).
Each response is scored with the image and the query as the user turn; the row is right
when the preferred response scores strictly higher (a tie decides nothing, so it is
wrong: a reward model has no unparsed answer to leave out).

The group comes from the id's prefix, the text before its first ``_`` or ``-``, matched
whole as cal.py matches it: RLAIF, RLHF and hallucination (POVID) are hallucination, mathverse and
mmmu reasoning, anything else (wildvision, VLFeedback) general. Overall accuracy pools
the rows; the macro accuracy is the mean of the three groups' accuracies.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
from collections import defaultdict
from typing import Any

GROUPS = ("general", "hallucination", "reasoning")
_PREFIX_GROUPS = {
    "RLAIF": "hallucination",
    "RLHF": "hallucination",
    "hallucination": "hallucination",
    "mathverse": "reasoning",
    "mmmu": "reasoning",
}


def group_of(row_id: Any) -> str:
    """cal.py's reading: the whole prefix, matched exactly (case too)."""
    prefix = re.split(r"[_-]", str(row_id or ""), maxsplit=1)[0]
    return _PREFIX_GROUPS.get(prefix, "general")


def image_url(image: Any, number: int) -> str:
    """The row's image as a ``data:`` URL the service reads; ValueError naming the line
    for an image that is not one, or does not decode."""
    if isinstance(image, str) and image.startswith("data:image/") and ";base64," in image:
        encoded = image.split(";base64,", 1)[1]
    elif isinstance(image, dict) and isinstance(image.get("bytes"), str):
        encoded = image["bytes"]
    else:
        raise ValueError(f"line {number}: 'image' is a data:image/...;base64 URL or {{'bytes': base64}}")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"line {number}: the image is not base64") from None
    _decodes(raw, number)
    if isinstance(image, str):
        return image
    return "data:image/png;base64," + base64.b64encode(raw).decode("ascii")


def _decodes(raw: bytes, number: int) -> None:
    try:
        from PIL import Image
    except ImportError:  # a client-only install: the service says so for the row
        return
    try:
        with Image.open(io.BytesIO(raw)) as image:
            image.verify()
    except Exception as exc:  # noqa: BLE001 - any reason PIL has: the row is not scored
        raise ValueError(f"line {number}: the image does not decode ({type(exc).__name__})") from None


def checked(row: dict[str, Any], number: int) -> str:
    """The row's image as the URL to send; ValueError naming the line for a row that is
    not VL-RewardBench's."""
    for key in ("query", "image", "response", "human_ranking"):
        if key not in row:
            raise ValueError(
                f"line {number}: no {key!r} (vl-rewardbench rows have id, query, image, response, human_ranking)"
            )
    responses, ranking = row["response"], row["human_ranking"]
    if not isinstance(responses, list) or len(responses) != 2 or not all(isinstance(r, str) for r in responses):
        raise ValueError(f"line {number}: 'response' is a list of two strings")
    if not isinstance(ranking, list) or ranking not in ([0, 1], [1, 0]):
        raise ValueError(f"line {number}: 'human_ranking' is [0, 1] or [1, 0]")
    if not isinstance(row["query"], str):
        raise ValueError(f"line {number}: 'query' is a string")
    return image_url(row["image"], number)


def items(row: dict[str, Any], number: int) -> list[dict[str, Any]]:
    """The two responses to score, the preferred one first."""
    url = checked(row, number)  # the image read and decoded once
    user = {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": row["query"]},
        ],
    }
    preferred = row["human_ranking"].index(0)
    ordered = [row["response"][preferred], row["response"][1 - preferred]]
    return [{"prompt": [user], "response": response} for response in ordered]


def vl_rewardbench(kept: list[tuple[dict[str, Any], list[float]]]) -> dict[str, Any]:
    right: dict[str, list[float]] = defaultdict(list)
    ties = 0
    for row, (preferred, other) in kept:
        right[group_of(row.get("id"))].append(1.0 if preferred > other else 0.0)
        ties += preferred == other
    groups = {name: sum(v) / len(v) for name, v in sorted(right.items())}
    decided = [c for v in right.values() for c in v]
    return {
        "subsets": groups,
        "counts": {name: len(v) for name, v in right.items()},
        "overall_accuracy": sum(decided) / len(decided) if decided else None,
        "ties": ties,
        # The macro accuracy, the mean of the groups, is the score (lmms-eval reports only it).
        "score": sum(groups.values()) / len(groups) if groups else None,
        "complete": set(groups) == set(GROUPS),
    }
