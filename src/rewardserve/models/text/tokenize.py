"""vLLM's /tokenize with a model's own tokenizer (RewardModel.tokenize): a prompt as it is,
or messages through the chat template (its text as the template writes it, BOS included;
nothing stripped). A text longer than the model's context could hold
(``MAX_CHARS_PER_TOKEN`` characters a token) is a 413 before it is tokenized."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rewardserve.models.errors import ItemError, RequestError
from rewardserve.models.text.chat import MAX_CHARS_PER_TOKEN, message_dicts
from rewardserve.protocol import Message


@dataclass(frozen=True)
class Tokenized:
    """A text's token ids with a model's tokenizer."""

    ids: list[int]
    max_model_len: int  # the model's context in tokens (0: unknown)
    token_strs: list[str] | None = None


def tokenize(
    tok: Any,
    max_tokens: int | None,
    prompt: str | None,
    messages: list[Message] | None,
    *,
    name: str,
    add_special_tokens: bool,
    add_generation_prompt: bool,
    continue_final_message: bool,
    token_strs: bool,
) -> Tokenized:
    context = max_tokens or tokenizer_limit(tok)
    if messages is not None:
        text = _rendered(tok, messages, name, add_generation_prompt, continue_final_message)
        field = "messages"
    else:
        assert prompt is not None, "a prompt or messages"
        text, field = prompt, "prompt"
    if context and len(text) > context * MAX_CHARS_PER_TOKEN:
        raise RequestError(
            f"{field} has {len(text)} characters, more than this model's context of {context} tokens can hold",
            param=field,
            type="payload_too_large",
        )
    ids = [int(t) for t in tok(text, add_special_tokens=add_special_tokens)["input_ids"]]
    strs = [str(s) for s in tok.convert_ids_to_tokens(ids)] if token_strs else None
    return Tokenized(ids=ids, max_model_len=context or 0, token_strs=strs)


def _rendered(
    tok: Any, messages: list[Message], name: str, add_generation_prompt: bool, continue_final_message: bool
) -> str:
    if getattr(tok, "chat_template", None) is None:
        raise RequestError(f"model {name!r}'s tokenizer has no chat template", param="messages")
    try:
        chat = message_dicts(messages)
    except ItemError as exc:
        raise RequestError(f"messages: {exc}", param="messages") from None
    try:
        text: str = tok.apply_chat_template(
            chat,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
        )
    except Exception as exc:  # the template refuses these messages (roles, order)
        raise RequestError(
            f"messages: the chat template cannot render them: {type(exc).__name__}: {exc}"[:500],
            param="messages",
        ) from None
    return text


def tokenizer_limit(tokenizer: Any) -> int | None:
    """The tokenizer's own ``model_max_length``, where it names a real one (transformers
    writes a huge sentinel when the checkpoint gives none)."""
    limit = getattr(tokenizer, "model_max_length", None)
    return limit if isinstance(limit, int) and 0 < limit < 10**8 else None
