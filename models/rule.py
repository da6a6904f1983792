"""Kind ``rule``: verifiable rewards computed by a registered rule function, no weights.

``source`` (or ``options.fn``) names the rule, ``options.args`` are its keyword
arguments. Each item's ``response`` (or final assistant turn) is graded against its
``reference``.
"""

from __future__ import annotations

import os
from concurrent.futures import TimeoutError as FutureTimeout

from rewardserve.client.protocol import Item, ItemResult, ScoreOptions
from rewardserve.models.base import BatchPolicy, ItemError, RewardModel, Work, work_key
from rewardserve.models.registry import register_kind
from rewardserve.models.rules import RuleError, get_rule
from rewardserve.models.rules.isolation import RulePool


@register_kind("rule")
class RuleModel(RewardModel):
    runs_torch = False
    # One call per batch and many in flight: a slow call holds up only itself.
    default_policy = BatchPolicy(
        max_batch_tokens=1,
        max_batch_items=1,
        max_wait_ms=0.0,
        max_queue_tokens=100_000,
        pads=False,
        concurrency=32,
    )

    def load(self) -> None:
        self.rule = get_rule(self.options.get("fn", self.spec.source))
        self.args = dict(self.options.get("args", {}))
        self.timeout_s = float(self.options.get("timeout_s", 5.0))
        self.pool: RulePool | None = None
        if self.rule.isolated:
            workers = int(self.options.get("workers", max(2, min(4, os.cpu_count() or 2))))
            self.pool = RulePool(workers, self.timeout_s)
            self.pool.warm_up(workers)

    @property
    def backend_name(self) -> str:
        return "rule"

    def prepare(self, items: list[Item], options: ScoreOptions) -> list[Work | ItemError]:
        return [
            Work(length=1, payload=(it.response_text(), it.reference),
                 key=work_key([], self.rule.name, self.args, it.response_text(), it.reference))
            for it in items
        ]

    def predict(self, batch: list[Work]) -> list[ItemResult | ItemError]:
        if self.pool is None:
            return [self._result(lambda w=w: self._call(w)) for w in batch]
        futures = [self.pool.submit(self.rule.name, *w.payload, self.args) for w in batch]
        return [self._result(f.result) for f in futures]

    def _call(self, work: Work) -> float:
        response, reference = work.payload
        return float(self.rule.fn(response, reference, **self.args))

    def _result(self, compute) -> ItemResult | ItemError:
        try:
            return ItemResult(score=float(compute()))
        except FutureTimeout:
            return ItemError(f"rule {self.rule.name!r} timed out after {self.timeout_s:g}s")
        except RuleError as exc:
            return ItemError(str(exc))
        except Exception as exc:  # a rule's own bug must not fail its neighbours
            return ItemError(f"rule {self.rule.name!r} failed: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
