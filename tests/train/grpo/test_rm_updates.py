"""The GRPO loop's ``rm_updates``: a reward model trained beside the run. Every step the
newest checkpoint folder a trainer saved is pushed to a real service through its admin
API; the step after scores with it, and a checkpoint still being written is not taken."""

from __future__ import annotations

import json
import os
import shutil

import httpx
import pytest

from rewardserve.train.grpo.config import load_config
from rewardserve.train.grpo.loop import train
from rewardserve.train.grpo.rm_updates import newest_checkpoint
from tests.builders import build_causal_lm, build_sequence_classifier
from tests.harness import serve_subprocess


def test_the_newest_checkpoint_folder_is_the_one_written_last(tmp_path):
    assert newest_checkpoint(tmp_path / "none-yet") is None
    for k, name in enumerate(["step-9", "step-10", "partial"]):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        if name != "partial":  # no weights yet: not a checkpoint
            (folder / "model.safetensors").write_bytes(b"")
        os.utime(folder / "config.json", (1000 + k, 1000 + k))
        if (folder / "model.safetensors").exists():
            os.utime(folder / "model.safetensors", (1000 + k, 1000 + k))
    assert newest_checkpoint(tmp_path).name == "step-10"


@pytest.mark.long(25)
@pytest.mark.timeout(600)
def test_the_run_pushes_the_newest_reward_model_checkpoint(tmp_path, qwen3_rm):
    policy = build_causal_lm(tmp_path / "policy", seed=1)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Say something ({k})."}) + "\n" for k in range(2)))
    checkpoints = tmp_path / "rm-checkpoints"
    checkpoints.mkdir()
    trained = build_sequence_classifier(tmp_path / "trained", seed=7)
    shutil.copytree(
        trained, checkpoints / "rm-step-1", ignore=shutil.ignore_patterns("tokenizer*", "vocab*", "merges*")
    )
    models = tmp_path / "models.yaml"
    models.write_text(f"models:\n  - {{name: rm, source: {qwen3_rm}, version: start}}\n")
    items = {"model": "rm", "items": [{"prompt": "Say something (0).", "response": "Something."}]}
    with serve_subprocess(
        "--config", str(models), "--no-builtin-rules", env={"REWARDSERVE_ADMIN_KEYS": "admin-key"}
    ) as url:
        config = tmp_path / "grpo.yaml"
        config.write_text(
            f"policy: {policy}\nprompts: {prompts}\noutput_dir: {tmp_path / 'out'}\nservice: {url}\n"
            "rewards: [{endpoint: score, model: rm}]\nadmin_key: admin-key\n"
            f"rm_updates: {{every: 1, checkpoints: {checkpoints}}}\n"
            "steps: 3\nprompts_per_step: 2\ngroup_size: 2\nmax_new_tokens: 4\nprogress: false\n"
        )
        rows = train(load_config(config))
        scored = httpx.post(url + "/v1/score", json=items, timeout=30).json()
        with pytest.raises(ValueError, match="rm_updates needs admin_key"):
            train(load_config(config, {"admin_key": "", "output_dir": str(tmp_path / "again"), "resume": False}))
    # Pushed before the second step, once: the third finds nothing newer.
    assert [row.get("rm_update") for row in rows] == [None, "rm-step-1", None]
    assert all(row["invalid"] == 0 for row in rows)
    assert scored["model_version"] == "rm-step-1"
    with serve_subprocess("--model", f"trained={trained}", "--no-builtin-rules") as url:
        reference = httpx.post(url + "/v1/score", json={**items, "model": "trained"}, timeout=30).json()
    assert scored["results"][0]["score"] == pytest.approx(reference["results"][0]["score"], abs=1e-4)
