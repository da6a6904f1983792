"""Two training jobs on one reward model, in one run: tenant B's latency alone, and while
tenant A floods the model open-loop with 10x B's load, with tenants configured (weighted
fair queueing; B's batches run between two layers of A's, or, with ``layer_boundaries:
false``, after A's whole batch) and without (one queue, oldest first).

    .venv/bin/python bench/tenants.py [--seconds 8] [--b-rate 4] [--a-items 10] [--batch-ms MS] [--seed N]
                                      [--hidden 256] [--layers 4] [--no-compile]

B sends one item every 1/b-rate seconds; A sends ten times as many items (``--a-items``
per request, 10 by default: a trainer's batch; 1 makes it a flood of small requests), each
request fired on schedule whatever became of the last (open loop), over raw sockets
(bench/open_loop.py) so the load costs the 2 cores little.
A alone: A's flood with B idle, the machine's capacity for A, measured before B joins the
flood and after B leaves (``measure``; tests/service/test_tenants_flood.py runs it as
issue 23's check).
The model is a Qwen3 classifier (hidden 256, 4 layers by default, random weights), items
~300 tokens of fresh words per run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from bench.compare import cpu_name, fresh_seed  # noqa: E402
from bench.open_loop import LoadResult, open_loop  # noqa: E402


def body(rng: random.Random, items: int):
    """A request of ``items`` fresh items of ~300 tokens."""
    from tests.builders import random_text

    return lambda: {
        "model": "rm",
        "items": [{"prompt": random_text(rng, 40), "response": random_text(rng, 160)} for _ in range(items)],
    }


@dataclass
class Measured:
    alone: LoadResult  # B with A idle
    light: LoadResult  # B beside A's flood
    capacity: float  # A's items/s with B idle (before and after B): the machine's capacity for A
    beside: float  # A's items/s beside B
    light_share: float  # of the model's time B's work takes alone (its forwards' seconds a second)
    busy_beside: float  # of the time A and B share the model, the share it spends in forwards
    light_share_beside: float | None  # B's model seconds a second beside A (tenants' counts; None without)
    retried: list[LoadResult] = field(default_factory=list)  # B's earlier windows beside A (``measure``'s again)

    @property
    def left_for_a(self) -> float:
        """A's items/s on the model time B's work leaves: B's share is its model seconds
        a second beside A (as alone where the service has no tenants). A one-item forward
        costs more per item than one of A's batched items, so this is less than capacity
        - B's items/s."""
        share = self.light_share if self.light_share_beside is None else self.light_share_beside
        return self.capacity * (1.0 - share)


# A key of no tenant: the operator's view of /metrics (a tenant's key sees only its own
# series, not the service's counts).
OPERATOR_KEY = "key-operator"


async def served(http, url: str) -> tuple[float, float, float, float | None]:
    """Now, the items the service has scored, its forwards' seconds, and the model time it
    has charged tenant B (None where it has no tenants): its own counts, in one read."""
    from tests.harness import metric

    text = (await http.get(url + "/metrics", headers={"authorization": f"Bearer {OPERATOR_KEY}"})).text
    charged = "rewardserve_tenant_model_seconds_total"
    return (
        time.perf_counter(),
        metric(text, "rewardserve_items_scored_total"),
        metric(text, "rewardserve_forward_duration_seconds_sum"),
        metric(text, charged, tenant="b") if charged in text else None,
    )


async def measure(
    url: str,
    b_rate: float,
    seconds: float,
    a_items: int,
    rng: random.Random,
    again: Callable[[LoadResult, LoadResult], bool] | None = None,
    capacity_s: float | None = None,
) -> Measured:
    """B alone; then A's flood alone, B beside it, and A alone again (A's capacity: the
    two windows alone, around the one beside B). A's flood never stops between its
    windows, and its items/s are read from the service's counts over each window, less
    B's: counting A's answers at the client would credit A with its backlog drained after
    B stopped (at the whole machine's speed).

    ``again(alone, beside)``: whether to measure B beside A once more, the flood still
    running (one more window at most; the last one is returned, the earlier ones in
    ``Measured.retried``).

    ``capacity_s``: each of A's two windows alone (``seconds`` by default): A's rate is a
    mean over many batches, where B's p99 needs many requests."""
    import httpx

    from rewardserve.engine.tenants import ACTIVE_S

    a_rate = b_rate * 10 / a_items
    capacity_s = seconds if capacity_s is None else capacity_s
    async with httpx.AsyncClient(timeout=30) as http:
        await open_loop(url, "/v1/score", body(rng, 1), b_rate, 2.0, "key-b")  # warm
        _, _, busy_before, _ = await served(http, url)
        alone = await open_loop(url, "/v1/score", body(rng, 1), b_rate, seconds, "key-b")
        _, _, busy_after, _ = await served(http, url)
        flood = asyncio.ensure_future(
            open_loop(url, "/v1/score", body(rng, a_items), a_rate, 10 * seconds + 60, "key-a")
        )
        await asyncio.sleep(ACTIVE_S + 1.0)  # B counts as idle (A alone gets whole batches); A's queue fills
        t0, before, _, _ = await served(http, url)
        await asyncio.sleep(capacity_s)
        retried: list[LoadResult] = []
        while True:
            t1, middle, busy_middle, b_before = await served(http, url)
            light = await open_loop(url, "/v1/score", body(rng, 1), b_rate, seconds, "key-b")
            t2, after, busy_end, b_after = await served(http, url)
            if retried or again is None or not again(alone, light):
                break
            retried.append(light)
        await asyncio.sleep(ACTIVE_S + 1.0)  # A alone again: the CPU's speed drifts by a few % over minutes
        t3, again, _, _ = await served(http, url)
        await asyncio.sleep(capacity_s)
        t4, end, _, _ = await served(http, url)
    flood.cancel()
    b_share = None if b_before is None or b_after is None else (b_after - b_before) / (t2 - t1)
    capacity = (middle - before + end - again) / (t1 - t0 + t4 - t3)
    return Measured(
        alone,
        light,
        capacity,
        (after - middle - light.items) / (t2 - t1),
        (busy_after - busy_before) / alone.elapsed,
        (busy_end - busy_middle) / (t2 - t1),
        b_share,
        retried,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--b-rate", type=float, default=4.0)
    parser.add_argument(
        "--a-items",
        type=int,
        default=10,
        help="items per request of A (A sends 10x B's items at rate 10 x b-rate / a-items)",
    )
    parser.add_argument("--batch-ms", type=float, default=None, help="REWARDSERVE_TENANT_BATCH_MS")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--hidden", type=int, default=256, help="the model's hidden size (heads of 64)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument(
        "--no-compile",
        action="store_true",
        help="eager layers (REWARDSERVE_COMPILE=false); the service compiles by default",
    )
    args = parser.parse_args()
    seed = fresh_seed(args.seed)
    rng = random.Random(seed)

    from tests.builders import build_sequence_classifier
    from tests.harness import serve_subprocess

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rm = build_sequence_classifier(
            Path(tmp) / "rm",
            hidden=args.hidden,
            layers=args.layers,
            heads=args.hidden // 64,
            head_dim=64,
            max_positions=1024,
        )
        tenants = Path(tmp) / "tenants.yaml"
        tenants.write_text("tenants:\n  - {name: a, keys: [key-a]}\n  - {name: b, keys: [key-b]}\n")
        fair = {"REWARDSERVE_TENANTS_FILE": str(tenants), "REWARDSERVE_API_KEYS": OPERATOR_KEY}
        one_queue = {"REWARDSERVE_API_KEYS": f"key-a,key-b,{OPERATOR_KEY}"}
        for label, extra, options in (
            ("tenants (fair queueing)", fair, {}),
            ("tenants, whole batches", fair, {"layer_boundaries": False}),
            ("no tenants (one queue)", one_queue, {}),
        ):
            spec = [{"name": "rm", "source": str(rm), "options": {"score_cache_size": 0, **options}}]
            env = {
                "REWARDSERVE_MODELS": json.dumps(spec),
                "REWARDSERVE_LOG_LEVEL": "warning",
                "REWARDSERVE_COMPILE": str(not args.no_compile).lower(),
                **extra,
            }
            if args.batch_ms is not None:
                env["REWARDSERVE_TENANT_BATCH_MS"] = str(args.batch_ms)
            with serve_subprocess("--no-builtin-rules", env=env) as url:
                rows.append((label, asyncio.run(measure(url, args.b_rate, args.seconds, args.a_items, rng))))

    print()
    print(
        f"CPU: {cpu_name()}, {os.cpu_count()} cores; seed {seed}; B {args.b_rate:g} req/s of 1 item, A "
        f"{args.b_rate * 10 / args.a_items:g} req/s of {args.a_items} items (10x B's items), open loop, "
        f"{args.seconds:g} s; items ~300 tokens; model hidden {args.hidden}, {args.layers} layers"
    )
    print(
        f"{'':26}{'B alone p50/p99 s':>20}{'B with A p50/p99 s':>22}{'p99 ratio':>11}{'A alone it/s':>14}"
        f"{'A with B it/s':>15}{'B it/s':>8}{'A / (cap - B)':>15}{'A / left':>10}{'busy':>6}{'B share':>13}"
    )
    for label, m in rows:
        print(
            f"{label:26}{m.alone.quantile(0.5):>9.3f}/{m.alone.quantile(0.99):<10.3f}{m.light.quantile(0.5):>11.3f}/"
            f"{m.light.quantile(0.99):<10.3f}{m.light.quantile(0.99) / m.alone.quantile(0.99):>11.2f}"
            f"{m.capacity:>14.2f}{m.beside:>15.2f}{m.light.items_per_s:>8.2f}"
            f"{m.beside / (m.capacity - m.light.items_per_s):>15.2f}{m.beside / m.left_for_a:>10.2f}"
            f"{m.busy_beside:>6.2f}{m.light_share:>7.2f}/"
            f"{float('nan') if m.light_share_beside is None else m.light_share_beside:<5.2f}"
        )
    print(
        "A alone: the machine's capacity (A's flood with B idle); A with B should reach capacity - B it/s. "
        "A's items/s are the service's counts over each window. left: A's capacity on the model time "
        "B's work leaves. B share: B's model seconds a second alone / beside A (the service's per-tenant "
        "count; with tenants, left uses it). busy: the model's forwards' seconds a second while A and B share it."
    )


if __name__ == "__main__":
    main()
