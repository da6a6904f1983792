"""What a backend does for the kinds: forward passes over token ids, nothing else.

Kinds template and tokenize themselves (with ``backend.tokenizer``) and hand over token
ids plus the positions to read, so the same kind runs on transformers or on a vLLM
engine. What is read at a position depends on the task the backend was loaded for:

    classify      a sequence classifier's head (reward models, Skywork-Reward style)
    prm_head      a process reward model's own token head (Qwen2.5-Math-PRM)
    value_head    a linear value head over hidden states (Skywork-o1-Open-PRM)
    lm            a causal LM's next-token logits, restricted to ``token_ids``; or, for
                  sequences that carry ``targets``, the log-probability of each
                  position's target (the next token), over the whole vocabulary
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rewardserve.models.backends.layer_boundaries import run_between_layers

if TYPE_CHECKING:
    from rewardserve.models.checkpoints import CheckpointWeights

TASKS = ("classify", "prm_head", "value_head", "lm")


@dataclass(frozen=True)
class TokenSequence:
    """Token ids and the positions whose head output is read. ``targets`` (lm only): a
    token per position whose log-probability is read there, in place of logits."""

    ids: list[int]
    positions: tuple[int, ...]
    targets: tuple[int, ...] | None = None


def after_prefix(prefix: list[int], seqs: list[TokenSequence]) -> list[TokenSequence]:
    """Each continuation as a whole sequence: the prefix's ids, then its own, with its
    readout positions moved past the prefix."""
    return [TokenSequence(prefix + s.ids, tuple(len(prefix) + p for p in s.positions), s.targets) for s in seqs]


# What a level-1 sleep says of a model whose weights are on the CPU.
IN_HOST_MEMORY = "nothing freed: the weights are in host memory already"


class Backend(ABC):
    """A forward-pass engine and what it can do (as TEI's backends declare theirs): the
    kinds read through ``prefix_sharing.read_units``, which picks the best way from
    ``caches_prefixes`` and ``packs``."""

    name: str
    task: str
    tokenizer: Any
    max_tokens: int
    vocab_size: int
    pad_token_id: int | None
    # BatchPolicy fields this backend runs best with on its device (the spec still wins).
    batch_preferences: dict[str, Any] = {}
    # True: the engine shares prefixes itself (vLLM's prefix cache), so shared units are
    # read as whole sequences, every unit of a batch in one read.
    caches_prefixes: bool = False
    # True: ``read_packed`` serves this model (many units in one unpadded row).
    packs: bool = False
    # False: ``read`` has nothing to give (a remote judge whose server returns no
    # logprobs); a verifier then generates and parses.
    reads_logits: bool = True
    # True: its forward marks the boundaries between layers (layer_boundaries.py), where
    # other work may run inside a batch in flight (``between_layers``).
    preemptible: bool = False

    def between_layers(self, callback: Callable[[], None] | None) -> AbstractContextManager[None]:
        """While inside, ``callback`` runs at each layer boundary of a forward on this
        thread; a backend that is not ``preemptible`` has none and runs nothing there."""
        return run_between_layers(callback) if self.preemptible else nullcontext()

    @abstractmethod
    def read(self, seqs: list[TokenSequence], token_ids: list[int] | None = None) -> list[np.ndarray]:
        """For each sequence, float32 ``[len(positions), k]``: the task's head at each
        position (for ``lm``, the logits of ``token_ids``)."""

    def read_shared(
        self, prefix: list[int], seqs: list[TokenSequence], token_ids: list[int] | None = None
    ) -> list[np.ndarray]:
        """Every sequence as a continuation of ``prefix`` (positions relative to it).
        Backends that can run the prefix once override this."""
        return self.read(after_prefix(prefix, seqs), token_ids)

    def read_packed(
        self, units: list[tuple[list[int], list[TokenSequence]]], token_ids: list[int] | None = None
    ) -> list[list[np.ndarray]]:
        """Units of (prefix, continuations) in one row; only where ``packs``."""
        raise NotImplementedError(f"backend {self.name} does not pack")

    def generate(
        self, prompt: list[int], *, n: int, temperature: float, top_p: float, max_new_tokens: int, seed: int | None
    ) -> list[str]:
        """``n`` sampled continuations of ``prompt`` (causal LMs)."""
        raise NotImplementedError(f"backend {self.name} does not generate")

    def weights_in_place(self) -> str | None:
        """Why new weights cannot be written into this backend's own tensors (None: they
        can, ``update_weights``). Most cannot: a new version is loaded beside instead."""
        return f"the {self.name} backend holds its weights where they cannot be rewritten"

    def check_weights(self, weights: CheckpointWeights) -> None:
        """ValueError when ``weights`` are not this model's (names, shapes, finite values)."""
        raise NotImplementedError(self.weights_in_place())

    def update_weights(self, weights: CheckpointWeights) -> None:
        """Write ``weights`` (checked) into the tensors this backend reads."""
        raise NotImplementedError(self.weights_in_place())

    def to_host(self) -> str:
        """A level-1 sleep: free what the model holds on its device, keeping its weights
        in host memory (``from_host`` puts them back); what was done, in a few words.
        A model on the CPU has nothing to move: its weights are in host memory already."""
        return IN_HOST_MEMORY

    def from_host(self) -> None:  # noqa: B027 (what to_host did not move, nothing to undo)
        """Undo ``to_host`` before the model serves again."""

    def close(self) -> None:  # noqa: B027 (most backends hold nothing more: not abstract)
        """Release what the backend holds beyond its weights (an engine's processes)."""
