"""Multimodal rewards: rewardserve over HTTP vs a raw in-process forward, in one run.

    .venv/bin/python bench/vision.py [--items 64] [--callers 16] [--per-request 4]

A mid-size Qwen2-VL reward model (text hidden 1024 x 8 layers, vision depth 4, random
weights, value head) scores items of one 224x224 PNG plus a question and an answer:
  raw:      the PIL image processor and tokenizer run up front (not timed), then the
            backbone + head over the prepared inputs, best of batch sizes 1 / 4 / 16;
  service:  `rewardserve serve`, 16 concurrent callers sending data URLs, which the
            service decodes, checks, preprocesses and scores.
Raw and service alternate for --rounds rounds; each keeps its best time.
"""

from __future__ import annotations

import argparse
import asyncio
import io
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
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def build_items(n: int, seed: int = 0) -> list[dict]:
    import numpy as np
    from PIL import Image

    from rewardserve.client.images import image_part
    from tests.builders import random_text

    rng = random.Random(seed)
    items = []
    for i in range(n):
        pixels = np.random.RandomState(i).randint(0, 255, (224, 224, 3), dtype=np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="PNG")
        items.append(
            {
                "id": str(i),
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            image_part(buffer.getvalue()),
                            {"type": "text", "text": random_text(rng, rng.randint(5, 15))},
                        ],
                    },
                    {"role": "assistant", "content": random_text(rng, rng.randint(10, 40))},
                ],
            }
        )
    return items


def raw(model_dir: Path, items: list[dict], batch_sizes) -> tuple[dict[int, float], list[float]]:
    """Inputs prepared with the model's own processor pieces, then timed forward passes."""
    import torch

    from rewardserve.models.kinds import build_model
    from rewardserve.models.plan import Unit
    from rewardserve.models.spec import ModelSpec
    from rewardserve.protocol import Item, ScoreOptions

    model = build_model(ModelSpec(name="raw", kind="vlm", source=str(model_dir)))
    model.load()  # same weights, same oneDNN linears
    works = model.prepare([Item.model_validate(i) for i in items], ScoreOptions())
    order = sorted(range(len(works)), key=lambda k: works[k].length)
    times, scores = {}, [0.0] * len(works)
    model.run([Unit(works[0].length, works[0])])
    for bs in batch_sizes:
        start = time.perf_counter()
        for k in range(0, len(order), bs):
            rows = order[k : k + bs]
            for r, (result,) in zip(rows, model.run([Unit(works[i].length, works[i]) for i in rows])):
                scores[r] = result.score
        times[bs] = time.perf_counter() - start
        print(f"  raw batch {bs:>2}: {times[bs]:.2f} s", flush=True)
    del model
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return times, scores


async def drive(url: str, items: list[dict], callers: int, per_request: int):
    import httpx

    queue: asyncio.Queue = asyncio.Queue()
    for k in range(0, len(items), per_request):
        queue.put_nowait(items[k : k + per_request])
    scores: dict[str, float] = {}

    async def caller(http):
        while not queue.empty():
            chunk = queue.get_nowait()
            response = await http.post(url + "/v1/score", json={"model": "vl", "items": chunk})
            response.raise_for_status()
            for result in response.json()["results"]:
                scores[result["id"]] = result["score"]

    async with httpx.AsyncClient(timeout=900, limits=httpx.Limits(max_connections=callers)) as http:
        (await http.post(url + "/v1/score", json={"model": "vl", "items": items[:1]})).raise_for_status()
        start = time.perf_counter()
        await asyncio.gather(*(caller(http) for _ in range(callers)))
        return time.perf_counter() - start, scores


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--per-request", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    from tests.builders import build_qwen2_vl
    from tests.harness import serve_subprocess

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_qwen2_vl(
            Path(tmp) / "qwen2-vl-1024x8", hidden=1024, layers=8, vision_depth=4, max_pixels=224 * 224
        )
        items = build_items(args.items)
        print(f"{len(items)} items, one 224x224 PNG each", flush=True)
        print("raw in-process forward (inputs prepared beforehand):", flush=True)
        times, raw_scores = raw(model_dir, items, (1, 4, 16))
        best_bs = min(times, key=times.get)
        raw_s, service_s = times[best_bs], float("inf")
        spec = [{"name": "vl", "kind": "vlm", "source": str(model_dir)}]
        with serve_subprocess(
            "--no-builtin-rules", env={"REWARDSERVE_MODELS": json.dumps(spec), "REWARDSERVE_LOG_LEVEL": "warning"}
        ) as url:
            for round_ in range(args.rounds):
                if round_:
                    again, _ = raw(model_dir, items, (best_bs,))
                    raw_s = min(raw_s, again[best_bs])
                seconds, scores = asyncio.run(drive(url, items, args.callers, args.per_request))
                print(f"  service: {seconds:.2f} s", flush=True)
                service_s = min(service_s, seconds)
        diff = max(abs(scores[i["id"]] - raw_scores[k]) for k, i in enumerate(items))

    print()
    print(f"{'':30}{'images/s':>10}")
    print(f"{f'raw forward (batch {best_bs})':30}{len(items) / raw_s:>10.2f}")
    print(f"{'rewardserve over HTTP':30}{len(items) / service_s:>10.2f}")
    print(f"ratio service / raw: {raw_s / service_s:.3f}   (target >= 0.85)")
    print(f"max |score difference| service vs raw: {diff:.2e}")


if __name__ == "__main__":
    main()
