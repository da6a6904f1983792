"""A model's head applied at the rows that are read only (TransformersBackend): a
classifier's or PRM's head, or for a causal LM a handful of lm_head rows, the logits of
given token ids or each row's log-probability of its target, rather than the full
vocabulary at every position."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from rewardserve.models.backends.backend import TokenSequence

# Rows whose whole-vocabulary logits are held at once when log-probabilities are read
# (256 rows of a 152k vocabulary: 156 MB of float32).
LOGPROB_ROWS = 256


def heads_at(
    hidden: torch.Tensor,
    seqs: list[TokenSequence],
    token_ids: list[int] | None,
    head: nn.Module,
    *,
    lm: bool,
    softcap: float | None,
) -> list[np.ndarray]:
    """Each sequence's rows of ``hidden`` (a batch's last hidden states, one row of the
    batch per sequence) at its positions, through the head: one array per sequence."""
    counts = [len(s.positions) for s in seqs]
    rows = [r for r, n in enumerate(counts) for _ in range(n)]
    cols = [p for s in seqs for p in s.positions]
    picked = hidden[
        torch.tensor(rows, dtype=torch.long, device=hidden.device),
        torch.tensor(cols, dtype=torch.long, device=hidden.device),
    ]
    if lm and token_ids is None and all(s.targets is not None for s in seqs):
        out = target_logprobs(head, picked, [t for s in seqs for t in s.targets or ()], softcap)
    elif lm:
        if not token_ids:
            raise ValueError("the lm task reads the logits of given token_ids, or of each sequence's targets")
        weight = head.weight[token_ids]
        bias = head.bias[token_ids] if head.bias is not None else None
        out = nn.functional.linear(picked, weight, bias)
        if softcap:
            out = torch.tanh(out / softcap) * softcap
    else:
        out = head(picked)
    return [chunk.numpy() for chunk in torch.split(out.float().cpu(), counts)]


def target_logprobs(head: nn.Module, picked: torch.Tensor, targets: list[int], softcap: float | None) -> torch.Tensor:
    """``[rows, 1]``: each row's log-probability of its target, the whole vocabulary's
    logits a few rows at a time (rows times vocabulary floats at once would not be
    bounded)."""
    if len(targets) != picked.shape[0]:
        raise ValueError(f"{picked.shape[0]} positions read but {len(targets)} targets")
    index = torch.tensor(targets, dtype=torch.long, device=picked.device)
    out = torch.empty((picked.shape[0], 1), dtype=torch.float32, device=picked.device)
    for start in range(0, picked.shape[0], LOGPROB_ROWS):
        stop = start + LOGPROB_ROWS
        logits = head(picked[start:stop]).float()
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        out[start:stop, 0] = torch.log_softmax(logits, dim=-1).gather(1, index[start:stop, None])[:, 0]
    return out
