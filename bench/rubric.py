"""Rubric judge criteria: shared-context scoring vs independent passes, in one run.

    .venv/bin/python bench/rubric.py [--items 100] [--criteria 4] [--callers 16]

A mid-size Qwen3 causal LM judge (hidden 1024, 8 layers, random weights) grades 100 items
(question + a few-hundred-token response) on 4 judge criteria each:
  shared:       POST /v1/rubric: per item the question and response run once, each
                criterion is a short continuation attending to them (packed rows);
  independent:  POST /v1/verify with the same criterion template, one full pass per
                (item, criterion), through the same server and batcher.
The judge cache is off, and both sides' scores are compared.
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
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

CRITERIA = [
    "The final answer is stated clearly.",
    "The reasoning has no arithmetic mistakes.",
    "The response stays on the question asked.",
    "The response is concise and avoids repetition.",
    "Units are given where the question needs them.",
    "The response explains why the method works.",
]


def build_judge(out: Path) -> Path:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from tests.builders import build_tokenizer

    tokenizer = build_tokenizer("qwen")
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    Qwen3ForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def build_items(n: int, seed: int = 0) -> list[dict]:
    from tests.builders import random_text

    rng = random.Random(seed)
    return [
        {
            "id": str(i),
            "prompt": random_text(rng, rng.randint(20, 40)),
            "response": random_text(rng, rng.randint(150, 250)),
        }
        for i in range(n)
    ]


async def run(url: str, bodies: list[tuple[str, dict]], callers: int) -> tuple[float, list[dict]]:
    import httpx

    queue: asyncio.Queue = asyncio.Queue()
    for k, job in enumerate(bodies):
        queue.put_nowait((k, job))
    answers: list[dict] = [{}] * len(bodies)

    async def caller(http):
        while not queue.empty():
            k, (route, body) = queue.get_nowait()
            response = await http.post(url + route, json=body)
            response.raise_for_status()
            answers[k] = response.json()

    async with httpx.AsyncClient(timeout=1800, limits=httpx.Limits(max_connections=callers)) as http:
        start = time.perf_counter()
        await asyncio.gather(*(caller(http) for _ in range(callers)))
        return time.perf_counter() - start, answers


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--criteria", type=int, default=4)
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--per-request", type=int, default=4)
    args = parser.parse_args()

    from tests.harness import serve_subprocess

    texts = CRITERIA[: args.criteria]
    criteria = [{"name": f"c{k}", "text": t} for k, t in enumerate(texts)]
    with tempfile.TemporaryDirectory() as tmp:
        judge = build_judge(Path(tmp) / "judge-1024x8")
        items = build_items(args.items)
        chunks = [items[k : k + args.per_request] for k in range(0, len(items), args.per_request)]
        spec = [{"name": "judge", "kind": "verifier", "source": str(judge), "options": {"cache_size": 0}}]
        with serve_subprocess(
            "--no-builtin-rules", env={"REWARDSERVE_MODELS": json.dumps(spec), "REWARDSERVE_LOG_LEVEL": "warning"}
        ) as url:
            warm = [("/v1/rubric", {"judge": "judge", "items": items[:1], "criteria": criteria})]
            asyncio.run(run(url, warm, 1))
            shared_bodies = [("/v1/rubric", {"judge": "judge", "items": c, "criteria": criteria}) for c in chunks]
            print("shared context (/v1/rubric) ...", flush=True)
            shared_s, shared = asyncio.run(run(url, shared_bodies, args.callers))
            alone_bodies = [
                (
                    "/v1/verify",
                    {"model": "judge", "items": c, "options": {"template": "criterion", "variables": {"criterion": t}}},
                )
                for c in chunks
                for t in texts
            ]
            print("independent passes (/v1/verify, one per criterion) ...", flush=True)
            alone_s, alone = asyncio.run(run(url, alone_bodies, args.callers))

    shared_scores = {(r["id"], c["name"]): c["score"] for a in shared for r in a["results"] for c in r["criteria"]}
    alone_scores = {}
    for (_route, body), answer in zip(alone_bodies, alone):
        name = f"c{texts.index(body['options']['variables']['criterion'])}"
        for r in answer["results"]:
            alone_scores[(r["id"], name)] = r["score"]
    diff = max(abs(shared_scores[k] - alone_scores[k]) for k in alone_scores)
    n = args.items * args.criteria
    shared_tokens = sum(a["usage"]["prompt_tokens"] for a in shared)
    alone_tokens = sum(a["usage"]["prompt_tokens"] for a in alone)
    print()
    print(f"{args.items} items x {args.criteria} judge criteria = {n} judgements")
    print(f"{'':36}{'criteria/s':>12}{'seconds':>10}{'tokens run':>12}")
    print(f"{'shared context (/v1/rubric)':36}{n / shared_s:>12.2f}{shared_s:>10.2f}{shared_tokens:>12}")
    print(f"{'independent passes (/v1/verify)':36}{n / alone_s:>12.2f}{alone_s:>10.2f}{alone_tokens:>12}")
    print(f"speed-up: {alone_s / shared_s:.2f}x (target >= 2.5)")
    print(f"max |score difference| shared vs independent: {diff:.2e}")


if __name__ == "__main__":
    main()
