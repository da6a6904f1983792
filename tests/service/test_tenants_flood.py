"""Issue 23's fairness check on the wall clock, in a real service process: two tenants at
weights 1:1 on one model; A floods it open-loop with 10x B's load (bench/tenants.py
``measure``). B's p99 latency stays within 2x of B alone, and A is served about what the
machine serves A alone minus B's items (see the last assert).

It runs alone (``-m alone``, after the parallel tests) so nothing else takes the cores.
The model is big enough that one item's forward (~60 ms on the 2-core machines here)
outweighs a 2-core machine's scheduling noise; B sends sparsely enough that its own items
seldom queue, for long enough that its p99 is not its single worst request.
"""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from bench.tenants import measure
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
    with serve_subprocess("--no-builtin-rules", env=env) as url:
        # B 5 requests of one item a second over 22 s: its p99 over 110 requests; A 10x
        # B's items in requests of 10, ~3x what this model serves on 2 cores.
        m = asyncio.run(measure(url, b_rate=5.0, seconds=22.0, a_items=10, rng=random.Random(23)))
    report = (f"B alone p50/p99 {m.alone.quantile(.5):.3f}/{m.alone.quantile(.99):.3f} s, beside A "
              f"{m.light.quantile(.5):.3f}/{m.light.quantile(.99):.3f} s; A alone {m.capacity:.2f} items/s, "
              f"beside B {m.beside:.2f}, B {m.light.items_per_s:.2f}")
    print(report)
    assert m.alone.statuses == {200: m.alone.sent} and m.light.statuses == {200: m.light.sent}, report
    assert m.light.quantile(.99) <= 2 * m.alone.quantile(.99), report
    # The issue asks for all of capacity - B; A gets ~87% of it here. Each of B's items
    # comes alone in its own request: a one-item batch costs the model ~15% more per item
    # than one in A's batches (oneDNN at ~235 rows against ~700), and B's requests' own
    # handling takes the forward's cores. This bound catches capacity left idle (batches
    # cut short while shared gave 76%), not that remainder.
    assert m.beside >= 0.8 * (m.capacity - m.light.items_per_s), report
