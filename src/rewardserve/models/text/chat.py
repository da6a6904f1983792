"""Turning items into token ids the way model cards do it.

The reference recipe of chat reward models (Skywork-Reward-V2's card, for one):

    text = tokenizer.apply_chat_template(conversation, tokenize=False)
    if tokenizer.bos_token and text.startswith(tokenizer.bos_token):
        text = text[len(tokenizer.bos_token):]        # the tokenizer adds BOS again
    ids = tokenizer(text)["input_ids"]

Everything here follows that recipe so served scores equal the card's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rewardserve.models.errors import ItemError, RequestError
from rewardserve.protocol import Item, Message

if TYPE_CHECKING:
    from rewardserve.models.backends.backend import Backend


def message_dicts(messages: list[Message], *, images: bool = False) -> list[dict[str, Any]]:
    """Messages as chat templates expect them. Text-only models get string content;
    an image sent to them is an item error, not a silently dropped part."""
    out = []
    for message in messages:
        if message.has_images() and not images:
            raise ItemError("this model does not accept images")
        d = message.model_dump(exclude_none=True)
        if not images:
            d["content"] = message.text()
        out.append(d)
    return out


def render_chat(
    tokenizer: Any, messages: list[Message], *, strip_bos: bool = True, add_generation_prompt: bool = False
) -> str:
    if tokenizer.chat_template is None:
        raise ItemError("the model's tokenizer has no chat template")
    text: str = tokenizer.apply_chat_template(
        message_dicts(messages), tokenize=False, add_generation_prompt=add_generation_prompt
    )
    bos = tokenizer.bos_token
    if strip_bos and bos and text.startswith(bos):
        text = text[len(bos) :]
    return text


def split_pair(item: Item) -> tuple[str, str]:
    """(question, answer) for text-pair classifiers: every turn before the final
    assistant turn, then that turn."""
    turns = item.conversation()
    return "\n".join(m.text() for m in turns[:-1]), turns[-1].text()


# No tokenizer we serve averages more characters per token than this over a text, so a
# text longer than max_tokens * MAX_CHARS_PER_TOKEN cannot fit and is not tokenized whole
# (byte-level BPE on a long run without spaces costs far more than linear time).
MAX_CHARS_PER_TOKEN = 32


def fit_text(text: str, max_tokens: int, truncate: str, *, index: int, field: str = "items") -> str:
    """Before tokenizing: a text that cannot fit is a 413 (``truncate: error``) or cut
    at the character level from the end truncation would drop, far enough out that the
    tokens truncation keeps are the same."""
    limit = max_tokens * MAX_CHARS_PER_TOKEN
    if len(text) <= limit:
        return text
    if truncate == "right":
        return text[:limit]
    if truncate == "left":
        return text[len(text) - limit :]
    raise RequestError(
        f"{field}[{index}] has {len(text)} characters, more than this model's limit of {max_tokens} "
        f"tokens can hold; shorten it or send options.truncate = 'left' or 'right'",
        param=f"{field}[{index}]",
        type="payload_too_large",
    )


def fit_length(
    ids: list[int], max_tokens: int, truncate: str, *, index: int, bos_id: int | None
) -> tuple[list[int], bool]:
    """Enforce the model's length limit: 413 naming the item, or cut from one end."""
    if len(ids) <= max_tokens:
        return ids, False
    if truncate == "right":
        return ids[:max_tokens], True
    if truncate == "left":
        # Keep a leading BOS: the model never saw text without it.
        keep_bos = bos_id is not None and ids and ids[0] == bos_id
        head = ids[:1] if keep_bos else []
        return head + ids[len(ids) - (max_tokens - len(head)) :], True
    raise RequestError(
        f"items[{index}] has {len(ids)} tokens, over this model's limit of {max_tokens}; "
        "shorten it or send options.truncate = 'left' or 'right'",
        param=f"items[{index}]",
        type="payload_too_large",
    )


def readout_position(ids: list[int], pad_token_id: int | None) -> int:
    """Where sequence classifiers read: the rightmost token that is not the pad token
    (transformers' own rule, which falls back to 0), or the last token without a pad."""
    if pad_token_id is None:
        return len(ids) - 1
    for pos in range(len(ids) - 1, -1, -1):
        if ids[pos] != pad_token_id:
            return pos
    return 0


def rendered_ids(
    backend: Backend,
    item: Item,
    index: int,
    truncate: str,
    *,
    add_special_tokens: bool = False,
    keep: int | None = None,
) -> tuple[list[int], bool]:
    """A pre-rendered item's token ids: ``input_ids`` as sent (each checked against the
    vocabulary), or ``text`` tokenized as it is, without adding special tokens unless
    asked (the caller wrote them into the text); at most ``keep`` tokens, cut from the
    end ``truncate`` names ("right", else the start). Whether a cut was made; the model's
    own limit is the caller's (fit_length)."""
    # Under a token budget a long text is cut (from the end the budget drops), not refused.
    side = ("right" if truncate == "right" else "left") if keep else truncate
    ids = _rendered_ids(backend, item, index, side, add_special_tokens)
    if keep is None or len(ids) <= keep:
        return ids, False
    return (ids[:keep] if truncate == "right" else ids[len(ids) - keep :]), True


def _rendered_ids(backend: Backend, item: Item, index: int, truncate: str, add_special_tokens: bool) -> list[int]:
    if item.input_ids is not None:
        for position, token in enumerate(item.input_ids):
            if token >= backend.vocab_size:
                raise RequestError(
                    f"items[{index}].input_ids[{position}] is {token}, outside this model's vocabulary "
                    f"of {backend.vocab_size} tokens",
                    param=f"items[{index}].input_ids[{position}]",
                )
        return list(item.input_ids)
    assert item.text is not None, "a pre-rendered item has text or input_ids"
    text = fit_text(item.text, backend.max_tokens, truncate, index=index)
    return list(backend.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])
