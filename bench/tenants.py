"""Two training jobs on one reward model, in one run: tenant B's latency alone, and while
tenant A floods the model open-loop with 10x B's load, with tenants configured (weighted
fair queueing; B's batches run between two layers of A's, or, with ``layer_boundaries:
false``, after A's whole batch) and without (one queue, oldest first).

    .venv/bin/python bench/tenants.py [--seconds 8] [--b-rate 4] [--a-items 10] [--batch-ms MS] [--seed N]
                                      [--hidden 256] [--layers 4] [--no-compile]

B sends one item every 1/b-rate seconds; A sends ten times as many items (``--a-items``
per request, 10 by default: a trainer's batch; 1 makes it a flood of small requests), each
request fired on schedule whatever became of the last (open loop; A's refusals, 429, are
counted), over raw sockets (bench/open_loop.py) so the load costs the 2 cores little.
A alone: A's flood with B idle, the machine's capacity for A.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from bench.compare import cpu_name, fresh_seed  # noqa: E402


def item(rng: random.Random) -> dict:
    from tests.builders import random_text

    return {"prompt": random_text(rng, 40), "response": random_text(rng, 160)}


def traffic(url: str, rate: float, seconds: float, key: str, rng: random.Random, items: int = 1):
    """Open loop: a request of ``items`` items every 1/rate s for ``seconds``."""
    from bench.open_loop import open_loop

    return open_loop(url, "/v1/score", lambda: {"model": "rm", "items": [item(rng) for _ in range(items)]},
                     rate, seconds, key)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--b-rate", type=float, default=4.0)
    parser.add_argument("--a-items", type=int, default=10,
                        help="items per request of A (A sends 10x B's items at rate 10 x b-rate / a-items)")
    parser.add_argument("--batch-ms", type=float, default=None, help="REWARDSERVE_TENANT_BATCH_MS")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--hidden", type=int, default=256, help="the model's hidden size (heads of 64)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--no-compile", action="store_true",
                        help="eager layers (REWARDSERVE_COMPILE=false); the service compiles by default")
    args = parser.parse_args()
    seed = fresh_seed(args.seed)
    rng = random.Random(seed)

    from tests.builders import build_sequence_classifier
    from tests.harness import serve_subprocess

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rm = build_sequence_classifier(Path(tmp) / "rm", hidden=args.hidden, layers=args.layers,
                                       heads=args.hidden // 64, head_dim=64, max_positions=1024)
        tenants = Path(tmp) / "tenants.yaml"
        tenants.write_text("tenants:\n  - {name: a, keys: [key-a]}\n  - {name: b, keys: [key-b]}\n")
        fair = {"REWARDSERVE_TENANTS_FILE": str(tenants)}
        for label, extra, options in (("tenants (fair queueing)", fair, {}),
                                      ("tenants, whole batches", fair, {"layer_boundaries": False}),
                                      ("no tenants (one queue)", {"REWARDSERVE_API_KEYS": "key-a,key-b"}, {})):
            spec = [{"name": "rm", "source": str(rm), "options": {"score_cache_size": 0, **options}}]
            env = {"REWARDSERVE_MODELS": json.dumps(spec), "REWARDSERVE_LOG_LEVEL": "warning",
                   "REWARDSERVE_COMPILE": str(not args.no_compile).lower(), **extra}
            if args.batch_ms is not None:
                env["REWARDSERVE_TENANT_BATCH_MS"] = str(args.batch_ms)
            with serve_subprocess("--no-builtin-rules", env=env) as url:
                asyncio.run(traffic(url, 20, 1.0, "key-b", rng))  # warm
                alone = asyncio.run(traffic(url, args.b_rate, args.seconds, "key-b", rng))
                time.sleep(6)  # B counts as idle again (service/tenants.py ACTIVE_S)
                a_rate = args.b_rate * 10 / args.a_items
                capacity = asyncio.run(traffic(url, a_rate, args.seconds, "key-a", rng, args.a_items))

                async def both():
                    return await asyncio.gather(traffic(url, a_rate, args.seconds, "key-a", rng, args.a_items),
                                                traffic(url, args.b_rate, args.seconds, "key-b", rng))

                flood, b = asyncio.run(both())
            rows.append((label, alone, b, flood, capacity))

    print()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; seed {seed}; B {args.b_rate:g} req/s of 1 item, A "
          f"{args.b_rate * 10 / args.a_items:g} req/s of {args.a_items} items (10x B's items), open loop, "
          f"{args.seconds:g} s; items ~300 tokens; model hidden {args.hidden}, {args.layers} layers")
    print(f"{'':26}{'B alone p50/p99 s':>20}{'B with A p50/p99 s':>22}{'p99 ratio':>11}{'A alone it/s':>14}"
          f"{'A with B it/s':>15}{'B it/s':>8}{'A 429s':>8}")
    for label, alone, b, flood, capacity in rows:
        print(f"{label:26}{alone.quantile(.5):>9.3f}/{alone.quantile(.99):<10.3f}{b.quantile(.5):>11.3f}/"
              f"{b.quantile(.99):<10.3f}{b.quantile(.99) / alone.quantile(.99):>11.2f}{capacity.items_per_s:>14.2f}"
              f"{flood.items_per_s:>15.2f}{b.items_per_s:>8.2f}{flood.statuses.get(429, 0):>8}")
    print("A alone: the machine's capacity (A's flood with B idle); A with B should reach capacity - B it/s.")


if __name__ == "__main__":
    main()
