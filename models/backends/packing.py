"""Many sequences in one row, without padding: the layout of a packed forward pass.

A unit is a shared prefix (maybe empty) and the continuations that follow it. Units are
laid end to end in one row; each token attends causally within its own unit, to the
prefix and to its own continuation only. Position ids restart with every unit (and every
continuation starts where its prefix ends), so each token sees exactly what it would see
in its own unpadded sequence: the same numbers as separate forwards, with no padding,
and each prefix computed once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rewardserve.models.backends.base import Sequence

Unit = tuple[list[int], list[Sequence]]  # (prefix, continuations)


@dataclass
class Packed:
    ids: torch.Tensor  # [1, T]
    position_ids: torch.Tensor  # [1, T]
    mask: torch.Tensor  # [1, 1, T, T] bool, True = may attend
    readouts: list[list[list[int]]]  # per unit, per continuation: row indices to read


def pack(units: list[Unit], device: torch.device) -> Packed:
    ids: list[int] = []
    positions: list[int] = []
    group: list[int] = []  # unit index of each token
    branch: list[int] = []  # -1 in a prefix, else the continuation's index
    readouts: list[list[list[int]]] = []
    for u, (prefix, continuations) in enumerate(units):
        ids += prefix
        positions += range(len(prefix))
        group += [u] * len(prefix)
        branch += [-1] * len(prefix)
        rows = []
        for c, seq in enumerate(continuations):
            start = len(ids)
            ids += seq.ids
            positions += range(len(prefix), len(prefix) + len(seq.ids))
            group += [u] * len(seq.ids)
            branch += [c] * len(seq.ids)
            rows.append([start + p for p in seq.positions])
        readouts.append(rows)
    pos = torch.tensor(positions, device=device)
    grp = torch.tensor(group, device=device)
    br = torch.tensor(branch, device=device)
    mask = (
        (grp[:, None] == grp[None, :])
        & (pos[None, :] <= pos[:, None])
        & ((br[None, :] == -1) | (br[None, :] == br[:, None]))
    )
    return Packed(
        ids=torch.tensor([ids], dtype=torch.long, device=device),
        position_ids=pos[None, :],
        mask=mask[None, None],
        readouts=readouts,
    )

