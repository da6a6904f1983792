"""The GRPO loop learns a toy task from rewards the service computes, and resumes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from rewardserve.train.grpo.config import load_config
from rewardserve.train.grpo.loop import group_advantages, train
from tests.builders import build_causal_lm
from tests.harness import serve_subprocess

MARGIN = 0.3  # on a 0..1 reward: mean of the last 10 steps over the first 10


# Bounded, but long on a loaded machine (40 training steps; a second test run beside it
# more than doubles them): a test timeout of its own.
@pytest.mark.long(70)
@pytest.mark.timeout(900)
def test_grpo_learns_to_say_yes_and_resumes(tmp_path):
    """Toy task: the reward is the fuzzy similarity of the completion to "yes" (served by
    a `fuzzy` rule model). A random tiny policy starts near 0.15."""
    policy = build_causal_lm(tmp_path / "policy", seed=0)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt": f"Say yes, please ({k}).", "reference": "yes"}) + "\n" for k in range(16))
    )
    models = tmp_path / "models.yaml"
    models.write_text(
        "models:\n  - {name: fuzzy, kind: rule, source: fuzzy}\n"
        "  - {name: never, kind: rule, source: regex, options: {args: {pattern: '^zq{9}$'}}}\n"
    )
    with serve_subprocess("--config", str(models), "--no-builtin-rules") as url:
        config_file = tmp_path / "grpo.yaml"
        config_file.write_text(
            f"policy: {policy}\nprompts: {prompts}\noutput_dir: {tmp_path / 'out'}\nservice: {url}\n"
            "rewards: [{endpoint: score, model: fuzzy}]\n"
            "steps: 40\nprompts_per_step: 4\ngroup_size: 8\nmax_new_tokens: 6\nlearning_rate: 0.003\n"
            "kl_coef: 0.01\ngrad_accumulation: 2\nsave_every: 10\nprogress: false\n"
        )
        # The first half in process...
        first = train(load_config(config_file, {"steps": 20}))
        assert len(first) == 20 and (tmp_path / "out" / "checkpoint-20").exists()
        # ...the rest through the CLI, resuming from checkpoint-20.
        env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error"}
        done = subprocess.run(
            [sys.executable, "-m", "rewardserve.cli", "grpo", "--config", str(config_file)],
            capture_output=True,
            text=True,
            timeout=400,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert f"resuming from {tmp_path / 'out' / 'checkpoint-20'} (step 20 of 40)" in done.stderr
        assert f"written to {tmp_path / 'out'}: metrics.jsonl, metrics.png, checkpoint-40/" in done.stdout
        assert "HTTP Request:" not in done.stderr  # httpx's line per reward request stays out of the log
        rows = [json.loads(line) for line in open(tmp_path / "out" / "metrics.jsonl")]
        # --no-resume starts over (one step here), with a reward that cannot tell the
        # completions apart: every group is flat, and the run says so.
        never = tmp_path / "never.yaml"
        never.write_text(config_file.read_text().replace("model: fuzzy", "model: never"))
        flat = subprocess.run(
            [sys.executable, "-m", "rewardserve.cli", "grpo", "--config", str(never), "--steps", "1", "--no-resume"],
            capture_output=True,
            text=True,
            timeout=400,
            env=env,
        )
        assert flat.returncode == 0, flat.stderr[-2000:]
        assert "starting over in" in flat.stderr and "100% of the groups have equal rewards" in flat.stderr
        (only,) = [json.loads(line) for line in open(tmp_path / "out" / "metrics.jsonl")]
        assert only["step"] == 1 and only["zero_variance_groups"] == 1.0 and only["reward/score/never"] == 0.0
    assert [r["step"] for r in rows] == list(range(1, 41))
    assert rows[:20] == first
    rewards = [r["reward_mean"] for r in rows]
    gain = sum(rewards[-10:]) / 10 - sum(rewards[:10]) / 10
    assert gain >= MARGIN, (gain, rewards)
    assert all(r["invalid"] == 0 for r in rows) and any(r["kl"] > 0 for r in rows)
    # Each source under its own name, the completions' length, the groups without signal.
    assert all(r["reward/score/fuzzy"] == pytest.approx(r["reward_mean"]) for r in rows)
    assert all(1 <= r["completion_length"] <= 6 and 0 <= r["zero_variance_groups"] <= 1 for r in rows)
    assert all(r["reward_wait_s"] >= 0 for r in rows)
    from PIL import Image

    # Five panels, two a line: mix, fuzzy, KL, length, flat groups.
    assert Image.open(tmp_path / "out" / "metrics.png").size == (840, 660)
    assert (tmp_path / "out" / "checkpoint-40" / "optimizer.pt").exists()


def test_a_policy_the_hub_cannot_give_fails_at_once_in_one_line(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "hi"}) + "\n")
    config_file = tmp_path / "grpo.yaml"
    config_file.write_text(
        f"policy: acme/no-such-policy\nprompts: {prompts}\noutput_dir: {tmp_path / 'out'}\n"
        "service: http://127.0.0.1:9\nrewards: [{endpoint: score, model: fuzzy}]\n"
    )
    started = time.monotonic()
    failed = subprocess.run(
        [sys.executable, "-m", "rewardserve.cli", "grpo", "--config", str(config_file)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert failed.returncode == 2, failed.stderr[-2000:]
    (line,) = failed.stderr.strip().splitlines()
    assert line.startswith("rewardserve: error: policy: acme/no-such-policy is not in the local Hugging Face cache")
    assert time.monotonic() - started < 60


def test_group_advantages_skip_invalid_and_singletons():
    reward = torch.tensor([1.0, 0.0, 0.5, 9.0, 2.0, 4.0])
    valid = torch.tensor([True, True, True, False, True, False])
    keys = [0, 0, 0, 0, 1, 1]
    adv = group_advantages(reward, valid, keys)
    g = torch.tensor([1.0, 0.0, 0.5])
    assert adv[:3].tolist() == pytest.approx(((g - g.mean()) / (g.std() + 1e-6)).tolist())
    assert adv[3] == 0 and adv[4] == 0 and adv[5] == 0  # invalid; alone in its group


def test_zero_variance_share_counts_flat_groups():
    from rewardserve.train.grpo.loop import zero_variance_share

    reward = torch.tensor([1.0, 1.0, 0.0, 2.0, 5.0, 7.0, 3.0, 3.0])
    valid = torch.tensor([True, True, True, True, True, False, True, True])
    # Groups: {1, 1} flat; {0, 2} not; {5} alone (7 invalid): not counted; {3, 3} flat.
    assert zero_variance_share(reward, valid, [0, 0, 1, 1, 2, 2, 3, 3]) == pytest.approx(2 / 3)
    assert zero_variance_share(reward, valid, [0, 1, 2, 3, 4, 5, 6, 7]) is None


@pytest.mark.long(20)
def test_preflight_fails_before_the_policy_loads(tmp_path, live_service):
    """A service that is down, or a reward model it does not serve: one clear error,
    before any policy is read (the policy path here does not even exist)."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "2+2?", "reference": "4"}) + "\n")
    base = {
        "policy": str(tmp_path / "never-loaded"),
        "prompts": str(prompts),
        "progress": False,
        "output_dir": str(tmp_path / "out"),
    }
    from tests.harness import free_port

    down = load_config(None, {**base, "service": f"http://127.0.0.1:{free_port()}", "rewards": [{"model": "math"}]})
    with pytest.raises(ValueError, match="does not answer"):
        train(down)
    url = live_service
    typo = load_config(None, {**base, "service": url, "rewards": [{"model": "maths"}]})
    with pytest.raises(ValueError, match="model 'maths' is not served.*did you mean 'math'"):
        train(typo)
    wrong_route = load_config(None, {**base, "service": url, "rewards": [{"endpoint": "verify", "model": "math"}]})
    with pytest.raises(ValueError, match="reward 'verify/math'.*/verify"):
        train(wrong_route)
    assert not (tmp_path / "out" / "metrics.jsonl").exists()
    with pytest.raises(ValueError, match="appear"):
        load_config(None, {**base, "rewards": [{"model": "math"}, {"model": "math", "weight": 2}]})


def test_the_completions_go_to_scoring_before_the_log_probs_are_computed(tmp_path, monkeypatch):
    """The loop's reward calls start at decode time (sample's hook), so they run while the
    policy computes the log-probs of what it sampled."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rewardserve.train.grpo import loop
    from rewardserve.train.grpo.config import GRPOConfig

    policy_dir = build_causal_lm(tmp_path / "policy", seed=0)
    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    policy = AutoModelForCausalLM.from_pretrained(policy_dir)
    events: list[str] = []
    logps = loop.token_logps
    monkeypatch.setattr(loop, "token_logps", lambda *a: events.append("log-probs") or logps(*a))
    config = GRPOConfig.model_validate(
        {
            "policy": str(policy_dir),
            "prompts": str(tmp_path / "p.jsonl"),
            "service": "http://127.0.0.1:1",
            "rewards": [{"endpoint": "score", "model": "m"}],
            "group_size": 2,
            "max_new_tokens": 3,
        }
    )
    rollout = loop.sample(
        config,
        policy,
        None,
        tokenizer,
        [{"prompt": "Say yes."}],
        lambda at, rows, texts: events.append(f"decoded {len(texts)}"),
    )
    assert events == ["decoded 2", "log-probs"] and len(rollout.texts) == 2


def test_a_group_goes_to_scoring_when_its_completions_end_while_others_generate(tmp_path):
    """Two prompts: one whose completions all end at once (its likeliest token made the
    EOS, sampled nearly greedily), one that runs to max_new_tokens. The first group
    reaches the hook during generation, the other when it stops; the rollout is the same
    as without the hook, and each row's log-probs are those of its prompt and completion
    alone (padding changes nothing)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rewardserve.train.grpo import loop
    from rewardserve.train.grpo.config import GRPOConfig

    policy_dir = build_causal_lm(tmp_path / "policy", seed=0)
    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    tokenizer.padding_side = "left"
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    policy = AutoModelForCausalLM.from_pretrained(policy_dir).eval()
    first = "Say yes, please, in one short word."
    with torch.no_grad():
        likeliest = int(
            policy(**tokenizer(first, return_tensors="pt", add_special_tokens=False)).logits[0, -1].argmax()
        )

    def meets(prompt: str) -> bool:
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            greedy = policy.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        return likeliest in greedy[0, ids.shape[1] :].tolist()

    second = next(p for p in ["Yes?", "Tell me more.", "Why not?", "Hello there, friend.", "No."] if not meets(p))
    batch = [{"prompt": first}, {"prompt": second}]
    tokenizer.eos_token = tokenizer.convert_ids_to_tokens(likeliest)
    policy.generation_config.eos_token_id = likeliest
    config = GRPOConfig.model_validate(
        {
            "policy": str(policy_dir),
            "prompts": str(tmp_path / "p.jsonl"),
            "service": "http://127.0.0.1:1",
            "rewards": [{"endpoint": "score", "model": "m"}],
            "group_size": 3,
            "max_new_tokens": 6,
            "temperature": 1e-4,
            "chat_template": False,
        }
    )
    steps: list[int] = []
    generate = policy.generate
    policy.generate = lambda **kw: generate(**kw, logits_processor=[lambda i, s: steps.append(i.shape[1]) or s])
    hooked: list[tuple[int, int, list[str]]] = []
    torch.manual_seed(0)
    rollout = loop.sample(
        config, policy, None, tokenizer, batch, lambda at, rows, texts: hooked.append((at, len(steps), texts))
    )
    assert [at for at, _, _ in hooked] == [0, 3]
    assert hooked[0][1] == 1 and hooked[1][1] == 6  # after the first generation step / at the end
    assert rollout.texts == hooked[0][2] + hooked[1][2]
    torch.manual_seed(0)
    assert torch.equal(loop.sample(config, policy, None, tokenizer, batch).ids, rollout.ids)
    for i in range(6):
        prompt = tokenizer(batch[i // 3]["prompt"], add_special_tokens=False)["input_ids"]
        real = rollout.ids[i][rollout.mask[i] == 1]
        completion = rollout.ids[i][rollout.completion_mask[i] == 1]
        assert real.tolist() == prompt + completion.tolist()
        assert len(completion) == (1 if i < 3 else 6)
        assert tokenizer.decode(completion, skip_special_tokens=True) == rollout.texts[i]
        alone = loop.token_logps(policy, real[None], torch.ones_like(real)[None])[0]
        assert torch.allclose(
            rollout.old_logps[i][rollout.mask[i] == 1][len(prompt) :], alone[len(prompt) :], atol=1e-5
        )
