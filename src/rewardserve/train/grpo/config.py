"""The GRPO loop's settings: one YAML (or JSON) file, overridable from the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field


class RewardSource(BaseModel):
    """One term of the reward: ``weight`` x the score an endpoint gives.

    endpoint score / steps (the trajectory aggregate) / verify: ``model`` names the
    served model; rubric: ``model`` is the judge (optional) and ``criteria`` are given.
    ``options`` go to the endpoint (activation, aggregate, template, aggregation, ...)."""

    model_config = ConfigDict(extra="forbid")

    endpoint: Literal["score", "steps", "verify", "rubric"] = "score"
    model: str | None = None
    name: str | None = None  # in the metrics as reward/<name>; default endpoint/model
    weight: float = 1.0
    criteria: list[dict[str, Any]] | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.name or (f"{self.endpoint}/{self.model}" if self.model else self.endpoint)


class DenseSource(BaseModel):
    """Token-level process advantages: ``model``'s step scores (a PRM or an implicit PRM
    on /v1/score/steps, with ``options``), normalised over all the steps of each group
    (DeepSeekMath's process supervision), each on the last token of its step; a token's
    process advantage is the sum of those from it to the end of the completion. A token's
    advantage is then the outcome advantage plus ``weight`` times its process advantage."""

    model_config = ConfigDict(extra="forbid")

    model: str
    weight: float = Field(default=1.0, gt=0)
    options: dict[str, Any] = Field(default_factory=dict)


class TurnSource(BaseModel):
    """Turn-level advantages for tool-using completions (train/grpo/turn_advantages.py,
    MatchTIR's dual-level advantage): each completion split into assistant turns (at
    ``separator``, or after each ``<tool_call>`` block), its calls matched to the prompt row's ``reference``
    field (the expected calls) on /v1/score/turns (``options``: assignment, unmatched,
    reg). Every token of a turn gets (1 - ``weight``) x the trajectory advantage plus
    ``weight`` x the turn's: its return (``gamma``-discounted) normalised over the group
    at that turn index. The trajectory reward is the ``rewards`` mix plus ``total_weight``
    x the turns' trajectory score."""

    model_config = ConfigDict(extra="forbid")

    reference: str = "tool_calls"
    separator: str | None = None  # None: each <tool_call> block ends a turn
    weight: float = Field(default=0.5, ge=0, le=1)
    gamma: float = Field(default=0.9, ge=0, le=1)
    total_weight: float = 1.0
    options: dict[str, Any] = Field(default_factory=dict)


class RMUpdates(BaseModel):
    """A reward model trained beside the run: every ``every`` steps the newest checkpoint
    folder under ``checkpoints`` is pushed to the served ``model`` (the first reward
    source's by default) through the admin API (train/grpo/rm_updates.py)."""

    model_config = ConfigDict(extra="forbid")

    every: int = Field(ge=1)
    checkpoints: Path
    model: str | None = None


class GRPOConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: str  # a local path or hub id of a causal LM
    prompts: Path  # JSONL: {"prompt": str | messages, "reference": ..., any other fields}
    output_dir: Path = Path("grpo-out")
    service: str | list[str] = "http://127.0.0.1:8000"
    api_key: str | None = None
    rewards: list[RewardSource] = Field(min_length=1)
    dense: DenseSource | None = None  # token-level process advantages beside the outcome's
    turns: TurnSource | None = None  # turn-level advantages mixed with the trajectory's
    # The reward models share the policy's GPU: asleep (at colocate_level) while it
    # generates, woken to score, through the admin API with admin_key (train/grpo/colocate.py).
    colocate: bool = False
    colocate_level: Literal[1, 2] = 2
    admin_key: str | None = None
    rm_updates: RMUpdates | None = None  # needs admin_key too

    steps: int = Field(default=100, ge=1)
    prompts_per_step: int = Field(default=4, ge=1)
    group_size: int = Field(default=8, ge=2)  # G completions per prompt
    max_new_tokens: int = Field(default=64, ge=1)
    temperature: float = Field(default=1.0, gt=0)
    top_p: float = Field(default=1.0, gt=0, le=1)

    learning_rate: float = Field(default=1e-5, gt=0)
    clip_epsilon: float = Field(default=0.2, gt=0)
    kl_coef: float = Field(default=0.0, ge=0)  # > 0: KL to a frozen copy of the start policy
    grad_accumulation: int = Field(default=1, ge=1)  # micro-batches per optimizer step
    max_grad_norm: float = Field(default=1.0, gt=0)
    stratify_by: str | None = None  # a prompt field: normalise advantages within its strata

    save_every: int = Field(default=50, ge=1)
    # Warn when more than this share of a step's groups have equal rewards (no signal).
    warn_zero_variance: float = Field(default=0.5, ge=0, le=1)
    resume: bool = True
    seed: int = 0
    chat_template: bool = True  # render prompts with the policy's chat template when it has one
    progress: bool = True


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> GRPOConfig:
    data: dict[str, Any] = {}
    if path is not None:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    config = GRPOConfig.model_validate(data)
    if config.dense is not None and config.turns is not None:
        raise ValueError("dense and turns: each sets every token's advantage; give one")
    labels = [source.label for source in config.rewards]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(f"rewards: {', '.join(repeated)} appear(s) twice; give each a 'name'")
    return config
