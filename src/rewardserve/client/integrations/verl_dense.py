"""A verl reward manager with token-level rewards: a process reward model's step rewards
on the response's own tokens, verl's outcome reward on its last token.

    reward:
      reward_manager:
        source: importlib
        name: TokenRewardManager
        module: {path: <site-packages>/rewardserve/client/integrations/verl_dense.py}

Settings come from the environment of verl's reward workers (``ray_init.runtime_env``'s
``env_vars``): ``REWARDSERVE_BASE_URL``, ``REWARDSERVE_API_KEY``, and
``REWARDSERVE_TOKEN_REWARDS``, JSON: ``{"model": "prm", "options": {...}, "spread":
"last", "invalid_reward": null}``, where ``options`` are /v1/score/steps' (``separator``,
``shaping``, ``gamma``...), ``spread`` is token_rewards' and ``invalid_reward`` what the
steps of a result the service could not compute get (null: raise, as verl has no
missing reward).

For verl 0.9.1's reward loop (``verl/experimental/reward_loop``): each sample's
``run_single`` decodes its prompt and response as verl's naive manager does, scores the
response's steps (one request per sample; the service batches them with the others),
places the step rewards on the valid response ids with ``token_rewards``, and adds
verl's ``compute_score`` (its rule reward for the data source, or your custom function)
on the last token. ``assemble_rm_scores`` writes each sample's row into a float32 tensor
shaped like ``responses``, verl's ``rm_scores``.

verl is imported only when verl asks for the class (its loader's ``getattr``), so this
module imports without it.
"""

from __future__ import annotations

import inspect
import json
import os
from typing import Any

from rewardserve.client.errors import RewardServeError
from rewardserve.client.integrations.verl import _async_client, _prompt
from rewardserve.client.token_alignment import token_rewards

_built: dict[str, type] = {}


def settings() -> dict[str, Any]:
    raw = os.environ.get("REWARDSERVE_TOKEN_REWARDS", "{}")
    try:
        given = json.loads(raw)
    except ValueError:
        raise ValueError(f"REWARDSERVE_TOKEN_REWARDS is not JSON: {raw[:80]!r}") from None
    unknown = set(given) - {"model", "options", "spread", "invalid_reward"}
    if unknown:
        raise ValueError(f"REWARDSERVE_TOKEN_REWARDS: unknown keys {sorted(unknown)}")
    return {"model": "prm", "options": {}, "spread": "last", "invalid_reward": None, **given}


def __getattr__(name: str) -> type:
    if name != "TokenRewardManager":
        raise AttributeError(name)
    if name not in _built:
        _built[name] = _token_reward_manager()
    return _built[name]


def _token_reward_manager() -> type:
    import torch
    from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
    from verl.utils.reward_score import default_compute_score

    class TokenRewardManager(RewardManagerBase):
        """See the module."""

        def __init__(
            self,
            config: Any,
            tokenizer: Any,
            compute_score: Any,
            reward_router_address: Any = None,
            reward_model_tokenizer: Any = None,
        ):
            super().__init__(config, tokenizer, compute_score)
            self.outcome_fn: Any = compute_score or default_compute_score
            self.settings = settings()

        async def run_single(self, data: Any) -> dict[str, Any]:
            item = data[-1:][0]
            prompt_ids, response_ids = item.batch["prompts"], item.batch["responses"]
            mask = item.batch["attention_mask"]
            prompt_ids = prompt_ids[prompt_ids.shape[-1] - int(mask[: prompt_ids.shape[-1]].sum()) :]
            response_ids = response_ids[: int(mask[-response_ids.shape[-1] :].sum())].tolist()
            prompt = self.tokenizer.decode(prompt_ids, skip_special_tokens=True)
            response = self.tokenizer.decode(response_ids, skip_special_tokens=True)
            extra_info = item.non_tensor_batch.get("extra_info", {}) or {}
            outcome = await self._outcome(item, response, extra_info)
            steps = await self._steps(_prompt(extra_info) or prompt, response)
            if steps is None:  # invalid, with invalid_reward set: that in place of the steps'
                rewards = [0.0] * len(response_ids)
                rewards[-1] += outcome + float(self.settings["invalid_reward"])
            else:
                rewards = token_rewards(
                    steps, self.tokenizer, response_ids, spread=self.settings["spread"], outcome=outcome
                )
            info = {
                "outcome": outcome,
                "step_rewards": sum(rewards) - outcome,
                "steps": len(steps.spans) if steps else 0,
            }
            return {"reward_score": rewards, "reward_extra_info": info}

        async def _outcome(self, item: Any, response: str, extra_info: dict[str, Any]) -> float:
            score = self.outcome_fn(
                data_source=item.non_tensor_batch["data_source"],
                solution_str=response,
                ground_truth=item.non_tensor_batch["reward_model"]["ground_truth"],
                extra_info=extra_info,
            )
            if inspect.isawaitable(score):
                score = await score
            return float(score["score"] if isinstance(score, dict) else score)

        async def _steps(self, prompt: str, response: str) -> Any:
            client = _async_client(os.environ.get("REWARDSERVE_BASE_URL"), os.environ.get("REWARDSERVE_API_KEY"))
            answer = await client.score_steps(
                self.settings["model"], [{"prompt": prompt, "response": response}], **self.settings["options"]
            )
            (result,) = answer.results
            if result.valid:
                return result
            if self.settings["invalid_reward"] is None:
                raise RewardServeError(f"no step rewards for this sample: {result.error}")
            return None

        @classmethod
        def assemble_rm_scores(cls, data: Any, scores: list[list[float]]) -> Any:  # type: ignore[override]
            # verl's base puts one score on each row's last token; here each is a row.
            out = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
            for row, rewards in enumerate(scores):
                out[row, : len(rewards)] = torch.tensor(rewards, dtype=torch.float32)
            return out

    return TokenRewardManager
