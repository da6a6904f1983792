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
that completes it. Whether the ids so far end inside a character is read from the
tokens' bytes (a byte-level BPE's pieces, a SentencePiece byte fallback's <0xNN>), not
from a decoded U+FFFD: a response may hold a literal U+FFFD (a garbled byte the policy
emitted), which its first byte alone decodes to as well. Only for a tokenizer whose
pieces' bytes cannot be read does a trailing U+FFFD mean an unfinished character.

Only the tokenizer's ``decode``, ``convert_ids_to_tokens``, ``convert_tokens_to_string``,
``all_special_ids`` and its decoder's kind (``backend_tokenizer.decoder``, or a slow
tokenizer's ``byte_decoder`` / ``sp_model``) are used: any transformers tokenizer, and
no import of it here.
"""

from __future__ import annotations

import bisect
import codecs
import json
import re
from collections.abc import Callable, Mapping, Sequence
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
        whole = _whole_characters(tokenizer, ids)
        self.ends = _piece_ends(tokenizer, ids, text, whole) or _prefix_ends(tokenizer, ids, text, whole)

    def completing(self, c: int) -> int:
        return min(bisect.bisect_left(self.ends, c), len(self.ends) - 1)

    def after(self, c: int) -> int:
        return min(bisect.bisect_right(self.ends, c), len(self.ends) - 1)


def _prefix_ends(tokenizer: Any, ids: list[int], text: str, whole: list[bool] | None = None) -> list[int]:
    """Each token's end in ``text`` the exact way: the most characters of ``text`` that
    any prefix of the ids up to it decodes to (a decoder may garble a character it has
    already given while a later one is incomplete: it counts as given). A prefix that
    ends inside a character (``whole``, from the tokens' bytes) counts for nothing: its
    first byte alone decodes to U+FFFD, which may be the text's own. A decode per
    token, so only where ``_piece_ends`` cannot say, and for at most
    MAX_PREFIX_DECODES tokens."""
    if len(ids) > MAX_PREFIX_DECODES:
        raise ValueError(
            f"this tokenizer's pieces do not rebuild the response, and placing its {len(ids)} tokens the "
            f"exact way (a decode per token) is bounded to {MAX_PREFIX_DECODES}"
        )
    if whole is None:
        whole = _whole_characters(tokenizer, ids)
    ends: list[int] = []
    best = 0
    for k in range(len(ids)):
        if whole is None or whole[k]:
            best = max(best, _common_prefix(tokenizer.decode(ids[: k + 1], skip_special_tokens=True), text))
        ends.append(best)
    return ends


def _piece_ends(tokenizer: Any, ids: list[int], text: str, whole: list[bool] | None = None) -> list[int] | None:
    """Each token's end in ``text``, decoding a short window of pieces at a time (vLLM's
    incremental detokenization), the window's text taken where the ids end on a whole
    character (``whole``); None where the pieces do not rebuild ``text``."""
    if whole is None:
        whole = _whole_characters(tokenizer, ids)
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    pieces = tokenizer.convert_ids_to_tokens(ids)
    kept: list[str] = []
    ends: list[int] = []
    emitted = prefix = read = 0
    for k, (token_id, piece) in enumerate(zip(ids, pieces)):
        if token_id in special:
            ends.append(emitted)
            continue
        kept.append(piece)
        before = tokenizer.convert_tokens_to_string(kept[prefix:read]) if read > prefix else ""
        now = tokenizer.convert_tokens_to_string(kept[prefix:])
        ended = whole[k] if whole is not None else not now.endswith("\ufffd")
        if len(now) > len(before) and ended:
            if not now.startswith(before):
                return None
            added = now[len(before) :]
            if text[emitted : emitted + len(added)] != added:
                return None
            emitted += len(added)
            prefix, read = read, len(kept)
        ends.append(emitted)
    return ends if emitted == len(text) else None


def _whole_characters(tokenizer: Any, ids: list[int]) -> list[bool] | None:
    """For each token, whether the ids up to it end on a whole character of UTF-8 (no
    character's bytes begun and unfinished), read from the pieces' bytes; None where
    this tokenizer's pieces' bytes cannot be read. Bytes that can never finish a
    character are a garbled character, whole as soon as that is known (as decoding with
    errors='replace' gives them). A piece of text, not bytes, ends any bytes before it."""
    read = _byte_reader(tokenizer)
    if read is None:
        return None
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    out: list[bool] = []
    for token_id, piece in zip(ids, tokenizer.convert_ids_to_tokens(ids)):
        data = None if token_id in special or not isinstance(piece, str) else read(piece)
        if data is None:
            utf8.reset()
        else:
            utf8.decode(data)
        out.append(not utf8.getstate()[0])
    return out


_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _byte_reader(tokenizer: Any) -> Callable[[str], bytes | None] | None:
    """How a piece's bytes are read, by the tokenizer's decoder: a byte-level BPE spells
    every byte as one printable character (GPT-2's table); a byte fallback spells a byte
    no piece covers as <0xNN> and other pieces are whole characters. None where the
    decoder is neither. A reader gives None for a piece that is text (an added token
    outside the byte table)."""
    kinds: set[str] = set()
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None)
    if decoder is not None:
        _decoder_kinds(json.loads(decoder.__getstate__()), kinds)
    table: Mapping[str, int] | None = getattr(tokenizer, "byte_decoder", None)
    if "ByteLevel" in kinds or (decoder is None and isinstance(table, Mapping)):
        byte_of = table if isinstance(table, Mapping) else _byte_level_table()

        def byte_level(piece: str) -> bytes | None:
            try:
                return bytes(byte_of[c] for c in piece)
            except KeyError:
                return None

        return byte_level
    if "ByteFallback" in kinds or (decoder is None and getattr(tokenizer, "sp_model", None) is not None):

        def byte_fallback(piece: str) -> bytes | None:
            match = _BYTE_PIECE.fullmatch(piece)
            return bytes([int(match.group(1), 16)]) if match else None

        return byte_fallback
    return None


def _decoder_kinds(spec: Any, kinds: set[str]) -> None:
    if isinstance(spec, Mapping):
        if isinstance(spec.get("type"), str):
            kinds.add(spec["type"])
        for value in spec.values():
            _decoder_kinds(value, kinds)
    elif isinstance(spec, list):
        for value in spec:
            _decoder_kinds(value, kinds)


def _byte_level_table() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character to byte: printable Latin-1 bytes stand for
    themselves, the others for the characters from U+0100 up in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + extra)] = b
            extra += 1
    return table


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
