"""Rewards per token of the policy's own tokenization, from a /v1/score/steps result.

Trainers consume a reward per response token (verl's ``reward_tensor``, OpenRLHF's
token-level rewards); the service answers a reward per step with the step's character
span. ``token_rewards`` puts each step's reward on the last token that overlaps the
step's span (``spread="last"``), or shares it equally among every token that overlaps
it (``spread="uniform"``), and an outcome reward on the last token. The tokens' places
in the text come from the tokenizer itself: the ids are decoded piece by piece (as vLLM
detokenizes while it streams), checked to rebuild the decoded response exactly, and
where they do not (a tokenizer whose pieces decode differently alone), from decoding
every prefix, which is exact and slower.

A token covers the characters the ids up to it are the first to decode to. A token that
completes no character (the first bytes of a character split over several tokens)
covers none and sits between its neighbours; a character's reward lands on the token
that completes it.

Only the tokenizer's ``decode``, ``convert_ids_to_tokens``, ``convert_tokens_to_string``
and ``all_special_ids`` are used: any transformers tokenizer, and no import of it here.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any, Literal

Spread = Literal["last", "uniform"]
# The exact placing decodes every prefix: quadratic in the tokens, so bounded.
MAX_PREFIX_DECODES = 8192


def token_rewards(
    result: Any,
    tokenizer: Any,
    token_ids: Sequence[int],
    *,
    spread: Spread = "last",
    outcome: float | None = None,
    response: str | None = None,
) -> list[float]:
    """One reward per id of ``token_ids`` (the policy's response, special tokens such as
    EOS included): ``result``'s step rewards (its ``step_rewards`` when the request asked
    for shaping, else its ``step_scores``; unscored steps add nothing) placed by
    ``spread``, plus ``outcome`` on the last token. ``result`` is a StepsResult or its
    JSON. ``response``: the text the spans index, checked against the ids' decoding
    (skip_special_tokens), which is otherwise taken to be it.

    ValueError where the spans cannot be in these ids' text: a span past its end, or
    spans in several messages (``steps_from: turns``). Spans in one message (the final
    assistant turn split on a separator) index that message's text."""
    ids = [int(i) for i in token_ids]
    vocabulary = len(tokenizer)
    wrong = next((i for i in ids if not 0 <= i < vocabulary), None)
    if wrong is not None:
        raise ValueError(f"token id {wrong} is not in the tokenizer's {vocabulary} ids")
    rewards, spans = _steps_of(result)
    text = tokenizer.decode(ids, skip_special_tokens=True)
    if response is not None and response != text:
        raise ValueError(
            f"the token ids decode to {len(text)} characters that are not the response's {len(response)}: "
            "were these the ids of this response, decoded with skip_special_tokens?"
        )
    out = [0.0] * len(ids)
    placed = [(r, s, e) for r, (s, e) in zip(rewards, spans) if r is not None]
    if not ids:
        if placed or outcome:
            raise ValueError("no token ids to put the rewards on")
        return out
    for _, start, end in placed:
        if end > len(text) or start > end:
            raise ValueError(f"a step's span [{start}, {end}) is not in the {len(text)} characters the ids decode to")
    where = _Positions(tokenizer, ids, text)
    for reward, start, end in placed:
        last = where.completing(max(end, 1))
        if spread == "last":
            out[last] += reward
            continue
        first = min(where.after(start), last)
        share = reward / (last - first + 1)
        for k in range(first, last + 1):
            out[k] += share
    if outcome is not None:
        out[-1] += outcome
    return out


def token_ends(tokenizer: Any, token_ids: Sequence[int], text: str) -> list[int]:
    """Where each id's token ends in ``text``, the characters the ids up to it are the
    first to decode to (as ``token_rewards`` places them). ValueError where the ids do
    not decode (skip_special_tokens) to ``text``."""
    ids = [int(i) for i in token_ids]
    decoded = tokenizer.decode(ids, skip_special_tokens=True)
    if decoded != text:
        raise ValueError(f"the token ids decode to {len(decoded)} characters that are not the response's {len(text)}")
    return _Positions(tokenizer, ids, text).ends if ids else []


def _steps_of(result: Any) -> tuple[list[float | None], list[tuple[int, int]]]:
    data = result if isinstance(result, Mapping) else result.model_dump()
    rewards = data.get("step_rewards")
    if rewards is None:
        rewards = data.get("step_scores") or []
    spans = data.get("spans") or []
    if len(spans) != len(rewards):
        raise ValueError(f"{len(rewards)} step rewards but {len(spans)} spans")
    if len({span.get("message") for span in spans}) > 1:
        raise ValueError(
            "token rewards need the steps of one response text; these spans are in several messages (steps_from: turns)"
        )
    return list(rewards), [(int(span["start"]), int(span["end"])) for span in spans]


class _Positions:
    """Where the ids' tokens fall in ``text``: ``completing(c)``, the first token whose
    decoding reaches c characters (the one that completes character c - 1);
    ``after(c)``, the first token that reaches past c characters."""

    def __init__(self, tokenizer: Any, ids: list[int], text: str):
        self.ends = _piece_ends(tokenizer, ids, text) or _prefix_ends(tokenizer, ids, text)

    def completing(self, c: int) -> int:
        return min(bisect.bisect_left(self.ends, c), len(self.ends) - 1)

    def after(self, c: int) -> int:
        return min(bisect.bisect_right(self.ends, c), len(self.ends) - 1)


def _prefix_ends(tokenizer: Any, ids: list[int], text: str) -> list[int]:
    """Each token's end in ``text`` the exact way: the most characters of ``text`` that
    any prefix of the ids up to it decodes to (a decoder may garble a character it has
    already given while a later one is incomplete: it counts as given). A decode per
    token, so only where ``_piece_ends`` cannot say, and for at most
    MAX_PREFIX_DECODES tokens."""
    if len(ids) > MAX_PREFIX_DECODES:
        raise ValueError(
            f"this tokenizer's pieces do not rebuild the response, and placing its {len(ids)} tokens the "
            f"exact way (a decode per token) is bounded to {MAX_PREFIX_DECODES}"
        )
    ends: list[int] = []
    best = 0
    for k in range(len(ids)):
        best = max(best, _common_prefix(tokenizer.decode(ids[: k + 1], skip_special_tokens=True), text))
        ends.append(best)
    return ends


def _piece_ends(tokenizer: Any, ids: list[int], text: str) -> list[int] | None:
    """Each token's end in ``text``, decoding a short window of pieces at a time (vLLM's
    incremental detokenization); None where the pieces do not rebuild ``text``."""
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    pieces = tokenizer.convert_ids_to_tokens(ids)
    kept: list[str] = []
    ends: list[int] = []
    emitted = prefix = read = 0
    for token_id, piece in zip(ids, pieces):
        if token_id in special:
            ends.append(emitted)
            continue
        kept.append(piece)
        before = tokenizer.convert_tokens_to_string(kept[prefix:read]) if read > prefix else ""
        now = tokenizer.convert_tokens_to_string(kept[prefix:])
        if len(now) > len(before) and not now.endswith("\ufffd"):
            if not now.startswith(before):
                return None
            added = now[len(before) :]
            if text[emitted : emitted + len(added)] != added:
                return None
            emitted += len(added)
            prefix, read = read, len(kept)
        ends.append(emitted)
    return ends if emitted == len(text) else None


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    low, high = 0, n
    while low < high:  # the longest equal prefix, by halving
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low
