"""The service's resident memory with the bench model loaded and after each round of a
workload, in one run: it must not grow from round to round.

    .venv/bin/python bench/memory.py [--rounds 4] [--requests 64] [--seed N]

The bench model of bench/compare.py (Qwen3 classifier, hidden 1024, 8 layers) in a real
service process; each round sends ``requests`` requests of 8 fresh items (GRPO groups of
8 with a shared prompt) from 8 callers, score cache off. RSS of the service process and
its children (rule pool workers), from /proc, after each round settles.
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


def rss_mb(pid: int) -> float:
    """The process's and its children's resident memory."""
    import psutil

    root = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20


async def round_of(url: str, requests: int, rng: random.Random) -> None:
    import httpx

    from tests.builders import random_text

    async def one(http, k):
        prompt = random_text(rng, 60)
        items = [{"prompt": prompt, "response": random_text(rng, 120), "group_id": "g"} for _ in range(8)]
        (await http.post(url + "/v1/score", json={"model": "rm", "items": items})).raise_for_status()

    async with httpx.AsyncClient(timeout=600) as http:
        queue = list(range(requests))

        async def caller():
            while queue:
                await one(http, queue.pop())

        await asyncio.gather(*(caller() for _ in range(8)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = fresh_seed(args.seed)
    rng = random.Random(seed)

    from tests.builders import build_sequence_classifier
    from tests.harness import serve_process

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_sequence_classifier(Path(tmp) / "rm", "qwen3", hidden=1024, layers=8, heads=8,
                                              head_dim=128, max_positions=4096)
        spec = [{"name": "rm", "source": str(model_dir), "options": {"score_cache_size": 0}}]
        env = {"REWARDSERVE_MODELS": json.dumps(spec), "REWARDSERVE_LOG_LEVEL": "warning"}
        with serve_process("--no-builtin-rules", env=env) as (url, proc):
            time.sleep(2)
            rows.append(("loaded", rss_mb(proc.pid)))
            for k in range(args.rounds):
                start = time.perf_counter()
                asyncio.run(round_of(url, args.requests, rng))
                seconds = time.perf_counter() - start
                time.sleep(12)  # the service trims freed memory every 10 s
                rows.append((f"after round {k + 1} ({args.requests * 8 / seconds:.1f} items/s)", rss_mb(proc.pid)))

    print()
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; seed {seed}; {args.requests} requests x 8 items per round")
    print(f"{'':40}{'RSS MiB':>10}")
    for label, mb in rows:
        print(f"{label:40}{mb:>10.0f}")
    growth = rows[-1][1] - rows[1][1]
    print(f"growth from round 1 to round {args.rounds}: {growth:+.0f} MiB")


if __name__ == "__main__":
    main()
