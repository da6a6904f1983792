"""Each system's resident memory with the bench model loaded and after each round of a
workload, in one run: ours must not grow from round to round.

    .venv/bin/python bench/memory.py [--systems acd] [--rounds 3] [--requests 32] [--seed N]

The bench model of bench/compare.py (Qwen3 classifier, hidden 1024, 8 layers), saved once;
every system loads those files, one after the other, alone on the machine:
  (a) rewardserve (`rewardserve serve`, as bench/compare.py runs it), score cache off;
  (c) vLLM's own OpenAI server (--runner pooling, /classify, prefix caching on), from
      .venv-vllm, on both cores (VLLM_CPU_KVCACHE_SPACE=4 GiB, as bench/compare.py);
  (d) the naive server (bench/naive_server.py).
Each round sends ``requests`` requests of 8 fresh items (GRPO groups of 8 with a shared
prompt) from 8 callers. RSS of the server process and every process under it (vLLM's
engine core, our rule pool workers), from /proc, once loaded and after each round settles.
"""

from __future__ import annotations

import argparse
import asyncio
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

from bench.compare import cpu_name, fresh_seed, server_env, start, stop, vllm_server_command  # noqa: E402

NAMES = {"a": "rewardserve (transformers)", "c": "vLLM server", "d": "naive server"}


def rss_mb(pid: int) -> float:
    """The process's and its children's resident memory."""
    import psutil

    root = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20


def senders(url: str, tokenizer):
    """Per system: ``send(http, prompt, responses)`` scoring one group in one request."""

    async def ours(http, prompt, responses):
        items = [{"prompt": prompt, "response": r, "group_id": "g"} for r in responses]
        (await http.post(url + "/v1/score", json={"model": "rm", "items": items})).raise_for_status()

    async def vllm(http, prompt, responses):
        body = {"model": "rm", "input": [prompt + "\n" + r for r in responses]}
        (await http.post(url + "/classify", json=body)).raise_for_status()

    async def naive(http, prompt, responses):
        ids = [tokenizer(prompt + "\n" + r)["input_ids"] for r in responses]
        (await http.post(url + "/score", json={"sequences": ids})).raise_for_status()

    return {"a": ours, "c": vllm, "d": naive}


async def round_of(send, requests: int, rng: random.Random) -> None:
    import httpx

    from tests.builders import random_text

    async with httpx.AsyncClient(timeout=900) as http:
        queue = list(range(requests))

        async def caller():
            while queue:
                queue.pop()
                await send(http, random_text(rng, 60), [random_text(rng, 120) for _ in range(8)])

        await asyncio.gather(*(caller() for _ in range(8)))


def command(system: str, model_dir: Path, tmp: Path, port: int, vllm_python: str) -> tuple[list[str], str]:
    """The command that starts ``system`` and the URL that says it is up."""
    url = f"http://127.0.0.1:{port}"
    if system == "a":
        import yaml

        config = tmp / "a.yaml"
        spec = {"name": "rm", "source": str(model_dir), "dtype": "float32", "options": {"score_cache_size": 0}}
        config.write_text(yaml.safe_dump({"models": [spec]}))
        return [
            sys.executable,
            "-m",
            "rewardserve.cli",
            "serve",
            "--port",
            str(port),
            "--config",
            str(config),
        ], url + "/ready"
    if system == "c":
        return vllm_server_command(vllm_python, model_dir, port, "float32"), url + "/health"
    return [
        sys.executable,
        str(ROOT / "bench" / "naive_server.py"),
        str(model_dir),
        str(port),
        "float32",
    ], url + "/health"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--systems", default="acd")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    args = parser.parse_args()
    seed = fresh_seed(args.seed)
    rng = random.Random(seed)

    from transformers import AutoTokenizer

    from tests.builders import build_sequence_classifier
    from tests.harness import free_port

    env = server_env()
    table: dict[str, list[tuple[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_dir = Path(tmp)
        model_dir = build_sequence_classifier(
            tmp_dir / "rm", "qwen3", hidden=1024, layers=8, heads=8, head_dim=128, max_positions=4096
        )
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        for system in args.systems:
            if system == "c" and not Path(args.vllm_python).exists():
                print(f"(c) skipped: {args.vllm_python} missing (make vllm-venv)")
                continue
            port = free_port()
            cmd, health = command(system, model_dir, tmp_dir, port, args.vllm_python)
            print(f"{system}: starting", flush=True)
            proc = start(cmd, tmp_dir / f"{system}.log", env, health)
            rows = table[system] = []
            try:
                time.sleep(2)
                rows.append(("loaded", rss_mb(proc.pid)))
                send = senders(f"http://127.0.0.1:{port}", tokenizer)[system]
                for k in range(args.rounds):
                    began = time.perf_counter()
                    asyncio.run(round_of(send, args.requests, rng))
                    rate = args.requests * 8 / (time.perf_counter() - began)
                    time.sleep(12)  # rewardserve trims freed memory every 10 s
                    rows.append((f"round {k + 1} ({rate:.1f} items/s)", rss_mb(proc.pid)))
                    print(f"  {rows[-1][0]}: {rows[-1][1]:.0f} MiB", flush=True)
            finally:
                stop(proc)

    print()
    print(
        f"CPU: {cpu_name()}, {os.cpu_count()} cores; fp32; seed {seed}; "
        f"{args.requests} requests x 8 items per round, 8 callers"
    )
    print(
        f"{'system':<28}{'loaded MiB':>12}"
        + "".join(f"{'round ' + str(k + 1):>10}" for k in range(args.rounds))
        + f"{'growth r1->r' + str(args.rounds):>16}"
    )
    for system, rows in table.items():
        growth = rows[-1][1] - rows[1][1]
        print(
            f"{NAMES[system]:<28}{rows[0][1]:>12.0f}"
            + "".join(f"{mb:>10.0f}" for _, mb in rows[1:])
            + f"{growth:>+16.0f}"
        )


if __name__ == "__main__":
    main()
