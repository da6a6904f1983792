"""How each PRM family lays steps out in one sequence, and reads a score per step.

Every format builds the whole trajectory as ONE token sequence and names the positions
to read, one per step; the forward pass then scores every step at once. Each follows its
model card's recipe, so the one-pass scores equal the card's per-prefix computation.

    separator_chat  Qwen2.5-Math-PRM: assistant turn = steps each ended by <extra_0>;
                    softmax over the PRM head's 2 labels at each tag, label 1
    tag_lm          Math-Shepherd: "{question} {step} ки\\n{step} ки..."; softmax over the
                    LM's logits of "+" / "-" at each tag, "+"
    value_head      Skywork-o1-Open-PRM: BOS + question + "\\n", then each step tokenized
                    on its own and ended by the step token; sigmoid of the value head there
    chat_turn       RLHFlow: each step a user turn answered by an assistant "+" (the
                    question opens the first; no system turn); softmax over "+" / "-"
                    where the assistant's "+" is predicted
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rewardserve.models.errors import ItemError
from rewardserve.models.reward_model import sigmoid
from rewardserve.models.text.steps import Trajectory
from rewardserve.protocol import Message

T = TypeVar("T")


class StepFormatOptions(BaseModel):
    """The step layout's own options; left out, each format's default applies."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tag: str | None = Field(
        None,
        description="separator_chat, classifier_tags, tag_lm: the step tag after each step (defaults <extra_0>, ки).",
    )
    label: int | None = Field(None, description="separator_chat: the head's index of a good step (default 1).")
    default_system: str | None = Field(None, description="separator_chat: a system turn when the item has none.")
    activation: Literal["sigmoid", "none"] | None = Field(
        None, description="classifier_tags: sigmoid of the logit per step (default), or the raw logit."
    )
    good: str | None = Field(None, description="tag_lm, chat_turn: the token of a good step (default +).")
    bad: str | None = Field(None, description="tag_lm, chat_turn: the token of a bad step (default -).")
    step_join: str | None = Field(None, description="tag_lm: what joins the tagged steps (default a newline).")
    step_token: str | None = Field(None, description="value_head: the token read after each step (default a newline).")


def _softmax_pick(row: np.ndarray, index: int) -> float:
    z = row.astype(np.float64) - row.max()
    e = np.exp(z)
    return float(e[index] / e.sum())


def _single_id(tokenizer: Any, text: str, what: str) -> int:
    ids = tokenizer.encode(text, add_special_tokens=False)
    if not ids:
        raise ValueError(f"{what} {text!r} encodes to no token")
    last: int = ids[-1]
    return last


class StepFormat(ABC):
    task: ClassVar[str]
    # Token ids whose logits the lm task reads (None for heads).
    token_ids: list[int] | None = None
    # The token that marks each step, for formats that mark steps with one (pre-rendered
    # input and vLLM's /pooling find steps by it).
    tag_id: int | None = None

    def __init__(self, tokenizer: Any, options: StepFormatOptions):
        self.tokenizer = tokenizer
        self.options = options

    @property
    def literals(self) -> list[str]:
        """Strings that mark readouts; removed from client text so it cannot forge steps."""
        return []

    def sanitize(self, text: str) -> str:
        for literal in self.literals:
            text = text.replace(literal, "")
        return text

    @abstractmethod
    def encode(self, traj: Trajectory) -> tuple[list[int], list[int]]:
        """Token ids of the whole trajectory and one readout position per step."""

    @abstractmethod
    def score(self, row: np.ndarray) -> float:
        """A step's score from what the backend read at its position."""

    def pooled(self, row: np.ndarray) -> list[float]:
        """The probability vector vLLM's /pooling returns for one step."""
        return [self.score(row)]

    def positions_of(self, ids: list[int], tag_id: int, n_steps: int) -> list[int]:
        positions = [i for i, t in enumerate(ids) if t == tag_id]
        if len(positions) != n_steps:
            raise ItemError(f"found {len(positions)} step tags for {n_steps} steps after tokenization")
        return positions

    def clean(self, message: Message, extra: str = "") -> Message:
        return message.model_copy(update={"content": self.sanitize(message.text()) + extra})


def _or(value: T | None, default: T) -> T:
    """An option the config left out takes the format's own default."""
    return default if value is None else value


class SeparatorChat(StepFormat):
    task = "prm_head"
    tag_id: int  # set in __init__

    def __init__(self, tokenizer: Any, options: StepFormatOptions):
        super().__init__(tokenizer, options)
        self.tag = _or(options.tag, "<extra_0>")
        self.tag_id = tokenizer.encode(self.tag, add_special_tokens=False)[0]
        self.label = int(_or(options.label, 1))

    @property
    def literals(self) -> list[str]:
        return [self.tag]

    def encode(self, traj: Trajectory) -> tuple[list[int], list[int]]:
        if traj.step_turns is None:
            steps = "".join(self.sanitize(s) + self.tag for s in traj.steps)
            conv = [self.clean(m) for m in traj.context]
            conv.append(Message(role="assistant", content=steps))
        else:
            marked = set(traj.step_turns)
            conv = [self.clean(m, self.tag if i in marked else "") for i, m in enumerate(traj.context)]
        system = self.options.default_system
        if system and not any(m.role == "system" for m in conv):
            conv.insert(0, Message(role="system", content=system))
        from rewardserve.models.text.chat import message_dicts

        text = self.tokenizer.apply_chat_template(message_dicts(conv), tokenize=False)
        ids = self.tokenizer.encode(text)
        return ids, self.positions_of(ids, self.tag_id, len(traj.steps))

    def score(self, row: np.ndarray) -> float:
        return _softmax_pick(row, self.label)

    def pooled(self, row: np.ndarray) -> list[float]:
        z = np.exp(row.astype(np.float64) - row.max())
        probs: list[float] = (z / z.sum()).tolist()
        return probs


class ClassifierTags(SeparatorChat):
    """A sequence classifier (an outcome reward model's scalar head) read at a tag after
    every step: the chat layout of SeparatorChat, the head of AutoModelForSequence-
    Classification. Step score: sigmoid of the logit (``activation: none`` keeps it raw)."""

    task = "classify"

    def score(self, row: np.ndarray) -> float:
        x = float(row[0])
        return x if _or(self.options.activation, "sigmoid") == "none" else sigmoid(x)

    def pooled(self, row: np.ndarray) -> list[float]:
        return [self.score(row)]


class TagLM(StepFormat):
    task = "lm"
    tag_id: int  # set in __init__

    def __init__(self, tokenizer: Any, options: StepFormatOptions):
        super().__init__(tokenizer, options)
        self.tag = _or(options.tag, "ки")
        self.tag_id = _single_id(tokenizer, self.tag, "step tag")
        good, bad = _or(options.good, "+"), _or(options.bad, "-")
        ids = tokenizer.encode(f"{good} {bad}", add_special_tokens=False)
        self.token_ids = (
            [ids[0], ids[-1]]
            if len(ids) == 2
            else [_single_id(tokenizer, good, "good token"), _single_id(tokenizer, bad, "bad token")]
        )

    @property
    def literals(self) -> list[str]:
        return [self.tag]

    def encode(self, traj: Trajectory) -> tuple[list[int], list[int]]:
        join = _or(self.options.step_join, "\n")
        steps = join.join(f"{self.sanitize(s)} {self.tag}" for s in traj.inline_steps())
        text = f"{self.sanitize(traj.question())} {steps}"
        ids = self.tokenizer.encode(text)
        return ids, self.positions_of(ids, self.tag_id, len(traj.steps))

    def score(self, row: np.ndarray) -> float:
        return _softmax_pick(row, 0)

    def pooled(self, row: np.ndarray) -> list[float]:
        p = self.score(row)
        return [p, 1.0 - p]


class ValueHead(StepFormat):
    task = "value_head"

    def __init__(self, tokenizer: Any, options: StepFormatOptions):
        super().__init__(tokenizer, options)
        self.step_token = _or(options.step_token, "\n")
        self.step_token_id = tokenizer.encode(self.step_token)[-1]

    def encode(self, traj: Trajectory) -> tuple[list[int], list[int]]:
        bos = self.tokenizer.bos_token or ""
        ids = list(self.tokenizer.encode(bos + traj.question() + "\n"))
        positions = []
        for step in traj.inline_steps():
            # Each step tokenized on its own, then the step token: the card's recipe,
            # and why a literal step token inside a step cannot forge a readout.
            ids += self.tokenizer.encode(step) + [self.step_token_id]
            positions.append(len(ids) - 1)
        return ids, positions

    def score(self, row: np.ndarray) -> float:
        return sigmoid(float(row[0]))


class ChatTurn(StepFormat):
    task = "lm"
    token_ids: list[int]  # set in __init__

    def __init__(self, tokenizer: Any, options: StepFormatOptions):
        super().__init__(tokenizer, options)
        self.good, self.bad = _or(options.good, "+"), _or(options.bad, "-")
        self.token_ids = [
            _single_id(tokenizer, self.good, "good token"),
            _single_id(tokenizer, self.bad, "bad token"),
        ]

    def _render(self, conv: list[Message], generation_prompt: bool) -> list[int]:
        from rewardserve.models.text.chat import message_dicts

        text = self.tokenizer.apply_chat_template(
            message_dicts(conv), tokenize=False, add_generation_prompt=generation_prompt
        )
        ids: list[int] = self.tokenizer.encode(text, add_special_tokens=False)
        return ids

    def encode(self, traj: Trajectory) -> tuple[list[int], list[int]]:
        # The card's conversation is user steps and assistant labels only: no system turn.
        conv: list[Message] = []
        question = traj.question()
        for k, step in enumerate(traj.inline_steps()):
            conv.append(Message(role="user", content=f"{question} {step}" if k == 0 else step))
            conv.append(Message(role="assistant", content=self.good))
        ids = self._render(conv, generation_prompt=False)
        positions = []
        for k in range(len(traj.steps)):
            # The assistant's "+" follows the generation prompt of the prefix; the token
            # before it is where the model predicts it (the card's logits[:, -3]).
            prefix = self._render(conv[: 2 * k + 1], generation_prompt=True)
            at = len(prefix)
            if ids[:at] != prefix or at >= len(ids) or ids[at] != self.token_ids[0]:
                raise ItemError("the chat template did not place the step label where expected")
            positions.append(at - 1)
        return ids, positions

    def score(self, row: np.ndarray) -> float:
        return _softmax_pick(row, 0)


FORMATS: dict[str, type[StepFormat]] = {
    "separator_chat": SeparatorChat,
    "classifier_tags": ClassifierTags,
    "tag_lm": TagLM,
    "value_head": ValueHead,
    "chat_turn": ChatTurn,
}
