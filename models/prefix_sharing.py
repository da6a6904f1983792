"""Finding items that share a token prefix (a GRPO group's prompt, a judge's context), so
the prefix runs once and each item's rest attends to it (in a packed row, or on the
prefix's KV cache for backends that do not pack)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from rewardserve.models.backends.backend import Sequence, after_prefix
from rewardserve.models.reward_model import Work

# Sharing pays when it saves at least this many prefix tokens (one prefix instead of n).
MIN_SAVED_TOKENS = 64
MIN_PREFIX = 16


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k


def shared_prefix_groups(
    seqs: list[list[int]], first_readout: list[int] | None = None
) -> list[tuple[int, list[int]]]:
    """``(prefix length, member indices)`` covering every sequence once. Members of a
    group share their first ``prefix length`` tokens; a sequence alone has prefix 0. The
    prefix stops before each member's first read position (``first_readout``) and leaves
    every member at least one token of its own."""
    order = sorted(range(len(seqs)), key=lambda i: seqs[i])
    limit = [min(len(s) - 1, first_readout[i] if first_readout else len(s) - 1) for i, s in enumerate(seqs)]
    groups: list[tuple[int, list[int]]] = []
    k = 0
    while k < len(order):
        head = order[k]
        members, prefix = [head], limit[head]
        j = k + 1
        while j < len(order):
            candidate = order[j]
            shared = min(prefix, common_prefix(seqs[head], seqs[candidate]), limit[candidate])
            if shared < MIN_PREFIX:
                break
            members.append(candidate)
            prefix = shared
            j += 1
        if len(members) > 1 and (len(members) - 1) * prefix >= MIN_SAVED_TOKENS:
            groups.append((prefix, members))
        else:
            groups.extend((0, [m]) for m in members)
        k = j if len(members) > 1 else k + 1
    return groups


# --------------------------------------------------------------------------- units for kinds


@dataclass(frozen=True)
class SharedUnit:
    """Several items' work as one forward unit: ``prefix`` runs once, each member's
    ``suffix`` runs on its KV cache (positions relative to the suffix)."""

    prefix: list[int]
    members: list  # the members' own Work, for their payloads
    suffixes: list[Sequence]


def share_prefixes(works: list[Work], seq_of: Callable[[Work], Sequence]) -> list[tuple[Work, list[int]]]:
    """``RewardModel.combine`` for kinds that read sequences: one unit per group of items
    sharing a prefix worth sharing, the other items alone."""
    seqs = [seq_of(w) for w in works]
    groups = shared_prefix_groups([s.ids for s in seqs], [min(s.positions) for s in seqs])
    units: list[tuple[Work, list[int]]] = []
    for prefix, members in groups:
        if prefix == 0:
            units.append((works[members[0]], members))
            continue
        suffixes = [Sequence(seqs[m].ids[prefix:], tuple(p - prefix for p in seqs[m].positions)) for m in members]
        unit = Work(
            length=prefix + sum(len(s.ids) for s in suffixes),
            payload=SharedUnit(seqs[members[0]].ids[:prefix], [works[m] for m in members], suffixes),
            prompt_tokens=sum(works[m].prompt_tokens for m in members),
            shared_tokens=prefix * (len(members) - 1),
        )
        units.append((unit, members))
    return units


def read_units(backend, batch: list[Work], seq_of: Callable[[Work], Sequence], token_ids=None) -> list:
    """What the backend reads for each unit of a batch: the rows at a plain work's
    positions, or for a shared unit a list of such rows, one per member.

    On backends that pack, the whole batch is one row: plain works as lone sequences,
    shared units as a prefix and its continuations; nothing padded, each prefix once.
    On engines that cache prefixes themselves (vLLM) every unit's whole sequences go in
    one read, all in flight at once. Elsewhere plain works go as one padded batch and each
    shared unit runs its prefix once, then its continuations on the prefix's KV cache."""
    if getattr(backend, "caches_prefixes", False):
        # One read per unit would wait for each before sending the next: measured, the
        # rubric workload (16 requests of 4 criteria over one context) ran 0.78x vLLM's
        # own server that way.
        groups = [after_prefix(w.payload.prefix, w.payload.suffixes) if isinstance(w.payload, SharedUnit)
                  else [seq_of(w)] for w in batch]
        rows = iter(backend.read([s for group in groups for s in group], token_ids))
        return [[next(rows) for _ in group] if isinstance(w.payload, SharedUnit) else next(rows)
                for w, group in zip(batch, groups)]
    if getattr(backend, "packs", False):
        units = [(w.payload.prefix, w.payload.suffixes) if isinstance(w.payload, SharedUnit)
                 else ([], [seq_of(w)]) for w in batch]
        read = backend.read_packed(units, token_ids)
        return [rows if isinstance(w.payload, SharedUnit) else rows[0] for w, rows in zip(batch, read)]
    out: list = [None] * len(batch)
    plain = [i for i, w in enumerate(batch) if not isinstance(w.payload, SharedUnit)]
    if plain:
        for i, rows in zip(plain, backend.read([seq_of(batch[i]) for i in plain], token_ids)):
            out[i] = rows
    for i, work in enumerate(batch):
        if isinstance(work.payload, SharedUnit):
            out[i] = backend.read_shared(work.payload.prefix, work.payload.suffixes, token_ids)
    return out
