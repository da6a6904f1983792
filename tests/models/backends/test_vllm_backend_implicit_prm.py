"""Kind ``implicit_prm`` on the vllm backend: the model and its reference as two vLLM
engines, each response token's beta * (log pi - log pi_ref) from vLLM's prompt
log-probabilities, against the transformers backend on the same saved models. Its own
module (two engines of its own) so that it can run beside the other vLLM tests."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import pytest_asyncio

from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.builders import build_qwen3_lm, random_text
from tests.harness import serve_in_process
from tests.models.backends.test_vllm_backend import TOLERANCE, both, served_on_vllm

START_S = 420
pytestmark = [pytest.mark.long(60), pytest.mark.timeout(START_S + 60)]

if os.environ.get("REWARDSERVE_SKIP_VLLM") == "1":
    pytest.skip("REWARDSERVE_SKIP_VLLM=1", allow_module_level=True)


@pytest.fixture(scope="module")
def lms(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("vllm_implicit")
    return build_qwen3_lm(root / "pi", seed=5), build_qwen3_lm(root / "ref", seed=6)


def spec(lms: tuple[Path, Path], backend: str) -> ModelSpec:
    options = {"gpu_memory_utilization": 0.25, "enforce_eager": True} if backend == "vllm" else {}
    return ModelSpec(
        name="implicit",
        kind="implicit_prm",
        source=str(lms[0]),
        backend=backend,
        dtype="float32",
        options={**options, "reference": str(lms[1]), "beta": 0.5},
    )


@pytest.fixture(scope="module")
def vllm_url(lms, tmp_path_factory):
    with served_on_vllm([spec(lms, "vllm")], tmp_path_factory.mktemp("vllm_implicit_cfg"), START_S) as url:
        yield url


@pytest_asyncio.fixture(scope="module")
async def reference(lms):
    async with serve_in_process(Settings(models=[spec(lms, "transformers")], builtin_rules=False)) as (_, http):
        yield http


async def test_implicit_prm_step_scores_match_transformers(reference, vllm_url):
    """A GRPO group's completions sharing their prompt, and one alone."""
    rng = random.Random(3)
    prompt = random_text(rng, 30)
    items = [
        {"group_id": "g", "prompt": prompt, "steps": [random_text(rng, rng.randint(2, 9)) for _ in range(n)]}
        for n in (1, 2, 4)
    ]
    items.append({"prompt": random_text(rng, 12), "steps": [random_text(rng, 6), random_text(rng, 3)]})
    ours, theirs = await both(reference, vllm_url, "/v1/score/steps", {"model": "implicit", "items": items})
    for a, b in zip(ours["results"], theirs["results"]):
        assert b["valid"] and len(b["step_scores"]) == len(a["step_scores"])
        assert b["step_scores"] == pytest.approx(a["step_scores"], abs=TOLERANCE)
        assert b["score"] == pytest.approx(a["score"], abs=TOLERANCE)
        assert any(abs(s) > 10 * TOLERANCE for s in a["step_scores"])  # the two models differ
