"""Implicit PRM (PRIME) tokens per second on a GRPO-shaped burst, in one run:

    .venv/bin/python bench/implicit_prm.py [--prompts 4] [--group 8] [--rounds 2] [--seed N]

Builds two mid-size Qwen3 causal LMs with one tokenizer (hidden 512, 6 layers, random
weights; a policy pi and its reference), then a burst of ``prompts`` x ``group``
completions (GRPO: each prompt answered ``group`` times), and measures tokens/s (prompt
plus response tokens of every item) for
  recipe:       PRIME's reward-model recipe in transformers, in process: each micro-batch
                of 8 padded whole sequences through both models, the whole vocabulary's
                log_softmax, the response tokens' log-probs gathered;
  shared:       rewardserve's /v1/score/steps (in process over ASGI, a caller per
                prompt), each prompt run once per batch (share_prompt on, the default);
  unshared:     the same service with share_prompt off, every completion run whole.
The rows run interleaved (A B C C B A per round) on a fresh seed, and the scores of the
three are compared (largest difference printed). The tokenizer's vocabulary is the test
tokenizer's (600), far from a real one's 150k: the log_softmax share here is small.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

BETA = 0.05
MICRO_BATCH = 8


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def burst(prompts: int, group: int, seed: int) -> list[dict]:
    from tests.builders import random_text

    rng = random.Random(seed)
    items = []
    for p in range(prompts):
        prompt = random_text(rng, rng.randint(120, 160))
        for _ in range(group):
            steps = [random_text(rng, rng.randint(15, 30)) + "\n\n" for _ in range(rng.randint(3, 6))]
            items.append({"prompt": prompt, "steps": steps, "group_id": str(p)})
    return items


def recipe(policy: Path, reference: Path, items: list[dict]) -> tuple[float, list[float]]:
    """PRIME's way, timed from tokenization to the last score: seconds, and each item's
    summed token rewards."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(policy)
    models = [AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32).eval() for p in (policy, reference)]
    start = time.perf_counter()
    seqs = []
    for item in items:
        text = tok.apply_chat_template(
            [{"role": "user", "content": item["prompt"]}], tokenize=False, add_generation_prompt=True
        )
        prompt = tok(text)["input_ids"]
        response = tok("".join(item["steps"]), add_special_tokens=False)["input_ids"]
        seqs.append((prompt, response))
    scores = []
    with torch.inference_mode():
        for k in range(0, len(seqs), MICRO_BATCH):
            chunk = seqs[k : k + MICRO_BATCH]
            width = max(len(p) + len(r) for p, r in chunk)
            ids = torch.full((len(chunk), width), tok.pad_token_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, (p, r) in enumerate(chunk):
                ids[row, : len(p) + len(r)] = torch.tensor(p + r)
                mask[row, : len(p) + len(r)] = 1
            logps = []
            for lm in models:
                logits = lm(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
                logps.append(torch.log_softmax(logits, -1).gather(2, ids[:, 1:, None])[..., 0])
            ratio = BETA * (logps[0] - logps[1])
            for row, (p, r) in enumerate(chunk):
                scores.append(float(ratio[row, len(p) - 1 : len(p) + len(r) - 1].double().sum()))
    return time.perf_counter() - start, scores


async def served(policy: Path, reference: Path, items: list[dict], share: bool) -> tuple[float, list[float]]:
    from rewardserve.models.spec import ModelSpec
    from rewardserve.service.settings import Settings
    from tests.harness import serve_in_process

    spec = ModelSpec(
        name="iprm",
        kind="implicit_prm",
        source=str(policy),
        options={"reference": str(reference), "beta": BETA, "share_prompt": share, "score_cache_size": 0},
    )
    async with serve_in_process(Settings(builtin_rules=False, models=[spec])) as (_, http):
        groups: dict[str, list[int]] = {}
        for i, item in enumerate(items):
            groups.setdefault(item["group_id"], []).append(i)

        async def call(members: list[int]) -> list[float]:
            body = {"model": "iprm", "items": [items[i] for i in members]}
            answer = await http.post("/v1/score/steps", json=body, timeout=600)
            answer.raise_for_status()
            return [r["score"] for r in answer.json()["results"]]

        await call(next(iter(groups.values())))  # untimed: the compiled layers' first shapes
        start = time.perf_counter()
        answers = await asyncio.gather(*(call(m) for m in groups.values()))
        elapsed = time.perf_counter() - start
    scores = [0.0] * len(items)
    for members, got in zip(groups.values(), answers):
        for i, score in zip(members, got):
            scores[i] = score
    return elapsed, scores


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)

    from transformers import AutoTokenizer

    from tests.builders import build_qwen3_lm

    root = Path(tempfile.mkdtemp(prefix="bench-iprm-"))
    size = {"hidden": 512, "layers": 6, "heads": 8, "head_dim": 64}
    policy = build_qwen3_lm(root / "pi", seed=1, **size)
    reference = build_qwen3_lm(root / "ref", seed=2, **size)
    tok = AutoTokenizer.from_pretrained(policy)
    timings: dict[str, list[float]] = {"recipe": [], "shared": [], "unshared": []}
    results: dict[str, list[float]] = {}
    tokens = 0
    for round_ in range(args.rounds):
        items = burst(args.prompts, args.group, seed + round_)
        tokens = sum(
            len(
                tok(
                    tok.apply_chat_template(
                        [{"role": "user", "content": i["prompt"]}], tokenize=False, add_generation_prompt=True
                    )
                )["input_ids"]
            )
            + len(tok("".join(i["steps"]), add_special_tokens=False)["input_ids"])
            for i in items
        )
        for name in ("recipe", "shared", "unshared", "unshared", "shared", "recipe"):
            if name == "recipe":
                elapsed, scores = recipe(policy, reference, items)
            else:
                elapsed, scores = asyncio.run(served(policy, reference, items, name == "shared"))
            timings[name].append(tokens / elapsed)
            results[name] = scores
        differences = [abs(a - b) for name in ("shared", "unshared") for a, b in zip(results[name], results["recipe"])]
        print(
            f"round {round_}: {len(items)} items, {tokens} tokens; largest score difference to the recipe "
            f"{max(differences):.2e}"
        )
    print(f"\nCPU: {cpu_name()}, {os.cpu_count()} cores; seed {seed}; {args.prompts} prompts x {args.group}")
    base = statistics.median(timings["recipe"])
    for name, values in timings.items():
        median = statistics.median(values)
        runs = ", ".join(f"{v:.0f}" for v in values)
        print(f"{name:>9}: {median:8.0f} tokens/s  ({median / base:.2f}x the recipe; runs {runs})")


if __name__ == "__main__":
    main()
