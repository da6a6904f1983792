"""Finding items that share a token prefix (a GRPO group's prompt, a judge's context), so
the prefix runs once and each item's rest attends to it (in a packed row, or on the
prefix's KV cache for backends that do not pack)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rewardserve.models.backends.backend import Backend, TokenSequence, after_prefix
from rewardserve.models.plan import Job, Unit

# Sharing pays when it saves at least this many prefix tokens (one prefix instead of n).
MIN_SAVED_TOKENS = 64
MIN_PREFIX = 16


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k


def shared_prefix_groups(seqs: list[list[int]], first_readout: list[int] | None = None) -> list[tuple[int, list[int]]]:
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
    """Several jobs as one forward unit: ``prefix`` runs once, each member's ``suffix``
    runs on its KV cache (positions relative to the suffix)."""

    prefix: list[int]
    members: list[Job[Any]]  # the members' own jobs, for their payloads
    suffixes: list[TokenSequence]


def jobs_of(unit: Unit[Any]) -> list[Job[Any]]:
    """A unit's jobs: a shared unit's members, or the one job a unit alone carries."""
    return unit.payload.members if isinstance(unit.payload, SharedUnit) else [unit.payload]


def share_prefixes(
    jobs: list[Job[Any]], seq_of: Callable[[Job[Any]], TokenSequence]
) -> list[tuple[Unit[Any], list[int]]]:
    """``RewardModel.combine`` for kinds that read sequences: one unit per group of jobs
    sharing a prefix worth sharing, the other jobs alone."""
    seqs = [seq_of(j) for j in jobs]
    groups = shared_prefix_groups([s.ids for s in seqs], [min(s.positions) for s in seqs])
    units: list[tuple[Unit[Any], list[int]]] = []
    for prefix, members in groups:
        if prefix == 0:
            (member,) = members
            units.append((Unit(jobs[member].length, jobs[member]), members))
            continue
        suffixes = [
            TokenSequence(seqs[m].ids[prefix:], tuple(p - prefix for p in seqs[m].positions), seqs[m].targets)
            for m in members
        ]
        unit = Unit(
            length=prefix + sum(len(s.ids) for s in suffixes),
            payload=SharedUnit(seqs[members[0]].ids[:prefix], [jobs[m] for m in members], suffixes),
            members=len(members),
            shared_tokens=prefix * (len(members) - 1),
        )
        units.append((unit, members))
    return units


Rows = np.ndarray  # what the backend read at one sequence's positions: [positions, k]


def read_units(
    backend: Backend,
    units: list[Unit[Any]],
    seq_of: Callable[[Job[Any]], TokenSequence] | None,
    token_ids: list[int] | None = None,
) -> list[list[Rows]]:
    """What the backend reads for each unit of a batch, per member: a unit alone reads
    its job's sequence (``seq_of``), a shared unit its prefix and continuations.

    On backends that pack, the whole batch is one row: lone sequences and prefixes with
    their continuations; nothing padded, each prefix once. On engines that cache
    prefixes themselves (vLLM) every unit's whole sequences go in one read, all in flight
    at once (a read per unit would wait for each before sending the next). Elsewhere the
    lone sequences go as one padded batch and each shared unit runs its prefix once,
    then its continuations on the prefix's KV cache."""

    def parts(unit: Unit[Any]) -> tuple[list[int], list[TokenSequence]]:
        if isinstance(unit.payload, SharedUnit):
            return unit.payload.prefix, unit.payload.suffixes
        assert seq_of is not None, "a unit alone needs seq_of"
        return [], [seq_of(unit.payload)]

    if backend.caches_prefixes:
        groups = [after_prefix(*parts(u)) for u in units]
        flat = iter(backend.read([s for group in groups for s in group], token_ids))
        return [[next(flat) for _ in group] for group in groups]
    if backend.packs:
        return backend.read_packed([parts(u) for u in units], token_ids)
    out: list[list[Rows]] = [[] for _ in units]
    alone = [i for i, u in enumerate(units) if not isinstance(u.payload, SharedUnit)]
    if alone:
        for i, rows in zip(alone, backend.read([parts(units[i])[1][0] for i in alone], token_ids)):
            out[i] = [rows]
    for i, unit in enumerate(units):
        if isinstance(unit.payload, SharedUnit):
            out[i] = backend.read_shared(unit.payload.prefix, unit.payload.suffixes, token_ids)
    return out
