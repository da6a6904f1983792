"""The GRPO loop's ``colocate``: the reward model sleeps (level 2: its weights freed)
while the policy generates and is woken to score, through a real service's admin API;
the groups finished while it slept are scored once it is awake."""

from __future__ import annotations

import json

import httpx
import pytest

from rewardserve.train.grpo.config import load_config
from rewardserve.train.grpo.loop import train
from tests.builders import build_causal_lm
from tests.harness import metric, serve_subprocess


@pytest.mark.long(30)
@pytest.mark.timeout(600)
def test_the_reward_model_sleeps_while_the_policy_generates(tmp_path, qwen3_rm):
    policy = build_causal_lm(tmp_path / "policy", seed=1)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Say something ({k})."}) + "\n" for k in range(2)))
    models = tmp_path / "models.yaml"
    models.write_text(f"models:\n  - {{name: rm, source: {qwen3_rm}}}\n")
    env = {"REWARDSERVE_ADMIN_KEYS": "admin-key"}
    with serve_subprocess("--config", str(models), "--no-builtin-rules", env=env) as url:
        config = tmp_path / "grpo.yaml"
        config.write_text(
            f"policy: {policy}\nprompts: {prompts}\noutput_dir: {tmp_path / 'out'}\nservice: {url}\n"
            "rewards: [{endpoint: score, model: rm}]\ncolocate: true\nadmin_key: admin-key\n"
            "steps: 2\nprompts_per_step: 2\ngroup_size: 2\nmax_new_tokens: 4\nprogress: false\n"
        )
        rows = train(load_config(config))
        text = httpx.get(url + "/metrics", timeout=10).text
        state = httpx.get(url + "/v1/admin/models/rm", headers={"authorization": "Bearer admin-key"}, timeout=10)
        with pytest.raises(ValueError, match="colocate needs admin_key"):
            train(load_config(config, {"admin_key": "", "output_dir": str(tmp_path / "again"), "resume": False}))
    assert len(rows) == 2 and all(r["invalid"] == 0 and r["rm_wake_s"] > 0 for r in rows)
    for operation in ("sleep", "wake_up"):
        count = metric(
            text, "rewardserve_model_lifecycle_duration_seconds_count", model="rm", operation=operation, outcome="ok"
        )
        assert count == 2, (operation, count)
    assert state.json()["state"] == "awake"  # left awake after the last step's rewards
