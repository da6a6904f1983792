"""What a backend does for the kinds: forward passes over token ids, nothing else.

Kinds template and tokenize themselves (with ``backend.tokenizer``) and hand token ids
over, so the same kind runs on transformers or on a vLLM engine.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Sequence:
    """Token ids and the position whose head output is read."""

    ids: list[int]
    readout: int


class Backend(ABC):
    name: str
    tokenizer: Any
    max_tokens: int
    pad_token_id: int | None
    # BatchPolicy fields this backend runs best with on its device (the spec still wins).
    batch_preferences: dict = {}

    @abstractmethod
    def classify(self, seqs: list[Sequence]) -> np.ndarray:
        """The sequence-classification head at each sequence's readout position,
        float32 of shape ``[len(seqs), num_labels]``."""
