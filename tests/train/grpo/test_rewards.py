"""The GRPO loop's rewards as the service computes them: each prompt's completions go
as one group, so a source that normalises per group sees the group whole."""

from __future__ import annotations

import pytest

from rewardserve.client import RewardClient
from rewardserve.train.grpo.config import RewardSource
from rewardserve.train.grpo.rewards import RewardMix
from tests.harness import serve_subprocess


def test_a_group_normalised_source_gets_each_prompt_s_completions_as_one_group(tmp_path):
    models = tmp_path / "models.yaml"
    models.write_text("models:\n  - {name: fuzzy, kind: rule, source: fuzzy}\n")
    rows = [{"prompt": "Say yes.", "reference": "yes"}] * 4 + [{"prompt": "Say no.", "reference": "no"}] * 4
    texts = ["yes", "yes!", "maybe", "nope"] + ["no", "no way", "yes", "n"]
    source = RewardSource(endpoint="rubric", criteria=[{"name": "f", "model": "fuzzy", "normalize": "group"}], name="f")
    with serve_subprocess("--config", str(models), "--no-builtin-rules") as url:
        with RewardClient(url) as client:
            scored = RewardMix(client, [source]).score(rows, texts)
            raw = client.score("fuzzy", [{"response": t, "reference": r["reference"]} for r, t in zip(rows, texts)])
    assert bool(scored.valid.all())
    rewards = scored.reward.tolist()
    for group in (rewards[:4], rewards[4:]):
        # z-scores within each prompt's four completions: they sum to 0 and are not all 0
        # (singleton groups would give 0 each).
        assert sum(group) == pytest.approx(0.0, abs=1e-6) and max(map(abs, group)) > 0.5
    first = [r.score for r in raw.results[:4]]
    assert [rewards[i] > rewards[j] for i in range(4) for j in range(4)] == [
        first[i] > first[j] for i in range(4) for j in range(4)
    ]
