"""Issue 23's fairness check on the wall clock, in a real service process: two tenants at
weights 1:1 on one model; A floods it open-loop with 10x B's load (bench/tenants.py
``measure``). B's p99 latency stays within 2x of B alone, and A is served what the
machine serves A alone on the model time B's work leaves (see the last assert).

It runs alone (``-m alone``, after the parallel tests) so nothing else takes the cores.
The model is big enough that one item's forward (~60 ms on the 2-core machines here)
outweighs a 2-core machine's scheduling noise; B's rate is set from one item's latency
measured first, so its own items seldom queue on a slower CPU either.
"""

from __future__ import annotations

import asyncio
import json
import random
import time

import pytest

from bench.open_loop import LoadResult, open_loop
from bench.tenants import OPERATOR_KEY, Measured, body, measure
from tests.builders import build_sequence_classifier
from tests.harness import serve_subprocess

A_SHARE = 0.85  # of what B leaves A, at least (the last assert)


@pytest.mark.alone  # a wall clock against the whole machine
# ~150 s a measurement, with one more window of B beside A where the first is past 2x; a
# second measurement where A's share is short
@pytest.mark.timeout(480)
def test_a_flood_keeps_a_light_tenant_within_2x_of_its_latency_alone_and_takes_the_rest(tmp_path):
    rm = build_sequence_classifier(tmp_path / "rm", hidden=768, layers=6, heads=12, head_dim=64, max_positions=1024)
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text("tenants:\n  - {name: a, keys: [key-a]}\n  - {name: b, keys: [key-b]}\n")
    spec = [{"name": "rm", "source": str(rm), "options": {"score_cache_size": 0}}]
    env = {
        "REWARDSERVE_MODELS": json.dumps(spec),
        "REWARDSERVE_TENANTS_FILE": str(tenants_file),
        "REWARDSERVE_API_KEYS": OPERATOR_KEY,
        "REWARDSERVE_LOG_LEVEL": "warning",
    }
    rng = random.Random(23)
    with serve_subprocess("--no-builtin-rules", env=env) as url:
        # B keeps the model at most ~40% busy alone, whatever this CPU's speed (5 requests
        # a second where an item takes ~80 ms), and sends 111 requests in each window: its
        # p99 is not its single worst one. A sends 10x B's items in requests of 10: ~3x
        # what the model serves.
        probe = asyncio.run(open_loop(url, "/v1/score", body(rng, 1), 2.0, 3.0, "key-b"))
        b_rate = min(5.0, 0.4 / probe.quantile(0.5))

        def measured() -> Measured:
            # A's capacity from two 15 s windows, before and after B's (a mean over ~200 batches).
            return asyncio.run(
                measure(
                    url, b_rate=b_rate, seconds=111 / b_rate, a_items=10, rng=rng, again=over_twice_alone, capacity_s=15
                )
            )

        m = measured()
        earlier = ""
        if m.beside < A_SHARE * m.left_for_a:  # see the last assert: measured once more
            earlier = f"an earlier measurement: {describe(m)}; "
            time.sleep(3.0)  # the first's flood cancelled: its queued work dropped
            m = measured()
    report = earlier + describe(m)
    print(report)
    assert m.alone.statuses == {200: m.alone.sent} and m.light.statuses == {200: m.light.sent}, report
    assert not over_twice_alone(m.alone, m.light), report
    # "Capacity minus B's share", B's share as model time: the seconds a second the service
    # charges B beside A (rewardserve_tenant_model_seconds), which must stay near what B's
    # work takes alone. B's items come one to a forward and cost more model time each than
    # A's batched ones, so what B leaves A is less than capacity less B's items/s. The
    # model is never idle while A has work queued (busy). What is left is the machine's own
    # noise: A's cost per item moves by ~10% from one 15 s window to the next on 2-vCPU
    # VMs, so A's capacity is read before and after B's window, and the bar is 85%
    # (bench/results/issue-23-tenants.md). A measurement short of it is made once more,
    # the same way, and the second must pass: a stall of the machine's own seldom spoils
    # two in a row, where a scheduler that starves A fails both.
    assert m.busy_beside >= 0.97, report
    assert m.light_share_beside is not None and m.light_share_beside <= 1.3 * m.light_share, report
    assert m.beside >= A_SHARE * m.left_for_a, report


def describe(m: Measured) -> str:
    retried = "".join(
        f"an earlier window beside A p50/p99 {w.quantile(0.5):.3f}/{w.quantile(0.99):.3f} s "
        f"(worst {max(w.latencies, default=float('nan')):.3f}); "
        for w in m.retried
    )
    return retried + (
        f"B alone p50/p99 {m.alone.quantile(0.5):.3f}/{m.alone.quantile(0.99):.3f} s, beside A "
        f"{m.light.quantile(0.5):.3f}/{m.light.quantile(0.99):.3f} s (worst {max(m.light.latencies):.3f}); "
        f"A alone {m.capacity:.2f} items/s, beside B {m.beside:.2f}, B {m.light.items_per_s:.2f} "
        f"taking {m.light_share:.1%} of the model alone, {m.light_share_beside:.1%} beside A: A gets "
        f"{m.beside / m.left_for_a:.1%} of what B leaves, {m.beside / (m.capacity - m.light.items_per_s):.1%} "
        f"of capacity - B items/s; the model busy {m.busy_beside:.1%} of the shared window"
    )


def over_twice_alone(alone: LoadResult, beside: LoadResult) -> bool:
    """B's p99 beside A past 2x its p99 alone: the window is measured once more, A still
    flooding. A p99 of 111 requests is the second worst, and one stall of the machine's
    own moves it; two windows in a row past 2x is the scheduler's doing."""
    return beside.statuses != {200: beside.sent} or beside.quantile(0.99) > 2 * alone.quantile(0.99)
