"""GRPO, one step at a time.

Each step:
  1. take a few prompts and sample G completions of each from the policy;
  2. score every completion on the service (a weighted mix of endpoints), a prompt's
     group sent as soon as all its completions have ended, while the policy goes on
     generating the others and then computes the log-probs of what was sampled: the
     reward phase hides behind them;
  3. turn rewards into advantages: normalise within each prompt's group (or within
     strata of a prompt field, Stratified GRPO); completions without a reward get none;
     with ``dense``, each token adds its process advantage (train/grpo/dense.py);
  4. update the policy with the clipped policy-gradient loss, plus KL to the frozen
     starting policy if asked, over micro-batches (gradient accumulation);
  5. log a metrics row, refresh the plot, and checkpoint every ``save_every`` steps.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import StoppingCriteria

from rewardserve.train.grpo.config import GRPOConfig
from rewardserve.train.grpo.dense import token_advantages
from rewardserve.train.grpo.plot import plot_metrics
from rewardserve.train.grpo.rewards import RewardMix, Scored
from rewardserve.train.grpo.turn_advantages import dual_advantages

EPS = 1e-6
log = logging.getLogger("rewardserve.grpo")


@dataclass
class Rollout:
    """G completions of each prompt, as token ids, with what the update needs."""

    rows: list[dict[str, Any]]  # the prompt row of each completion
    texts: list[str]  # the completions, decoded
    ids: torch.Tensor  # [N, prompt + completion] left-padded prompt, then the completion
    mask: torch.Tensor  # [N, T] attention mask
    completion_mask: torch.Tensor  # [N, T] 1 on the completion's tokens
    old_logps: torch.Tensor  # [N, T] per-token log-probs at sampling time (0 off-completion)
    ref_logps: torch.Tensor | None


def train(config: GRPOConfig) -> list[dict[str, Any]]:
    """Run the loop; returns the metrics rows (also in ``output_dir/metrics.jsonl``)."""
    from rewardserve.client.sync import RewardClient

    torch.manual_seed(config.seed)
    random.seed(config.seed)
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    prompts: list[dict[str, Any]] = [
        json.loads(line) for line in open(config.prompts, encoding="utf-8") if line.strip()
    ]
    if not prompts:
        raise ValueError(f"{config.prompts}: no prompts")
    client = RewardClient(config.service, api_key=config.api_key)
    rewards = RewardMix(client, config.rewards, config.dense, config.turns)
    rewards.preflight(prompts[0])  # before minutes of loading and sampling
    policy, tokenizer, optimizer, start, history = load_or_resume(config, out)
    reference = frozen_copy(config, policy) if config.kl_coef > 0 else None
    order = list(range(len(prompts)))
    bar = progress(config, start)
    colocated = None
    if config.colocate:
        from rewardserve.train.grpo.colocate import Colocated

        served = [s.model for s in config.rewards if s.model] + ([config.dense.model] if config.dense else [])
        colocated = Colocated(config.service, config.admin_key, served, config.colocate_level)

    updater = None
    if config.rm_updates is not None:
        from rewardserve.train.grpo.rm_updates import RMUpdater

        target = config.rm_updates.model or next((s.model for s in config.rewards if s.model), None)
        if target is None:
            raise ValueError("rm_updates: name the served reward model to update (rm_updates.model)")
        updater = RMUpdater(
            config.service, config.admin_key, target, config.rm_updates.checkpoints, config.rm_updates.every
        )

    # Groups in flight at once: the service batches them together.
    scorer = ThreadPoolExecutor(4, thread_name_prefix="rs-rewards")
    try:
        for step in range(start, config.steps):
            began = time.monotonic()
            batch = [
                prompts[order[(step * config.prompts_per_step + k) % len(order)]]
                for k in range(config.prompts_per_step)
            ]
            rm_version = updater.at_step(step) if updater is not None else None
            scoring: dict[int, Future[Scored]] = {}
            held: list[tuple[int, list[dict[str, Any]], list[str]]] = []  # colocated: scored once awake
            if colocated is not None:
                colocated.sleep()
            rollout = sample(
                config,
                policy,
                reference,
                tokenizer,
                batch,  # 1
                lambda at, rows, texts, scoring=scoring, held=held: (
                    held.append((at, rows, texts))
                    if colocated is not None
                    else scoring.update({at: scorer.submit(rewards.score, rows, texts)})
                ),
            )
            wake_s = colocated.wake() if colocated is not None else None
            for at, rows, texts in held:
                scoring[at] = scorer.submit(rewards.score, rows, texts)
            waited = time.monotonic()
            scored = Scored.joined([scoring[at].result() for at in sorted(scoring)])  # 2
            waited = time.monotonic() - waited
            reward, valid, per_source = scored.reward, scored.valid, scored.means()
            keys = groups(config, rollout.rows)
            if config.dense is not None and scored.dense is not None:  # 3, per token
                process, has_process = token_advantages(
                    rollout.ids, rollout.completion_mask, rollout.texts, scored.dense, tokenizer, keys
                )
                valid = valid & has_process
                outcome = group_advantages(reward, valid, keys)
                advantages = outcome[:, None] + config.dense.weight * process * valid[:, None]
            elif config.turns is not None and scored.turns is not None:  # 3, per turn
                totals = scored.turn_totals()
                valid = valid & ~totals.isnan()
                reward = reward + config.turns.total_weight * totals.nan_to_num(0.0)
                trajectory = group_advantages(reward, valid, keys)
                advantages, has = dual_advantages(
                    rollout.ids,
                    rollout.completion_mask,
                    rollout.texts,
                    scored.turns,
                    trajectory,
                    tokenizer,
                    keys,
                    config.turns,
                )
                valid = valid & has
                advantages = advantages * valid[:, None]
            else:
                advantages = group_advantages(reward, valid, keys)  # 3
            loss, kl = update(config, policy, optimizer, rollout, advantages)  # 4
            flat = zero_variance_share(reward, valid, keys)
            if flat is not None and flat > config.warn_zero_variance:
                log.warning(
                    "step %d: %.0f%% of the groups have equal rewards (no learning signal); the "
                    "reward may be too coarse or the task too easy / hard",
                    step + 1,
                    100 * flat,
                )
            completion = rollout.completion_mask.sum(1).float()  # tokens, the EOS included
            row = {
                "step": step + 1,
                "loss": loss,
                "kl": kl,
                "reward_mean": float(reward[valid].mean()) if valid.any() else None,
                "reward_std": float(reward[valid].std()) if valid.sum() > 1 else None,
                "invalid": int((~valid).sum()),
                "zero_variance_groups": flat,
                "completion_length": float(completion.mean()),
                "seconds": round(time.monotonic() - began, 3),
                "reward_wait_s": round(waited, 4),
                **({"dense_score": scored.dense_mean()} if config.dense is not None else {}),
                **({"turn_score": scored.turns_mean()} if config.turns is not None else {}),
                **({"rm_wake_s": round(wake_s, 4)} if wake_s is not None else {}),
                **({"rm_update": rm_version} if rm_version is not None else {}),
                **{f"reward/{k}": v for k, v in per_source.items()},
            }
            history.append(row)  # 5
            with open(out / "metrics.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            plot_metrics(history, out / "metrics.png")
            if (step + 1) % config.save_every == 0 or step + 1 == config.steps:
                save_checkpoint(out, step + 1, policy, tokenizer, optimizer)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(reward=f"{row['reward_mean'] or 0:.3f}", kl=f"{kl:.4f}")
    finally:
        scorer.shutdown()
        if colocated is not None:
            colocated.close()
        if updater is not None:
            updater.close()
    if bar is not None:
        bar.close()
    return history


# --------------------------------------------------------------------------- 1. sampling


@torch.no_grad()  # type: ignore[untyped-decorator]  # torch is not type-checked here
def sample(
    config: GRPOConfig,
    policy: Any,
    reference: Any,
    tokenizer: Any,
    batch: list[dict[str, Any]],
    decoded_hook: Callable[[int, list[dict[str, Any]], list[str]], None] | None = None,
) -> Rollout:
    """G completions of each prompt, in one generate call. ``decoded_hook(at, rows, texts)``
    gets each prompt's group (its completions from index ``at`` of the step) as soon as all
    its completions have ended, while the others are still generated, and the rest when
    generation stops: before the log-probs are computed (the loop starts scoring there)."""
    texts = [render_prompt(config, tokenizer, row["prompt"]) for row in batch]
    encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    prompt_len = encoded["input_ids"].shape[1]
    rows = [row for row in batch for _ in range(config.group_size)]
    watch = _GroupsDone(config.group_size, prompt_len, tokenizer, rows, decoded_hook)
    generated = policy.generate(
        **encoded,
        do_sample=True,
        temperature=config.temperature,
        top_p=config.top_p,
        max_new_tokens=config.max_new_tokens,
        num_return_sequences=config.group_size,
        pad_token_id=tokenizer.pad_token_id,
        stopping_criteria=[watch],
    )
    keep, decoded = watch.finish(generated)
    mask = torch.cat([encoded["attention_mask"].repeat_interleave(config.group_size, 0), keep], 1)
    completion_mask = torch.cat(
        [torch.zeros_like(encoded["input_ids"]).repeat_interleave(config.group_size, 0), keep], 1
    )
    old = token_logps(policy, generated, mask) * completion_mask
    ref = token_logps(reference, generated, mask) * completion_mask if reference is not None else None
    return Rollout(rows, decoded, generated, mask, completion_mask, old, ref)


class _GroupsDone(StoppingCriteria):  # type: ignore[misc]  # transformers is not type-checked here
    """Stops nothing: at each generation step it hands on the groups whose completions
    have all ended (each at its first EOS, kept so the policy learns to stop)."""

    def __init__(
        self,
        group_size: int,
        prompt_len: int,
        tokenizer: Any,
        rows: list[dict[str, Any]],
        hook: Callable[[int, list[dict[str, Any]], list[str]], None] | None,
    ):
        self.g, self.prompt_len, self.tokenizer, self.rows, self.hook = group_size, prompt_len, tokenizer, rows, hook
        self.texts: list[str | None] = [None] * len(rows)

    def _ends(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Which tokens each completion keeps, and which completions have ended."""
        completion = ids[:, self.prompt_len :]
        eos = completion == self.tokenizer.eos_token_id
        done = eos.int().cumsum(1)
        return ((done == 0) | ((done == 1) & eos)).long(), eos.any(1)

    def _hand_on(self, ids: torch.Tensor, keep: torch.Tensor, ended: torch.Tensor) -> None:
        for at in range(0, len(self.rows), self.g):
            if self.texts[at] is None and bool(ended[at : at + self.g].all()):
                part = ids[at : at + self.g, self.prompt_len :].masked_fill(
                    keep[at : at + self.g] == 0, self.tokenizer.pad_token_id
                )
                texts = self.tokenizer.batch_decode(part, skip_special_tokens=True)
                self.texts[at : at + self.g] = texts
                if self.hook is not None:
                    self.hook(at, self.rows[at : at + self.g], texts)

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        if self.hook is not None:
            self._hand_on(input_ids, *self._ends(input_ids))
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def finish(self, generated: torch.Tensor) -> tuple[torch.Tensor, list[str]]:
        """Generation stopped: every group not handed on yet goes now."""
        keep, _ = self._ends(generated)
        self._hand_on(generated, keep, torch.ones(len(self.rows), dtype=torch.bool))
        return keep, [t or "" for t in self.texts]


def render_prompt(config: GRPOConfig, tokenizer: Any, prompt: str | list[dict[str, str]]) -> str:
    messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    if config.chat_template and tokenizer.chat_template:
        text: str = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return text
    return "\n".join(m["content"] for m in messages)


def token_logps(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log p(token t | tokens < t) for every position (0 at position 0). Positions count
    from a row's first real token, as in generation, so padding changes nothing."""
    positions = (mask.long().cumsum(1) - 1).clamp_min(0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, :-1].float()
    picked = torch.gather(torch.log_softmax(logits, -1), 2, ids[:, 1:, None]).squeeze(-1)
    return torch.cat([torch.zeros_like(picked[:, :1]), picked], 1)


# --------------------------------------------------------------------------- 3. advantages


def groups(config: GRPOConfig, rows: list[dict[str, Any]]) -> list[Hashable]:
    """Who is compared with whom: the completions of one prompt (GRPO), or every
    completion whose prompt has the same ``stratify_by`` value (Stratified GRPO)."""
    if config.stratify_by:
        return [json.dumps(row.get(config.stratify_by), sort_keys=True) for row in rows]
    return [i // config.group_size for i in range(len(rows))]


def zero_variance_share(reward: torch.Tensor, valid: torch.Tensor, keys: list[Hashable]) -> float | None:
    """The share of groups (with two or more rewards) whose rewards are all equal: their
    advantages are 0, so they teach nothing."""
    flat = counted = 0
    for key in dict.fromkeys(keys):
        members = torch.tensor([k == key for k in keys]) & valid
        if members.sum() < 2:
            continue
        counted += 1
        values = reward[members]
        flat += int(bool((values.max() - values.min()).abs() <= EPS))
    return flat / counted if counted else None


def group_advantages(reward: torch.Tensor, valid: torch.Tensor, keys: list[Hashable]) -> torch.Tensor:
    """(r - mean) / (std + eps) within each group, over valid rewards only; a completion
    without a reward (or alone in its group) gets advantage 0."""
    advantages = torch.zeros_like(reward)
    for key in dict.fromkeys(keys):
        members = torch.tensor([k == key for k in keys]) & valid
        if members.sum() < 2:
            continue
        values = reward[members]
        advantages[members] = (values - values.mean()) / (values.std() + EPS)
    return advantages


# --------------------------------------------------------------------------- 4. the update


def update(
    config: GRPOConfig, policy: Any, optimizer: Any, rollout: Rollout, advantages: torch.Tensor
) -> tuple[float, float]:
    policy.train()
    n = rollout.ids.shape[0]
    micro = max(1, math.ceil(n / config.grad_accumulation))
    total_tokens = rollout.completion_mask.sum().clamp_min(1)
    total_loss = total_kl = 0.0
    optimizer.zero_grad()
    for start in range(0, n, micro):
        part = slice(start, start + micro)
        mask = rollout.completion_mask[part].float()
        logps = token_logps(policy, rollout.ids[part], rollout.mask[part])
        ratio = torch.exp(logps - rollout.old_logps[part])
        adv = advantages[part, None] if advantages.dim() == 1 else advantages[part]  # per completion, or per token
        clipped = torch.clamp(ratio, 1 - config.clip_epsilon, 1 + config.clip_epsilon)
        per_token = -torch.min(ratio * adv, clipped * adv)
        if rollout.ref_logps is not None:
            # k3 estimator of KL(policy || reference), per token (as GRPO does).
            delta = rollout.ref_logps[part] - logps
            kl = torch.exp(delta) - delta - 1
            per_token = per_token + config.kl_coef * kl
            total_kl += ((kl * mask).sum() / total_tokens).item()
        loss = (per_token * mask).sum() / total_tokens  # token-level mean over the whole batch
        loss.backward()
        total_loss += loss.item()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
    optimizer.step()
    policy.eval()
    return total_loss, total_kl


# --------------------------------------------------------------------------- set-up, checkpoints


def load_or_resume(config: GRPOConfig, out: Path) -> tuple[Any, Any, Any, int, list[dict[str, Any]]]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    latest = latest_checkpoint(out) if config.resume else None
    if latest is not None:
        log.info("resuming from %s (step %s of %d)", latest, latest.name.split("-")[1], config.steps)
    elif not config.resume and latest_checkpoint(out) is not None:
        log.info("starting over in %s: its checkpoints and metrics are replaced as the run goes", out)
    else:
        log.info("starting from %s", config.policy)
    source = latest or config.policy
    tokenizer = AutoTokenizer.from_pretrained(source)
    tokenizer.padding_side = "left"  # generation continues from the right end
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    policy = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=config.learning_rate)
    history, start = [], 0
    if latest is not None:
        optimizer.load_state_dict(torch.load(latest / "optimizer.pt", weights_only=True))
        start = json.loads((latest / "grpo_state.json").read_text())["step"]
        metrics = out / "metrics.jsonl"
        history = [json.loads(line) for line in open(metrics)][:start] if metrics.exists() else []
        metrics.write_text("".join(json.dumps(r) + "\n" for r in history))
        torch.manual_seed(config.seed + start)
    else:
        (out / "metrics.jsonl").write_text("")
    return policy, tokenizer, optimizer, start, history


def frozen_copy(config: GRPOConfig, policy: Any) -> Any:
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(config.policy, dtype=torch.float32).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    return reference


def save_checkpoint(out: Path, step: int, policy: Any, tokenizer: Any, optimizer: Any) -> Path:
    path = out / f"checkpoint-{step}"
    policy.save_pretrained(path)
    tokenizer.save_pretrained(path)
    torch.save(optimizer.state_dict(), path / "optimizer.pt")
    (path / "grpo_state.json").write_text(json.dumps({"step": step}))
    return path


def latest_checkpoint(out: Path) -> Path | None:
    found = [p for p in out.glob("checkpoint-*") if (p / "grpo_state.json").exists()]
    return max(found, key=lambda p: int(p.name.split("-")[1])) if found else None


def progress(config: GRPOConfig, start: int) -> Any:
    if not config.progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=config.steps, initial=start, desc="grpo", unit="step")
