"""OpenRLHF: the service answers ``--remote_rm_url http://host:8000/get_reward`` itself;
this file is for OpenRLHF's python reward mode (``--remote_rm_url path/to/this/file.py``),
which calls ``reward_func(queries, prompts, labels)``.

Configure with ``REWARDSERVE_BASE_URL`` and ``REWARDSERVE_MODEL`` (default ``math``).
Queries are prompt + response; the prompt prefix is cut off when it is there.
"""

from __future__ import annotations

import os
from typing import Any

from rewardserve.client.errors import RewardServeError
from rewardserve.client.rows import make_item, split_query
from rewardserve.client.sync import RewardClient


def reward_func(
    queries: list[str], prompts: list[str] | None = None, labels: list[Any] | None = None
) -> dict[str, Any]:
    model = os.environ.get("REWARDSERVE_MODEL", "math")
    given: list[str | None] = list(prompts) if prompts else [None] * len(queries)
    references: list[Any] = labels or [None] * len(queries)
    items = [make_item(*split_query(q, p), reference=label) for q, p, label in zip(queries, given, references)]
    results = RewardClient().score(model, items).results
    bad = [(i, r.error) for i, r in enumerate(results) if not r.valid]
    if bad:
        raise RewardServeError(f"no reward for query {bad[0][0]}: {bad[0][1]}")
    rewards = [r.score for r in results]
    try:
        import torch

        rewards = torch.tensor(rewards, dtype=torch.float32)
    except ImportError:
        pass
    return {"rewards": rewards, "scores": rewards, "extra_logs": {}}
