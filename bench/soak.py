"""Soak: a bounded steady load at 80% of measured capacity, watching errors, latency and
memory.

    .venv/bin/python bench/soak.py [--minutes 10] [--load 0.8]

Serves a small Qwen3 reward model and the math rule in one process, measures capacity
with 16 closed-loop callers, warms up for a minute, then sends requests at ``load`` x
capacity on a fixed schedule (open loop: a slow answer does not slow the sender) for
``--minutes``, and prints requests, errors, p50 / p99 latency and the server's RSS at
start and end (each the mean of a minute of 5-second samples: RSS swings with the work
in flight).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def request_body(rng: random.Random) -> dict:
    from tests.builders import random_text

    if rng.random() < 0.75:
        items = [{"prompt": random_text(rng, rng.randint(5, 30)), "response": random_text(rng, rng.randint(5, 80))}
                 for _ in range(4)]
        return {"model": "rm", "items": items}
    k = rng.randint(1, 50)
    items = [{"response": f"\\boxed{{{k}}}", "reference": str(k + rng.randint(0, 1))} for _ in range(2)]
    return {"model": "math", "items": items}


async def closed_loop(url: str, seconds: float, callers: int = 16) -> float:
    import httpx

    rng, done, stop = random.Random(1), 0, time.monotonic() + seconds

    async def caller(http):
        nonlocal done
        while time.monotonic() < stop:
            (await http.post(url + "/v1/score", json=request_body(rng))).raise_for_status()
            done += 1

    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=callers)) as http:
        start = time.monotonic()
        await asyncio.gather(*(caller(http) for _ in range(callers)))
        return done / (time.monotonic() - start)


async def open_loop(url: str, rate: float, seconds: float, pid: int, samples: list | None = None
                    ) -> tuple[list[float], int, int]:
    import httpx

    rng = random.Random(2)
    next_report = time.monotonic() + 60
    next_sample = time.monotonic()
    latencies: list[float] = []
    errors = sent = 0
    tasks = []

    async def one(http, body):
        nonlocal errors
        start = time.monotonic()
        try:
            response = await http.post(url + "/v1/score", json=body)
            if response.status_code != 200:
                errors += 1
                print(f"  error: {response.status_code} {response.text[:200]}", flush=True)
        except httpx.HTTPError as exc:
            errors += 1
            print(f"  error: {type(exc).__name__}: {exc}", flush=True)
        latencies.append(time.monotonic() - start)

    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=256)) as http:
        begin = time.monotonic()
        while (now := time.monotonic()) - begin < seconds:
            tasks.append(asyncio.ensure_future(one(http, request_body(rng))))
            sent += 1
            if samples is not None and now >= next_sample:
                samples.append((now - begin, rss_mb(pid)))
                next_sample += 5
            if now >= next_report:
                print(f"  {now - begin:5.0f} s: {sent} sent, {errors} errors, RSS {rss_mb(pid):.0f} MB", flush=True)
                next_report += 60
                tasks = [t for t in tasks if not t.done()]
            await asyncio.sleep(max(0.0, begin + sent / rate - time.monotonic()))
        await asyncio.gather(*tasks)
    return latencies, errors, sent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--load", type=float, default=0.8)
    args = parser.parse_args()

    from tests.builders import build_sequence_classifier
    from tests.harness import free_port, wait_ready

    with tempfile.TemporaryDirectory() as tmp:
        model = build_sequence_classifier(Path(tmp) / "rm", "qwen3", hidden=256, layers=4, heads=4, head_dim=64)
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "rewardserve.service.cli", "serve", "--port", str(port),
                                 "--model", f"rm={model}"], env={**os.environ, "REWARDSERVE_LOG_LEVEL": "warning"},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, proc, 120)
            capacity = asyncio.run(closed_loop(url, 20))
            rate = args.load * capacity
            print(f"capacity {capacity:.1f} requests/s; warming up 1 min, then {rate:.1f}/s for "
                  f"{args.minutes:g} min", flush=True)
            asyncio.run(open_loop(url, rate, 60, proc.pid))  # every shape seen once, caches filled
            samples: list[tuple[float, float]] = []
            latencies, errors, sent = asyncio.run(open_loop(url, rate, args.minutes * 60, proc.pid, samples))
            # RSS swings with the batches in flight: compare the first and last minutes' means.
            first = [m for t, m in samples if t < 60]
            last = [m for t, m in samples if t >= samples[-1][0] - 60]
            rss_start, rss_end = sum(first) / len(first), sum(last) / len(last)
            rss_peak = max(m for _, m in samples)
        finally:
            proc.terminate()
            proc.wait(timeout=60)

    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    print(f"requests {sent}, errors {errors} (target 0)")
    print(f"latency p50 {pct(0.50):.1f} ms, p99 {pct(0.99):.1f} ms")
    print(f"server RSS (mean of the first / last minute) {rss_start:.0f} MB at start, {rss_end:.0f} MB at end: "
          f"{(rss_end / rss_start - 1) * 100:+.1f}% (target < 5%); peak {rss_peak:.0f} MB")


if __name__ == "__main__":
    main()
