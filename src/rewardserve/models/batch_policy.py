"""How the service's batcher feeds a model: a kind's defaults, its backend's preferences
and its spec's settings together (RewardModel.policy)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BatchPolicy:
    """How the batcher feeds a model.

    pads: a batch costs ``longest * count`` (padded forward) rather than ``sum(lengths)``.
    concurrency: batches in flight at once (1 for a GPU/CPU forward; more for rule calls
    that wait on a process pool).
    """

    max_batch_tokens: int = 8192
    max_batch_items: int = 256
    max_wait_ms: float = 5.0
    max_queue_tokens: int = 1_000_000
    pads: bool = True
    concurrency: int = 1
    # Close a batch rather than let padding pass this share of its tokens.
    max_padding_ratio: float = 1.0
    # Whether batches may be cut to a few items' compute while several tenants share the
    # model (engine/batcher.py): where small batches lose some speed (a CPU), not where
    # throughput comes from big ones (a GPU).
    short_when_shared: bool = False
    # Whether a forward in flight runs other work between its layers when asked
    # (models/backends/layer_boundaries.py): a shared model's light tenant need not wait
    # for a whole batch of a flood's.
    preemptible: bool = False

    def cost(self, lengths: list[int]) -> int:
        return self.cost_sized(len(lengths), sum(lengths), max(lengths, default=0))

    def cost_sized(self, count: int, total: int, longest: int) -> int:
        """The cost of ``count`` items of ``total`` tokens, the longest ``longest``."""
        return longest * count if self.pads else total

    def fits(self, lengths: list[int]) -> bool:
        """Whether these items may form one batch."""
        return self.fits_sized(len(lengths), sum(lengths), max(lengths, default=0))

    def fits_sized(self, count: int, total: int, longest: int) -> bool:
        """``fits`` from the items' count, total tokens and longest length (a batch grown
        one item at a time checks each step at no cost per item already in it)."""
        if count <= 1:
            return True
        cost = self.cost_sized(count, total, longest)
        return (
            cost <= self.max_batch_tokens
            and count <= self.max_batch_items
            and (not cost or 1.0 - total / cost <= self.max_padding_ratio)
        )
