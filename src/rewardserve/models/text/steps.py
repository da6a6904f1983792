"""Steps of a trajectory: where they come from, and the arithmetic on their scores.

An item's steps come from its ``steps`` list, from splitting its final assistant message
on a separator, or from the assistant turns of an agent trajectory. Each step keeps its
character span in what the client sent, so a trainer can map step rewards onto its own
tokens.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace

from rewardserve.models.errors import ItemError
from rewardserve.protocol import Item, Message, StepOptions, StepSpan


@dataclass
class Trajectory:
    """``context``: the turns before the steps (inline steps), or the whole conversation
    (turns, where ``step_turns`` index the assistant turns that are the steps)."""

    context: list[Message]
    steps: list[str]
    spans: list[StepSpan]
    step_turns: list[int] | None = None

    def question(self) -> str:
        """The prompt as plain text, for formats without a chat template: the user (and
        tool) turns before the first step; system prompts belong to chat templates."""
        turns = self.context if self.step_turns is None else self.context[: self.step_turns[0]]
        return "\n".join(m.text() for m in turns if m.role in ("user", "tool"))

    def chars(self) -> int:
        return sum(len(m.text()) for m in self.context) + sum(len(s) for s in self.steps)

    def leading(self, max_chars: int) -> Trajectory | None:
        """The trajectory up to its last step that ends within ``max_chars`` characters
        of text, or None when the first does not. What is dropped could not fit a
        context that ``max_chars`` bounds, so the kept steps' scores do not change."""
        if self.step_turns is None:
            used = sum(len(m.text()) for m in self.context)
            kept = 0
            for step in self.steps:
                used += len(step)
                if used > max_chars:
                    break
                kept += 1
            return replace(self, steps=self.steps[:kept], spans=self.spans[:kept]) if kept else None
        used, kept, end = 0, 0, 0
        for index, message in enumerate(self.context):
            used += len(message.text())
            if used > max_chars:
                break
            if kept < len(self.step_turns) and index == self.step_turns[kept]:
                kept, end = kept + 1, index + 1
        if not kept:
            return None
        return replace(
            self,
            context=self.context[:end],
            steps=self.steps[:kept],
            spans=self.spans[:kept],
            step_turns=self.step_turns[:kept],
        )

    def inline_steps(self) -> list[str]:
        """Steps as plain text. For turns, a step is the assistant's text and its tool
        calls; the tool results after it open the next step, so a step's score never
        sees what came after it."""
        if self.step_turns is None:
            return list(self.steps)
        out = []
        carry = ""
        bounds = self.step_turns + [len(self.context)]
        for k, turn in enumerate(self.step_turns):
            out.append(carry + turn_text(self.context[turn]))
            results = [m.text() for m in self.context[turn + 1 : bounds[k + 1]] if m.role == "tool"]
            carry = "".join(r + "\n" for r in results)
        return out


def turn_text(message: Message) -> str:
    text = message.text()
    for call in message.tool_calls or []:
        args = call.function.arguments
        args = args if isinstance(args, str) else json.dumps(args, sort_keys=True)
        text += f"\n{json.dumps({'name': call.function.name, 'arguments': args})}"
    return text


def _has_agent_shape(messages: list[Message]) -> bool:
    assistant = [m for m in messages if m.role == "assistant"]
    return len(assistant) >= 2 or any(m.tool_calls or m.role == "tool" for m in messages)


def extract(item: Item, options: StepOptions, default_separator: str | None) -> Trajectory:
    mode: str = options.steps_from  # "auto" resolves to one of the others, or "whole"
    separator = options.separator or default_separator
    if mode == "auto":
        if item.steps is not None:
            mode = "steps"
        elif item.messages is not None and _has_agent_shape(item.messages):
            mode = "turns"
        else:
            mode = "separator" if separator else "whole"
    if mode == "steps":
        return _from_list(item)
    if mode == "turns":
        return _from_turns(item)
    if mode == "separator" and not separator:
        raise ItemError("steps_from 'separator' needs options.separator (this model has none)")
    return _from_response(item, separator if mode == "separator" else None)


def _from_list(item: Item) -> Trajectory:
    if item.steps is None:
        raise ItemError("steps_from 'steps' needs the item's 'steps' list")
    context = item.conversation()[:-1] if item.messages is None else list(item.messages)
    spans, offset = [], 0
    for step in item.steps:
        spans.append(StepSpan(message=None, start=offset, end=offset + len(step)))
        offset += len(step)
    return Trajectory(context, list(item.steps), spans)


def _from_turns(item: Item) -> Trajectory:
    if item.messages is None:
        raise ItemError("steps_from 'turns' needs 'messages'")
    turns = [i for i, m in enumerate(item.messages) if m.role == "assistant"]
    if not turns:
        raise ItemError("the conversation has no assistant turn to score")
    # Turns after the last assistant turn cannot change any step's score.
    context = list(item.messages[: turns[-1] + 1])
    steps = [turn_text(item.messages[i]) for i in turns]
    spans = [StepSpan(message=i, start=0, end=len(item.messages[i].text())) for i in turns]
    return Trajectory(context, steps, spans, step_turns=turns)


def _from_response(item: Item, separator: str | None) -> Trajectory:
    if item.messages is not None:
        last = max((i for i, m in enumerate(item.messages) if m.role == "assistant"), default=None)
        if last is None:
            raise ItemError("the conversation has no assistant turn to score")
        context, text, message = list(item.messages[:last]), item.messages[last].text(), last
    else:
        context, text, message = item.conversation()[:-1], item.response or "", None
    steps, spans = [], []
    pieces = text.split(separator) if separator else [text]
    offset = 0
    for piece in pieces:
        if piece.strip():
            steps.append(piece)
            spans.append(StepSpan(message=message, start=offset, end=offset + len(piece)))
        offset += len(piece) + (len(separator) if separator else 0)
    return Trajectory(context, steps, spans)


# --------------------------------------------------------------------------- arithmetic


@dataclass
class StepStats:
    scores: list[float | None]
    aggregates: dict[str, float] = field(default_factory=dict)
    first_error_step: int | None = None


def aggregate(scores: list[float | None], threshold: float | None) -> StepStats:
    scored = [s for s in scores if s is not None]
    stats = StepStats(scores)
    if scored:
        stats.aggregates = {
            "min": min(scored),
            "prod": math.prod(scored),
            "mean": sum(scored) / len(scored),
            "last": scored[-1],
            "sum": math.fsum(scored),
        }
    if threshold is not None:
        stats.first_error_step = next((i for i, s in enumerate(scores) if s is not None and s < threshold), None)
    return stats
