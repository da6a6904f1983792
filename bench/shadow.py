"""What shadow scoring costs the answers, in one run: one caller's latency on a model
without a shadow, with a shadow scoring every request (a candidate of the same size), and
with a shadow that fails (its checkpoint cannot load), requests interleaved so the three
see the same machine (in blocks, ABCABC).

    .venv/bin/python bench/shadow.py [--requests 150] [--items 4] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from bench.compare import cpu_name, fresh_seed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--items", type=int, default=4)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = fresh_seed(args.seed)
    rng = random.Random(seed)

    import httpx

    from tests.builders import build_sequence_classifier, random_text
    from tests.harness import serve_subprocess

    with tempfile.TemporaryDirectory() as tmp:
        rm = build_sequence_classifier(Path(tmp) / "rm", hidden=256, layers=4, heads=4, head_dim=64, max_positions=1024)
        broken = Path(tmp) / "broken"
        shutil.copytree(rm, broken)
        (broken / "model.safetensors").write_bytes((broken / "model.safetensors").read_bytes()[:1000])
        cache = {"score_cache_size": 0}
        spec = [
            {"name": "plain", "source": str(rm), "options": cache},
            {"name": "shadowed", "source": str(rm), "options": cache, "shadow": {"model": "candidate", "fraction": 1}},
            {"name": "candidate", "source": str(rm), "options": cache},
            {"name": "guarded", "source": str(rm), "options": cache, "shadow": {"model": "broken", "fraction": 1}},
            {"name": "broken", "source": str(broken)},
        ]
        env = {
            "REWARDSERVE_MODELS": json.dumps(spec),
            "REWARDSERVE_LOG_LEVEL": "warning",
            "REWARDSERVE_COMPILE": "false",
            "REWARDSERVE_KEEP_GOING": "true",
        }
        latencies: dict[str, list[float]] = {"plain": [], "shadowed": [], "guarded": []}
        with serve_subprocess("--no-builtin-rules", env=env) as url, httpx.Client(timeout=120) as http:
            # Blocks of requests to one model at a time, in two rounds (ABCABC): a shadow
            # computes while the caller's next request does, so its cost shows in its
            # own block.
            for round_ in range(3):
                for model in latencies:
                    for _ in range(10 if round_ == 0 else args.requests // 2):
                        items = [
                            {"prompt": random_text(rng, 30), "response": random_text(rng, 120), "group_id": "g"}
                            for _ in range(args.items)
                        ]
                        start = time.perf_counter()
                        response = http.post(url + "/v1/score", json={"model": model, "items": items})
                        response.raise_for_status()
                        if round_ > 0:  # round 0 warms up
                            latencies[model].append(time.perf_counter() - start)
                    time.sleep(1.0)  # the block's last shadows finish
            report = http.get(url + "/v1/models/shadowed/shadow").json()
            failed = http.get(url + "/v1/models/guarded/shadow").json()

    print()
    print(
        f"CPU: {cpu_name()}, {os.cpu_count()} cores; seed {seed}; {args.requests} requests of {args.items} items "
        "each per model, one caller, blocks ABCABC"
    )
    print(f"{'':34}{'p50 ms':>10}{'p99 ms':>10}")
    for model, label in (
        ("plain", "no shadow"),
        ("shadowed", "shadow on every request"),
        ("guarded", "shadow that fails"),
    ):
        values = sorted(latencies[model])
        p50, p99 = values[len(values) // 2], values[min(len(values) - 1, int(0.99 * len(values)))]
        print(f"{label:34}{p50 * 1000:>10.1f}{p99 * 1000:>10.1f}")
    print(
        f"shadow report: {report['requests']} scored, {report['skipped']} skipped, spearman {report['spearman']}; "
        f"failing shadow: {failed['failed']} failed"
    )


if __name__ == "__main__":
    main()
