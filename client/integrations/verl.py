"""verl reward functions (``custom_reward_function.path`` / ``.name`` in verl's config).

    custom_reward_function:
      path: <site-packages>/rewardserve/client/integrations/verl.py
      name: compute_score            # or compute_score_batch with the batch reward manager
      reward_kwargs: {model: math, base_url: "http://rm:8000"}

verl calls ``compute_score(data_source, solution_str, ground_truth, extra_info)``; the
reward is the service's score for the response against the ground truth. A result the
service could not compute raises (verl has no "missing reward"), unless you choose a
stand-in with ``invalid_score``.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from rewardserve.client.errors import RewardServeError
from rewardserve.client.integrations._items import make_item
from rewardserve.client.sync_client import RewardClient

_clients: dict[tuple, RewardClient] = {}
_lock = threading.Lock()


def _client(base_url: str | None, api_key: str | None) -> RewardClient:
    key = (base_url, api_key)
    with _lock:  # one pooled client per service, made on first use
        if key not in _clients:
            _clients[key] = RewardClient(base_url, api_key=api_key)
        return _clients[key]


def _prompt(extra_info: Any) -> str | None:
    if isinstance(extra_info, dict):
        for key in ("question", "prompt", "problem"):
            if isinstance(extra_info.get(key), str):
                return extra_info[key]
    return None


def compute_score_batch(
    data_sources: list[str],
    solution_strs: list[str],
    ground_truths: list[Any],
    extra_infos: list[Any] | None = None,
    *,
    model: str | None = None,
    endpoint: str = "score",
    base_url: str | None = None,
    api_key: str | None = None,
    invalid_score: float | None = None,
    **options: Any,
) -> list[float]:
    """One call for a whole batch (verl's batch reward manager)."""
    model = model or os.environ.get("REWARDSERVE_MODEL", "math")
    extra_infos = extra_infos or [None] * len(solution_strs)
    items = [
        make_item(_prompt(info), solution, truth, {"data_source": source})
        for source, solution, truth, info in zip(data_sources, solution_strs, ground_truths, extra_infos)
    ]
    client = _client(base_url, api_key)
    if endpoint == "steps":
        response = client.score_steps(model, items, **options)
    elif endpoint == "verify":
        response = client.verify(model, items, **options)
    else:
        response = client.score(model, items, **options)
    scores = []
    for index, result in enumerate(response.results):
        if result.valid:
            scores.append(result.score)
        elif invalid_score is not None:
            scores.append(invalid_score)
        else:
            raise RewardServeError(f"no reward for item {index} ({data_sources[index]}): {result.error}")
    return scores


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None,
                  **kwargs: Any) -> float:
    """verl's per-sample signature."""
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info], **kwargs)[0]
