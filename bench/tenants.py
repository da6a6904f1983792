"""Two training jobs on one reward model, in one run: tenant B's latency alone, and while
tenant A floods the model open-loop with 10x B's load, with tenants configured (weighted
fair queueing) and without (one queue, oldest first).

    .venv/bin/python bench/tenants.py [--seconds 8] [--b-rate 4] [--seed N]

B sends one item every 1/b-rate seconds; A sends ten times as many, each request fired
on schedule whatever became of the last (open loop; A's refusals, 429, are counted).
The model is a Qwen3 classifier (hidden 256, 4 layers, random weights), items ~300
tokens of fresh words per run.
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


async def traffic(url: str, rate: float, seconds: float, key: str, rng: random.Random) -> dict:
    """Open loop: a request every 1/rate s for ``seconds``; latencies of the answered."""
    import httpx

    latencies: list[float] = []
    refused = failed = 0

    async def one(http: httpx.AsyncClient) -> None:
        nonlocal refused, failed
        start = time.perf_counter()
        try:
            response = await http.post(url + "/v1/score", json={"model": "rm", "items": [item(rng)]},
                                       headers={"authorization": f"Bearer {key}"})
        except httpx.HTTPError:
            failed += 1
            return
        if response.status_code == 429:
            refused += 1
        elif response.status_code == 200:
            latencies.append(time.perf_counter() - start)
        else:
            failed += 1

    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=400)) as http:
        tasks = []
        begin = time.perf_counter()
        k = 0
        while time.perf_counter() - begin < seconds:
            tasks.append(asyncio.ensure_future(one(http)))
            k += 1
            await asyncio.sleep(max(0.0, begin + k / rate - time.perf_counter()))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - begin
    latencies.sort()
    p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else float("nan")  # noqa: E731
    return {"sent": k, "answered": len(latencies), "refused": refused, "failed": failed,
            "p50": p(0.5), "p99": p(0.99), "items_per_s": len(latencies) / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--b-rate", type=float, default=4.0)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = fresh_seed(args.seed)
    rng = random.Random(seed)

    from tests.builders import build_sequence_classifier
    from tests.harness import serve_subprocess

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rm = build_sequence_classifier(Path(tmp) / "rm", hidden=256, layers=4, heads=4, head_dim=64,
                                       max_positions=1024)
        tenants = Path(tmp) / "tenants.yaml"
        tenants.write_text("tenants:\n  - {name: a, keys: [key-a]}\n  - {name: b, keys: [key-b]}\n")
        spec = [{"name": "rm", "source": str(rm), "options": {"score_cache_size": 0}}]
        for label, extra in (("tenants (fair queueing)", {"REWARDSERVE_TENANTS_FILE": str(tenants)}),
                             ("no tenants (one queue)", {"REWARDSERVE_API_KEYS": "key-a,key-b"})):
            env = {"REWARDSERVE_MODELS": json.dumps(spec), "REWARDSERVE_LOG_LEVEL": "warning",
                   "REWARDSERVE_COMPILE": "false", **extra}
            with serve_subprocess("--no-builtin-rules", env=env) as url:
                asyncio.run(traffic(url, 20, 1.0, "key-b", rng))  # warm
                alone = asyncio.run(traffic(url, args.b_rate, args.seconds, "key-b", rng))

                async def both():
                    return await asyncio.gather(traffic(url, args.b_rate * 10, args.seconds, "key-a", rng),
                                                traffic(url, args.b_rate, args.seconds, "key-b", rng))

                flood, b = asyncio.run(both())
            rows.append((label, alone, b, flood))

    print()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; seed {seed}; B {args.b_rate:g} req/s, A {args.b_rate * 10:g} "
          f"req/s open loop, {args.seconds:g} s, 1 item (~300 tokens) per request")
    print(f"{'':26}{'B alone p50/p99 s':>20}{'B with A p50/p99 s':>22}{'p99 ratio':>11}{'A items/s':>11}"
          f"{'A 429s':>8}")
    for label, alone, b, flood in rows:
        print(f"{label:26}{alone['p50']:>9.3f}/{alone['p99']:<10.3f}{b['p50']:>11.3f}/{b['p99']:<10.3f}"
              f"{b['p99'] / alone['p99']:>11.2f}{flood['items_per_s']:>11.2f}{flood['refused']:>8}")


if __name__ == "__main__":
    main()
