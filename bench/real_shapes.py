"""CPU times of real checkpoints without downloading them: each is built here with its
published architecture and sizes (config values from its config.json) and random
weights, saved as its bf16 safetensors would be, then served by ``rewardserve serve`` as
the README serves the real one. A forward pass costs the same whatever the weights'
values, so the times are the real checkpoint's on this CPU; the scores are noise.

    .venv/bin/python bench/real_shapes.py [--only NAME] [--tokens 512] [--dtype auto]

Per checkpoint: the size on disk, the time from ``serve`` to ready (process start,
imports, load, warm-up), one item's latency (the median of 5, after one unmeasured),
and the items a second of a batch of 8. Items are ``--tokens`` tokens long. The
tokenizer is a small local one (the ids stay in the real vocabulary's range; the
embedding table has the real row count), so token counts, not texts, are what match.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


@dataclass(frozen=True)
class Shape:
    """A real checkpoint: its hub id, how the README serves it, and its config.json's sizes."""

    hub_id: str
    kind: str  # outcome or verifier
    architecture: str  # transformers class
    tokenizer_style: str  # qwen (ChatML) or llama (Llama 3)
    config: dict[str, Any] = field(default_factory=dict)


SHAPES = [
    Shape(
        "Skywork/Skywork-Reward-V2-Qwen3-0.6B",
        "outcome",
        "Qwen3ForSequenceClassification",
        "qwen",
        dict(
            hidden_size=1024,
            intermediate_size=3072,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            vocab_size=151936,
        ),
    ),
    Shape(
        "Skywork/Skywork-Reward-V2-Llama-3.2-1B",
        "outcome",
        "LlamaForSequenceClassification",
        "llama",
        dict(
            hidden_size=2048,
            intermediate_size=8192,
            num_hidden_layers=16,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=64,
            vocab_size=128256,
        ),
    ),
    Shape(
        "Qwen/Qwen3-1.7B",
        "verifier",
        "Qwen3ForCausalLM",
        "qwen",
        dict(
            hidden_size=2048,
            intermediate_size=6144,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            vocab_size=151936,
            tie_word_embeddings=True,
        ),
    ),
]


def build(shape: Shape, out_dir: Path) -> Path:
    import torch
    import transformers

    from rewardserve.models.demo.tiny import build_tokenizer

    tokenizer = build_tokenizer(shape.tokenizer_style)
    config_class = getattr(
        transformers, shape.architecture.replace("ForSequenceClassification", "Config").replace("ForCausalLM", "Config")
    )
    config = config_class(
        **shape.config,
        max_position_embeddings=32768,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = getattr(transformers, shape.architecture)(config).to(torch.bfloat16)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def text_of(tokens: int, tokenizer: Any, seed: int) -> str:
    """A response of about ``tokens`` tokens for this tokenizer."""
    import random

    from rewardserve.models.demo.tiny import WORDS

    rng = random.Random(seed)
    words: list[str] = []
    while len(tokenizer(" ".join(words))["input_ids"]) < tokens:
        words += rng.choices(WORDS, k=32)
    return " ".join(words)


def measure(shape: Shape, folder: Path, tokens: int, dtype: str = "auto") -> dict[str, Any]:
    import httpx
    from transformers import AutoTokenizer

    from tests.harness import free_port, wait_ready

    started = time.monotonic()
    path = build(shape, folder / shape.hub_id.split("/")[-1])
    built_s = time.monotonic() - started
    size_gb = sum(f.stat().st_size for f in path.iterdir()) / 1e9
    tokenizer = AutoTokenizer.from_pretrained(path)
    port = free_port()
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rewardserve.cli", "serve", "--port", str(port), "--no-builtin-rules"]
        + ["--model", f"m={path}:{shape.kind}", "--max-tokens", str(tokens + 256), "--dtype", dtype],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, 900)
        ready_s = time.monotonic() - started
        route = "/v1/verify" if shape.kind == "verifier" else "/v1/score"

        def item(seed: int) -> dict[str, Any]:
            base = {"prompt": "What is the answer?", "response": text_of(tokens, tokenizer, seed)}
            return base | ({"reference": "42"} if shape.kind == "verifier" else {})

        with httpx.Client(base_url=url, timeout=900) as http:

            def post(items: list[dict[str, Any]]) -> float:
                # A fresh text per item: no cache answers.
                body = {"model": "m", "items": items}
                begun = time.monotonic()
                answer = http.post(route, json=body)
                answer.raise_for_status()
                assert all(r["valid"] for r in answer.json()["results"]), answer.text[:300]
                return time.monotonic() - begun

            post([item(0)])  # unmeasured
            one = statistics.median(post([item(1 + k)]) for k in range(5))
            batch = post([item(10 + k) for k in range(8)])
            served_dtype = http.get("/info").json()["models"][0].get("dtype")
    finally:
        proc.terminate()
        proc.wait(60)
    return {
        "checkpoint": shape.hub_id,
        "kind": shape.kind,
        "size_gb": size_gb,
        "built_s": built_s,
        "ready_s": ready_s,
        "one_s": one,
        "batch_items_per_s": 8 / batch,
        "dtype": served_dtype,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="checkpoints whose hub id holds this")
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--dtype", default="auto", help="serve's --dtype (auto: the service's own choice)")
    args = parser.parse_args()
    from bench.compare import cpu_name

    print(f"CPU: {cpu_name()} ({os.cpu_count()} cores), {platform.machine()}", flush=True)
    print("| checkpoint | kind | bf16 on disk | serve to ready | one item | batch of 8 | dtype |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for shape in SHAPES:
            if args.only and args.only not in shape.hub_id:
                continue
            r = measure(shape, Path(tmp), args.tokens, args.dtype)
            print(
                f"| {r['checkpoint']} | {r['kind']} | {r['size_gb']:.1f} GB | {r['ready_s']:.0f} s | "
                f"{r['one_s']:.2f} s | {r['batch_items_per_s']:.2f} items/s | {r['dtype']} |",
                flush=True,
            )
            for f in (Path(tmp) / shape.hub_id.split("/")[-1]).iterdir():
                f.unlink()  # disk: one checkpoint at a time


if __name__ == "__main__":
    main()
