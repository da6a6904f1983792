"""What the service does on a GPU, measured in one run (bench/gpu_check.sh runs it there):
fp32 and bf16 readouts of the same random-weight Qwen2-0.5B-shaped classifier against
transformers' own forward, the GPU memory left held by a level-1 and a level-2 sleep
(torch.cuda.memory_allocated and nvidia-smi), the time to wake, and items/s of a GRPO
burst (groups of responses sent at once) against a plain transformers forward loop over
the same texts. The checkpoint is built here with random weights: no hub.

``--cpu-dry-run`` runs the same steps on the CPU with a tiny shape, to check the script
itself where there is no GPU. Results go to a Markdown file (bench/results/gpu.md)."""

from __future__ import annotations

import argparse
import asyncio
import platform
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

# The shape of Qwen2-0.5B (its config.json), and a tiny one for the dry run.
QWEN2_05B = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
}
TINY = {**QWEN2_05B, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
ADMIN = {"authorization": "Bearer admin-key"}
SCORER = {"authorization": "Bearer score-key"}


def build_checkpoint(out: Path, shape: dict[str, Any], device: str) -> Path:
    """A Qwen2ForSequenceClassification of ``shape``, random weights (seed 0), fp32 on
    disk, with the demo models' byte-level BPE tokenizer and ChatML template."""
    import torch
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    from rewardserve.models.demo.tiny import build_tokenizer

    tokenizer = build_tokenizer("qwen")
    tokenizer.save_pretrained(out)
    config = Qwen2Config(
        **{**shape, "vocab_size": max(shape["vocab_size"], len(tokenizer))},
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForSequenceClassification(config).to(torch.float32)
    model.save_pretrained(out)
    del model
    return out


def gpu_memory() -> tuple[int, int | None]:
    """torch's allocator's bytes on the GPU, and what nvidia-smi says this process uses
    (or the whole GPU, where it lists no process of ours)."""
    import os

    import torch

    if not torch.cuda.is_available():
        return 0, None
    torch.cuda.synchronize()
    allocated = torch.cuda.memory_allocated()
    try:
        listed = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return allocated, None
    for line in listed.splitlines():
        pid, _, used = line.partition(",")
        if pid.strip() == str(os.getpid()):
            return allocated, int(used.strip()) * 2**20
    # In a container nvidia-smi may list no process of ours (another pid namespace): the
    # GPU's whole use then, which on a machine lent to this run alone is ours.
    whole = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "--id=0"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()
    return allocated, int(whole) * 2**20 if whole.isdigit() else None


def reference_readouts(path: Path, texts: list[str], dtype: Any, device: str) -> list[float]:
    """transformers' own scores, one text at a time (no padding), as the service's
    /v1/embeddings reads them: the text's tokens with special tokens, the head's output."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, dtype=dtype).to(device).eval()
    out = []
    with torch.inference_mode():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt").input_ids.to(device)
            out.append(float(model(input_ids=ids).logits[0, 0].float()))
    del model
    return out


def plain_loop_items_per_s(path: Path, texts: list[str], device: str, batch: int) -> float:
    """A plain transformers loop over ``texts``: bf16 (fp32 on the CPU), ``batch`` texts a
    forward, padded to the longest."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, dtype=dtype).to(device).eval()
    with torch.inference_mode():
        for _ in range(2):  # warm: the kernels picked, the allocator grown
            model(**tokenizer(texts[:batch], return_tensors="pt", padding=True).to(device))
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for k in range(0, len(texts), batch):
            model(**tokenizer(texts[k : k + batch], return_tensors="pt", padding=True).to(device)).logits.float().cpu()
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    del model
    return len(texts) / seconds


@asynccontextmanager
async def serve_in_process(settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The real app with its lifespan, models loaded, behind httpx's ASGI transport (the
    figures are the service's, without a socket's)."""
    from rewardserve.service.app import create_app

    app = create_app(settings)
    async with app.router.lifespan_context(app):
        await asyncio.wait_for(app.state.svc.registry.loaded.wait(), timeout=300)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rewardserve", timeout=600) as http:
            yield http


async def measure(path: Path, device: str, sizes: dict[str, int], lines: list[str]) -> None:
    import torch

    from rewardserve.models.demo.tiny import WORDS
    from rewardserve.models.spec import ModelSpec
    from rewardserve.service.settings import Settings

    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 200))) for _ in range(sizes["readouts"])]
    reference = {
        "float32": reference_readouts(path, texts, torch.float32, device),
        "bfloat16": reference_readouts(path, texts, torch.bfloat16, device),
    }
    models = [ModelSpec(name=dtype, source=str(path), dtype=dtype, device=device) for dtype in ("float32", "bfloat16")]
    settings = Settings(
        builtin_rules=False, api_keys=["score-key"], admin_keys=["admin-key"], compile=False, models=models
    )
    async with serve_in_process(settings) as http:
        lines += ["## Readouts against transformers", "", "| served | against | max abs diff | mean abs |"]
        lines.append("|---|---|---|---|")
        served: dict[str, list[float]] = {}
        for dtype in ("float32", "bfloat16"):
            answer = await http.post("/v1/embeddings", json={"model": dtype, "input": texts}, headers=SCORER)
            assert answer.status_code == 200, answer.text
            served[dtype] = [row["embedding"][0] for row in answer.json()["data"]]
        for dtype, against in (("float32", "float32"), ("bfloat16", "bfloat16"), ("bfloat16", "float32")):
            diffs = [abs(a - b) for a, b in zip(served[dtype], reference[against])]
            lines.append(f"| {dtype} | transformers {against} | {max(diffs):.3g} | {sum(diffs) / len(diffs):.3g} |")
        lines += ["", f"{len(texts)} texts of 20-200 words, one at a time in transformers.", ""]

        lines += ["## Sleep and wake (bfloat16 model)", ""]
        lines.append("| state | memory_allocated | nvidia-smi used | wake s |")
        lines.append("|---|---|---|---|")
        await http.post("/v1/admin/models/float32/sleep", json={"level": 2}, headers=ADMIN)  # the bf16 one alone

        def row(state: str, wake: float | None = None) -> None:
            allocated, smi = gpu_memory()
            shown = f"{smi / 2**20:.0f} MiB" if smi is not None else "n/a"
            took = "" if wake is None else f"{wake:.2f}"
            lines.append(f"| {state} | {allocated / 2**20:.0f} MiB | {shown} | {took} |")

        probe = {"model": "bfloat16", "input": texts[:8]}
        before = (await http.post("/v1/embeddings", json=probe, headers=SCORER)).json()
        row("awake")
        for level in (1, 2):
            asleep = await http.post("/v1/admin/models/bfloat16/sleep", json={"level": level}, headers=ADMIN)
            assert asleep.status_code == 200, asleep.text
            if device == "cuda":
                torch.cuda.empty_cache()
            row(f"level {level} asleep")
            start = time.perf_counter()
            awake = await http.post("/v1/admin/models/bfloat16/wake_up", headers=ADMIN)
            assert awake.status_code == 200, awake.text
            wake = time.perf_counter() - start
            after = (await http.post("/v1/embeddings", json=probe, headers=SCORER)).json()
            same = [r["embedding"] for r in after["data"]] == [r["embedding"] for r in before["data"]]
            row(f"woken from level {level} (scores {'the same' if same else 'CHANGED'})", wake)
        lines.append("")

        groups, size = sizes["groups"], sizes["group_size"]
        prompts = [" ".join(rng.choice(WORDS) for _ in range(30)) for _ in range(groups)]
        bodies = [
            {
                "model": "bfloat16",
                "items": [
                    {"prompt": p, "response": " ".join(rng.choice(WORDS) for _ in range(rng.randint(50, 300)))}
                    for _ in range(size)
                ],
            }
            for p in prompts
        ]
        await http.post("/v1/score", json=bodies[0], headers=SCORER)  # warm
        start = time.perf_counter()
        answers = await asyncio.gather(*(http.post("/v1/score", json=b, headers=SCORER) for b in bodies))
        seconds = time.perf_counter() - start
        assert all(a.status_code == 200 for a in answers), [a.text for a in answers if a.status_code != 200]
        served_rate = groups * size / seconds
        tokenizer_path = path
    from transformers import AutoTokenizer

    chat = AutoTokenizer.from_pretrained(tokenizer_path)
    texts = [
        chat.apply_chat_template(
            [{"role": "user", "content": i["prompt"]}, {"role": "assistant", "content": i["response"]}], tokenize=False
        )
        for b in bodies
        for i in b["items"]
    ]
    plain = plain_loop_items_per_s(path, texts, device, batch=size)
    lines += [
        "## A GRPO burst",
        "",
        f"{groups} groups of {size} responses (50-300 words) sent at once to /v1/score (bfloat16 model), against a",
        f"plain transformers loop over the same chat texts, {size} a forward, padded.",
        "",
        "| | items/s |",
        "|---|---|",
        f"| rewardserve | {served_rate:.1f} |",
        f"| transformers loop | {plain:.1f} |",
        "",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-dry-run", action="store_true", help="the same steps on the CPU, a tiny shape")
    parser.add_argument("--out", type=Path, default=Path("bench/results/gpu.md"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/rewardserve-gpu-check"))
    args = parser.parse_args()
    import torch
    import transformers

    dry = args.cpu_dry_run
    if not dry and not torch.cuda.is_available():
        print("no CUDA device: run with --cpu-dry-run to check the script on the CPU", file=sys.stderr)
        return 2
    device = "cpu" if dry else "cuda"
    shape = TINY if dry else QWEN2_05B
    sizes = {"readouts": 8, "groups": 2, "group_size": 4} if dry else {"readouts": 64, "groups": 16, "group_size": 16}
    started = time.perf_counter()
    path = build_checkpoint(args.work / "qwen2-rm", shape, device)
    gpu = torch.cuda.get_device_name(0) if not dry else "none (CPU dry run, tiny shape)"
    lines = [
        "# The service on a GPU" + (" (CPU dry run: not GPU figures)" if dry else ""),
        "",
        "Written by bench/gpu_check.py (bench/gpu_check.sh); a random-weight Qwen2ForSequenceClassification",
        f"of shape {'tiny' if dry else 'Qwen2-0.5B'}, built there.",
        "",
        f"- device: {gpu}; torch {torch.__version__}, transformers {transformers.__version__}, "
        f"Python {platform.python_version()}; the service without torch.compile (REWARDSERVE_COMPILE false)",
        "",
    ]
    asyncio.run(measure(path, device, sizes, lines))
    lines.append(f"Whole run: {time.perf_counter() - started:.0f} s.")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
