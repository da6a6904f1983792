"""Turn-level advantages for tool-using completions in the GRPO loop (``turns``), as
MatchTIR's dual-level advantage estimation combines them (arXiv 2601.10712; its code,
quchangle1/MatchTIR ``compute_grpo_outcome_advantage``):

- a completion is split into assistant turns: at ``separator`` when one is given (a
  multi-turn rollout's turn marker), else after each ``<tool_call>{...}</tool_call>``
  block (a completion sampled whole); a turn's blocks are its calls, matched to the
  prompt's reference calls by the service (/v1/score/turns), which rewards each turn;
- a turn's return is its reward plus ``gamma`` times the next turn's return;
- a turn's advantage is its return normalised over the completions of its group that
  reached the same turn index ((G - mean) / (std + eps), the unbiased std; a turn only
  one completion reached keeps its raw return, as MatchTIR's code does);
- every token of turn k gets ``(1 - weight)`` x the completion's trajectory advantage
  plus ``weight`` x turn k's advantage (MatchTIR: 0.5 each).

A token belongs to the turn its characters end in (one that completes no character, with
the next token that does); the separator's tokens, and the EOS, to the turn that follows
them (the last one). A turn whose calls the service could not
read (``turn_errors``) has the reward of an unmatched call."""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Hashable, Sequence
from typing import Any

import torch

from rewardserve.client.token_alignment import token_ends
from rewardserve.protocol import Item, Message
from rewardserve.train.grpo.config import TurnSource

EPS = 1e-6
# The service's limit on a conversation's calls (models/operations/turns.py MAX_CALLS).
MAX_TURN_CALLS = 128
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def turn_spans(text: str, separator: str | None) -> list[tuple[int, int]]:
    """The characters of each assistant turn in a completion: the pieces between
    ``separator``s, or, without one, each ``<tool_call>`` block ending a turn (what
    follows the last one, a final answer, the last turn)."""
    if separator:
        spans, at = [], 0
        for piece in text.split(separator):
            spans.append((at, at + len(piece)))
            at += len(piece) + len(separator)
        return spans
    ends = [m.end() for m in _TOOL_CALL.finditer(text)]
    if not ends or text[ends[-1] :].strip():
        ends.append(len(text))
    ends[-1] = len(text)
    return list(zip([0, *ends[:-1]], ends))


def turn_calls(turn: str) -> list[dict[str, Any]]:
    """A turn's ``<tool_call>`` blocks as OpenAI tool calls. A block that is not a JSON
    call keeps its text as the arguments, which the service then cannot read: the turn
    gets no matched reward, and says why."""
    calls = []
    for block in _TOOL_CALL.findall(turn):
        try:
            call = json.loads(block)
        except json.JSONDecodeError:
            call = None
        if isinstance(call, dict) and isinstance(call.get("name"), str):
            arguments = call.get("arguments", call.get("parameters", {}))
            given = arguments if isinstance(arguments, str) else json.dumps(arguments)
            calls.append({"type": "function", "function": {"name": call["name"], "arguments": given}})
        else:
            calls.append({"type": "function", "function": {"name": "unreadable", "arguments": block}})
    return calls


def turns_item(prompt: Any, text: str, reference: Any, separator: str | None, item_id: str) -> Item:
    """The completion as a conversation for /v1/score/turns: the prompt, then one
    assistant message per turn with its calls."""
    messages = list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
    for start, end in turn_spans(text, separator):
        turn = text[start:end]
        messages.append({"role": "assistant", "content": turn, "tool_calls": turn_calls(turn) or None})
    return Item(id=item_id, messages=[Message.model_validate(m) for m in messages], reference=reference)


def turn_call_count(item: Item) -> int:
    return sum(len(m.tool_calls or []) for m in item.messages or [])


def turn_rewards(result: dict[str, Any] | None, n_turns: int, unmatched: float) -> list[float] | None:
    """The completion's own turns' rewards (its last ``n_turns`` assistant turns; a
    prompt's earlier ones are not its), None where the result is invalid."""
    if result is None or not result.get("valid", True):
        return None
    rewards = list(result.get("turn_rewards") or [])[-n_turns:]
    if len(rewards) != n_turns:
        return None
    return [unmatched if r is None else float(r) for r in rewards]


def returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """G_k = r_k + gamma * G_{k+1}."""
    out, running = [0.0] * len(rewards), 0.0
    for k in range(len(rewards) - 1, -1, -1):
        running = rewards[k] + gamma * running
        out[k] = running
    return out


def turn_level(per_completion: Sequence[list[float] | None], keys: Sequence[Hashable]) -> list[list[float] | None]:
    """Each turn's return normalised over its group's completions at the same turn index."""
    out: list[list[float] | None] = [None if g is None else [0.0] * len(g) for g in per_completion]
    for key in dict.fromkeys(keys):
        members = [i for i, k in enumerate(keys) if k == key and per_completion[i] is not None]
        depth = max((len(per_completion[i] or []) for i in members), default=0)
        for turn in range(depth):
            reached = [i for i in members if len(per_completion[i] or []) > turn]
            values = [(per_completion[i] or [])[turn] for i in reached]
            mean = statistics.fmean(values) if len(values) > 1 else 0.0
            spread = statistics.stdev(values) if len(values) > 1 else 1.0
            for i, value in zip(reached, values):
                (out[i] or [])[turn] = (value - mean) / (spread + EPS)
    return out


def token_turns(tokenizer: Any, ids: Sequence[int], text: str, spans: Sequence[tuple[int, int]]) -> list[int]:
    """Each token's turn: the first whose characters reach the token's end (ValueError
    where the ids do not decode to ``text``). A token that completes no character (the
    first bytes of a character another token completes, or a special token) goes with
    the next token that does: at a turn boundary, the first bytes of the next turn's
    first character are that turn's; at the end, the last turn's."""
    ends = token_ends(tokenizer, ids, text)
    out, turn = [], 0
    for end in ends:
        while turn < len(spans) - 1 and end > spans[turn][1]:
            turn += 1
        out.append(turn)
    following = len(spans) - 1
    for k in range(len(ends) - 1, -1, -1):
        if ends[k] == (ends[k - 1] if k else 0):  # completes nothing
            out[k] = following
        following = out[k]
    return out


def dual_advantages(
    ids: torch.Tensor,
    completion_mask: torch.Tensor,
    texts: Sequence[str],
    results: Sequence[dict[str, Any] | None],
    trajectory: torch.Tensor,
    tokenizer: Any,
    keys: Sequence[Hashable],
    source: TurnSource,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[N, T]`` advantages (0 off the completions) and which completions have turn
    rewards; ``trajectory``: each completion's trajectory-level advantage."""
    weight, unmatched = source.weight, float(source.options.get("unmatched", 0.0))
    spans = [turn_spans(text, source.separator) for text in texts]
    rewards = [turn_rewards(r, len(s), unmatched) for r, s in zip(results, spans)]
    discounted = [None if r is None else returns(r, source.gamma) for r in rewards]
    # A return that is not finite (an enormous ``unmatched``) leaves its completion out.
    discounted = [g if g is None or all(math.isfinite(v) for v in g) else None for g in discounted]
    normalised = turn_level(discounted, keys)
    advantages = torch.zeros(ids.shape, dtype=torch.float32)
    has = torch.zeros(ids.shape[0], dtype=torch.bool)
    for i, per_turn in enumerate(normalised):
        if per_turn is None:
            continue
        mask = completion_mask[i] == 1
        try:
            owner = token_turns(tokenizer, ids[i][mask].tolist(), texts[i], spans[i])
        except ValueError:
            continue
        turn_adv = torch.tensor([per_turn[t] for t in owner], dtype=torch.float32)
        advantages[i, mask] = (1 - weight) * float(trajectory[i]) + weight * turn_adv
        has[i] = True
    return advantages, has
