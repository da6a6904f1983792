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

import pytest

from bench.open_loop import open_loop
from bench.tenants import body, measure
from tests.builders import build_sequence_classifier
from tests.harness import serve_subprocess


@pytest.mark.alone  # a wall clock against the whole machine
def test_a_flood_keeps_a_light_tenant_within_2x_of_its_latency_alone_and_takes_the_rest(tmp_path):
    rm = build_sequence_classifier(tmp_path / "rm", hidden=768, layers=6, heads=12, head_dim=64, max_positions=1024)
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text("tenants:\n  - {name: a, keys: [key-a]}\n  - {name: b, keys: [key-b]}\n")
    spec = [{"name": "rm", "source": str(rm), "options": {"score_cache_size": 0}}]
    env = {"REWARDSERVE_MODELS": json.dumps(spec), "REWARDSERVE_TENANTS_FILE": str(tenants_file),
           "REWARDSERVE_LOG_LEVEL": "warning"}
    rng = random.Random(23)
    with serve_subprocess("--no-builtin-rules", env=env) as url:
        # B keeps the model at most ~40% busy alone, whatever this CPU's speed (5 requests
        # a second where an item takes ~80 ms), and sends 111 requests in each window: its
        # p99 is not its single worst one. A sends 10x B's items in requests of 10: ~3x
        # what the model serves.
        probe = asyncio.run(open_loop(url, "/v1/score", body(rng, 1), 2.0, 3.0, "key-b"))
        b_rate = min(5.0, 0.4 / probe.quantile(.5))
        m = asyncio.run(measure(url, b_rate=b_rate, seconds=111 / b_rate, a_items=10, rng=rng))
    report = (f"B alone p50/p99 {m.alone.quantile(.5):.3f}/{m.alone.quantile(.99):.3f} s, beside A "
              f"{m.light.quantile(.5):.3f}/{m.light.quantile(.99):.3f} s (worst {max(m.light.latencies):.3f}); "
              f"A alone {m.capacity:.2f} items/s, beside B {m.beside:.2f}, B {m.light.items_per_s:.2f} "
              f"taking {m.light_share:.1%} of the model alone: A gets {m.beside / m.left_for_a:.1%} of what B "
              f"leaves, {m.beside / (m.capacity - m.light.items_per_s):.1%} of capacity - B items/s")
    print(report)
    assert m.alone.statuses == {200: m.alone.sent} and m.light.statuses == {200: m.light.sent}, report
    assert m.light.quantile(.99) <= 2 * m.alone.quantile(.99), report
    # "Capacity minus B's share", B's share as model time: B's items come one to a request,
    # and a one-item forward costs ~10% more per item than one of A's batched items. A gets
    # 93-98% of the model time B leaves here (89-93% of capacity less B's items/s); what is
    # missing is B's requests' own handling on the forward's two cores.
    assert m.beside >= 0.9 * m.left_for_a, report
