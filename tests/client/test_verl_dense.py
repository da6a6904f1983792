"""The token-level verl reward manager (client/integrations/verl_dense.py), loaded and
called as verl 0.9.1's reward loop does it: ``verl/trainer/ppo/reward.py``
``load_reward_manager`` with ``source: importlib``, ``run_single`` per sample on verl's
own ``DataProto``, then the class's ``assemble_rm_scores`` (as
``verl/experimental/reward_loop/reward_loop.py`` ``compute_rm_score`` does). verl needs ray
and tensordict, so this runs in .venv-ray (the Makefile puts verl's loop peers there)
against a real service with a tiny Qwen2.5-Math-PRM; the rows must be the client's own
``token_rewards`` of the service's step rewards plus verl's gsm8k outcome reward."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from rewardserve.client import RewardClient, token_rewards
from tests.deploy.test_ray_serve import RAY_PYTHON, ROOT, ray_missing
from tests.harness import serve_subprocess

LOOP = r"""
import asyncio, json, sys
import numpy as np
import torch
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl import DataProto
from verl.trainer.ppo.reward import load_reward_manager, resolve_reward_manager_cls

module_path, tokenizer_path, cases = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
config = OmegaConf.create({"reward": {
    "reward_manager": {"source": "importlib", "name": "TokenRewardManager", "module": {"path": module_path}},
    "custom_reward_function": {"path": None},
}})
tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
prompts = [tokenizer(c["question"], add_special_tokens=False)["input_ids"] for c in cases]
responses = [tokenizer(c["response"], add_special_tokens=False)["input_ids"] for c in cases]
P, R = max(map(len, prompts)) + 2, max(map(len, responses)) + 3
pad = tokenizer.pad_token_id
prompt_t = torch.tensor([[pad] * (P - len(p)) + p for p in prompts])  # left-padded, as verl's rollout
response_t = torch.tensor([r + [pad] * (R - len(r)) for r in responses])
mask = torch.tensor(
    [[0] * (P - len(p)) + [1] * (len(p) + len(r)) + [0] * (R - len(r)) for p, r in zip(prompts, responses)]
)
data = DataProto.from_dict(
    tensors={"prompts": prompt_t, "responses": response_t, "attention_mask": mask},
    non_tensors={
        "data_source": np.array(["openai/gsm8k"] * len(cases), dtype=object),
        "reward_model": np.array([{"ground_truth": c["answer"]} for c in cases], dtype=object),
        "extra_info": np.array([{"question": c["question"]} for c in cases], dtype=object),
    },
)
manager = load_reward_manager(config, tokenizer)

async def loop():
    return await asyncio.gather(*(manager.run_single(data[i : i + 1]) for i in range(len(data))))

outputs = asyncio.run(loop())
rm_scores = resolve_reward_manager_cls(config).assemble_rm_scores(data, [o["reward_score"] for o in outputs])
infos = [o["reward_extra_info"] for o in outputs]
extra = {key: np.array([info[key] for info in infos]).tolist() for key in infos[0]}
print(json.dumps({
    "shape": list(rm_scores.shape), "responses": list(response_t.shape), "dtype": str(rm_scores.dtype),
    "rows": rm_scores.tolist(), "ids": responses, "extra": extra,
}))
"""

CASES = [
    {"question": "What is 2+3*4?", "response": "First 3*4 = 12.\n\nThen 2 + 12 = 14.\n#### 14", "answer": "14"},
    {"question": "What is 6*7?", "response": "6*7 is 42 😀.\n\nSo the answer:\n#### 41", "answer": "42"},
    {"question": "Hi", "response": "héllo\n\nwörld\n\n#### 3", "answer": "3"},
]
OPTIONS = {"steps_from": "separator", "separator": "\n\n", "shaping": "potential", "gamma": 0.9}


@pytest.mark.timeout(400)
def test_verl_s_reward_loop_gets_token_rewards_in_its_own_tensor(qwen2_prm):
    if reason := ray_missing():
        pytest.skip(reason)
    with serve_subprocess("--model", f"prm={qwen2_prm}", "--no-builtin-rules") as url:
        env = {
            **os.environ,
            "REWARDSERVE_BASE_URL": url,
            "REWARDSERVE_TOKEN_REWARDS": json.dumps({"model": "prm", "options": OPTIONS, "spread": "last"}),
        }
        module = ROOT / "src" / "rewardserve" / "client" / "integrations" / "verl_dense.py"
        run = subprocess.run(
            [str(RAY_PYTHON), "-c", LOOP, str(module), str(qwen2_prm), json.dumps(CASES)],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        got = json.loads(run.stdout.strip().splitlines()[-1])
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(qwen2_prm)
        with RewardClient(url) as client:
            items = [{"prompt": c["question"], "response": c["response"]} for c in CASES]
            steps = client.score_steps("prm", items, **OPTIONS).results
    assert got["shape"] == got["responses"] and got["dtype"] == "torch.float32"
    outcomes = [1.0, 0.0, 1.0]  # verl's gsm8k rule on '#### <answer>'
    assert got["extra"]["outcome"] == outcomes
    for row, ids, result, outcome in zip(got["rows"], got["ids"], steps, outcomes):
        want = token_rewards(result, tokenizer, ids, outcome=outcome)
        assert row[: len(ids)] == pytest.approx(want, abs=1e-6)
        assert not any(row[len(ids) :])  # nothing on the padding
        assert sum(row) == pytest.approx(outcome + sum(result.step_rewards), abs=1e-5)
