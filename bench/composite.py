"""Composite rewards, in one run: one rubric call mixing a rule, an outcome model and a
judge question vs the same three as separate calls; escalation to the judge vs the judge
on everything.

    .venv/bin/python bench/composite.py [--groups 64] [--size 8] [--callers 8] [--seed N]

A GRPO-shaped workload: ``groups`` prompts x ``size`` completions (a few-dozen-word
prompt, a completion ending in \\boxed{answer}), fresh words per run (``--seed``, random
by default) so no cache answers. The outcome model is a Qwen3 classifier and the judge a
Qwen3 causal LM (hidden 512, 4 layers, random weights: speed, not quality), served by
one real service process; score caches are off.

  one call:    POST /v1/rubric per group: math_equiv + the outcome model + a judge question
  separate:    per group, /v1/score (math), /v1/score (outcome model), /v1/rubric (the
               judge question alone): one after another (a trainer calling its reward
               functions in turn, as TRL does with plain functions), and all three at once
  escalation:  the rule's score, with the judge asked only for groups the rule scores all
               alike (``group_zero_variance``), vs the judge on every item; a share of
               groups all right or all wrong, as GRPO runs see (``--alike``)
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

from bench.compare import cpu_name, fresh_seed  # noqa: E402

QUESTION = "The answer is stated clearly."


def build_models(out: Path) -> tuple[Path, Path]:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from tests.builders import build_sequence_classifier, build_tokenizer

    rm = build_sequence_classifier(out / "rm", hidden=512, layers=4, heads=8, head_dim=64, max_positions=2048)
    tokenizer = build_tokenizer("qwen")
    torch.manual_seed(1)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=8,
        head_dim=64,
        max_position_embeddings=2048,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    Qwen3ForCausalLM(config).save_pretrained(out / "judge")
    tokenizer.save_pretrained(out / "judge")
    return rm, out / "judge"


def build_groups(groups: int, size: int, alike: float, seed: int) -> list[list[dict]]:
    """Each group: one prompt, ``size`` completions; a share ``alike`` of the groups all
    right or all wrong, the others mixed."""
    from tests.builders import random_text

    rng = random.Random(seed)
    out = []
    for g in range(groups):
        answer = rng.randint(10, 99)
        prompt = random_text(rng, rng.randint(25, 40))
        if rng.random() < alike:
            right = [rng.random() < 0.5] * size
        else:
            right = [k % 2 == 0 for k in range(size)]
            rng.shuffle(right)
        out.append(
            [
                {
                    "id": f"{g}-{k}",
                    "group_id": str(g),
                    "prompt": prompt,
                    "reference": str(answer),
                    "response": random_text(rng, rng.randint(40, 70)) + f" \\boxed{{{answer if ok else answer + 1}}}",
                }
                for k, ok in enumerate(right)
            ]
        )
    return out


async def run(url: str, jobs: list, callers: int) -> tuple[float, list]:
    """Each job is a list of (route, body) calls, ``concurrently`` or one after another;
    ``callers`` jobs at a time. Returns the seconds and each job's answers."""
    import httpx

    queue: asyncio.Queue = asyncio.Queue()
    for k, job in enumerate(jobs):
        queue.put_nowait((k, job))
    answers: list = [None] * len(jobs)

    async def post(http, route, body):
        response = await http.post(url + route, json=body)
        response.raise_for_status()
        return response.json()

    async def caller(http):
        while not queue.empty():
            k, (calls, together) = queue.get_nowait()
            if together:
                answers[k] = await asyncio.gather(*(post(http, r, b) for r, b in calls))
            else:
                answers[k] = [await post(http, r, b) for r, b in calls]

    async with httpx.AsyncClient(timeout=3600, limits=httpx.Limits(max_connections=callers * 3)) as http:
        start = time.perf_counter()
        await asyncio.gather(*(caller(http) for _ in range(callers)))
        return time.perf_counter() - start, answers


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, default=64)
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--callers", type=int, default=8)
    parser.add_argument("--alike", type=float, default=0.3, help="share of groups all right or all wrong")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = fresh_seed(args.seed)

    from tests.harness import serve_subprocess

    with tempfile.TemporaryDirectory() as tmp:
        rm, judge = build_models(Path(tmp))
        groups = build_groups(args.groups, args.size, args.alike, seed)
        warm_groups = build_groups(2, args.size, args.alike, seed + 1)
        spec = [
            {"name": "rm", "source": str(rm), "options": {"score_cache_size": 0}},
            {
                "name": "judge",
                "kind": "verifier",
                "source": str(judge),
                "options": {"score_cache_size": 0, "cache_size": 0},
            },
            {"name": "math", "kind": "rule", "source": "math_equiv", "options": {"score_cache_size": 0}},
        ]
        criteria = [
            {"name": "correct", "fn": "math_equiv"},
            {"name": "rm", "model": "rm"},
            {"name": "clear", "text": QUESTION},
        ]

        def one_call(group):
            return [("/v1/rubric", {"judge": "judge", "items": group, "criteria": criteria})], False

        def separate(group, together):
            return [
                ("/v1/score", {"model": "math", "items": group}),
                ("/v1/score", {"model": "rm", "items": group}),
                ("/v1/rubric", {"judge": "judge", "items": group, "criteria": criteria[2:]}),
            ], together

        cheap = [{"name": "correct", "fn": "math_equiv"}]
        escalate = {"to": "judge", "when": {"group_zero_variance": True}}

        with serve_subprocess(
            "--no-builtin-rules",
            env={
                "REWARDSERVE_MODELS": json.dumps(spec),
                "REWARDSERVE_LOG_LEVEL": "warning",
                "REWARDSERVE_COMPILE": "false",
            },
        ) as url:
            asyncio.run(run(url, [one_call(g) for g in warm_groups] + [separate(g, True) for g in warm_groups], 2))
            print("one rubric call per group ...", flush=True)
            one_s, one = asyncio.run(run(url, [one_call(g) for g in groups], args.callers))
            print("separate calls, one after another ...", flush=True)
            seq_s, seq = asyncio.run(run(url, [separate(g, False) for g in groups], args.callers))
            print("separate calls, all three at once ...", flush=True)
            par_s, _ = asyncio.run(run(url, [separate(g, True) for g in groups], args.callers))
            print("escalating to the judge ...", flush=True)
            esc_s, esc = asyncio.run(
                run(
                    url,
                    [([("/v1/rubric", {"items": g, "criteria": cheap, "escalate": escalate})], False) for g in groups],
                    args.callers,
                )
            )
            print("the judge on everything ...", flush=True)
            all_s, judged = asyncio.run(
                run(url, [([("/v1/score", {"model": "judge", "items": g})], False) for g in groups], args.callers)
            )

    n = args.groups * args.size
    diff = 0.0
    for (combined,), (math_out, rm_out, judge_out) in zip(one, seq):
        for r, m, o, j in zip(combined["results"], math_out["results"], rm_out["results"], judge_out["results"]):
            c = r["components"]
            diff = max(
                diff,
                abs(c["correct"] - m["score"]),
                abs(c["rm"] - o["score"]),
                abs(c["clear"] - j["components"]["clear"]),
            )
    escalated = sum(1 for (a,) in esc for r in a["results"] if r["escalated"])
    final = {r["id"]: r["score"] for (a,) in esc for r in a["results"]}
    always = {r["id"]: r["score"] for (a,) in judged for r in a["results"]}
    differs = sum(1 for k in always if abs(final[k] - always[k]) > 1e-6)

    print()
    print(
        f"CPU: {cpu_name()}, {os.cpu_count()} cores; seed {seed}; {args.groups} groups x {args.size} = {n} items, "
        f"{args.callers} callers"
    )
    print(f"{'':44}{'items/s':>10}{'seconds':>10}")
    for label, seconds in (
        ("one /v1/rubric call (rule + model + judge)", one_s),
        ("separate calls, one after another", seq_s),
        ("separate calls, all three at once", par_s),
    ):
        print(f"{label:44}{n / seconds:>10.2f}{seconds:>10.2f}")
    print(
        f"one call vs separate, one after another: {seq_s / one_s:.2f}x; vs all at once: {par_s / one_s:.2f}x "
        "(target >= 1.5x)"
    )
    print(f"components vs each source called alone: max |difference| {diff:.2e} (target <= 1e-5)")
    print()
    print(
        f"escalation (judge where a group is all alike, {args.alike:.0%} of groups drawn so): "
        f"{escalated} of {n} items judged, {1 - escalated / n:.0%} of judge calls saved (target >= 60%); "
        f"{n / esc_s:.2f} items/s vs {n / all_s:.2f} judging everything"
    )
    print(
        f"items whose final score differs from always judging: {differs} of {n} ({differs / n:.0%}): "
        "the items the rule settled, scored by the rule"
    )


if __name__ == "__main__":
    main()
