"""Kind ``clip_goal``: zero-shot rewards from CLIP (VLM-RM, "Vision-Language Models are
Zero-Shot Reward Models for Reinforcement Learning").

    x = the image embedding, normalised
    g = the mean of the normalised goal-prompt embeddings, normalised
    b = the same for the baseline prompts (none: alpha is 0)
    P = alpha * d d^T / |d|^2 + (1 - alpha) * I,  d = g - b
    reward = 1 - |(x - g) P|^2 / 2

With alpha = 0 the reward is the cosine similarity of image and goal. Every image of an
item is a frame: ``/v1/score`` rewards the last frame, ``/v1/score/steps`` gives one reward
per frame (a robot trajectory's step rewards; step k is the k-th image), optionally
averaged over a trailing ``window``. Text embeddings are cached.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from pydantic import Field

from rewardserve.models.backends.loading import weights_from_host, weights_to_host
from rewardserve.models.batch_policy import BatchPolicy
from rewardserve.models.cache import LRUCache
from rewardserve.models.checkpoints import load_tokenizer
from rewardserve.models.errors import ItemError, RequestError
from rewardserve.models.images import load_item_images
from rewardserve.models.kinds import register_kind
from rewardserve.models.options import KindOptions
from rewardserve.models.plan import Job, Unit, UnitOutput
from rewardserve.models.reward_model import RewardModel
from rewardserve.models.text.steps import aggregate
from rewardserve.protocol import Item, ItemResult, ScoreOptions, StepOptions, StepsResult


@dataclass
class _Frames:
    pixels: torch.Tensor
    goal: tuple[str, ...]
    baseline: tuple[str, ...]
    alpha: float
    window: int | None
    steps: bool


def _texts(value: str | list[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def goal_reward(x: np.ndarray, goal: np.ndarray, baseline: np.ndarray | None, alpha: float) -> np.ndarray:
    """Rewards of unit image embeddings ``x`` [n, d] for the unit goal (and baseline)."""
    projection = np.eye(len(goal))
    if baseline is not None and alpha > 0:
        d = goal - baseline
        if float(d @ d) < 1e-12:
            raise ItemError(
                "the goal and baseline prompts embed to the same vector, so the direction "
                "between them is undefined; give another baseline, or alpha 0"
            )
        projection = alpha * np.outer(d, d) / float(d @ d) + (1 - alpha) * projection
    diff = (x - goal) @ projection
    rewards: np.ndarray = 1.0 - 0.5 * np.sum(diff * diff, axis=-1)
    return rewards


def _unit(v: np.ndarray) -> np.ndarray:
    unit: np.ndarray = v / np.linalg.norm(v, axis=-1, keepdims=True)
    return unit


class CLIPGoalOptions(KindOptions):
    goal: str | list[str] | None = Field(None, description="The goal prompt(s) when a request sends none.")
    baseline: str | list[str] | None = Field(
        None, description="Baseline prompt(s): the goal direction is goal - baseline."
    )
    alpha: float | None = Field(
        None, description="How far to project onto the goal-baseline direction (default 0.5 with a baseline)."
    )
    text_cache_size: int = Field(4096, ge=0, description="Prompt embeddings kept.")


@register_kind("clip_goal")
class CLIPGoalModel(RewardModel):
    Options = CLIPGoalOptions
    options: CLIPGoalOptions
    # A unit of work is one frame; frames batch without padding.
    default_policy = BatchPolicy(max_batch_tokens=64, max_wait_ms=5.0, pads=False)
    endpoints = frozenset({"score", "steps"})

    def to_host(self) -> str:
        return weights_to_host([self.model], self.device)

    def from_host(self) -> None:
        weights_from_host([self.model], self.device)

    def load(self) -> None:
        if self.spec.adapter is not None:
            raise ValueError(f"model {self.name!r}: 'adapter' is for outcome, process and verifier models")
        from transformers import AutoImageProcessor, CLIPModel

        from rewardserve.models.backends.loading import pick_device

        self.device = pick_device(self.spec.device)
        spec = self.spec
        self.model = CLIPModel.from_pretrained(spec.source, dtype=torch.float32).to(self.device).eval()
        self.image_processor = AutoImageProcessor.from_pretrained(spec.source)
        self.tokenizer = load_tokenizer(spec.source, tokenizer=spec.tokenizer, trust_remote_code=spec.trust_remote_code)
        self.text_cache = LRUCache(self.options.text_cache_size)

    @property
    def backend_name(self) -> str:
        return "transformers"

    def probe(self) -> None:
        from PIL import Image

        pixels = self.image_processor(images=[Image.new("RGB", (8, 8))], return_tensors="pt")["pixel_values"]
        self._image_embeddings(pixels)
        self._text_embeddings(("a photo",))

    # ------------------------------------------------------------------ prepare

    def prepare(self, items: list[Item], options: ScoreOptions | StepOptions) -> list[Job[_Frames] | ItemError]:
        goal = _texts(options.goal) or _texts(self.options.goal)
        if not goal:
            raise RequestError("a clip_goal model needs a goal: options.goal (or its config)", param="options.goal")
        baseline = _texts(options.baseline) or _texts(self.options.baseline)
        default_alpha = self.options.alpha if self.options.alpha is not None else (0.5 if baseline else 0.0)
        alpha = options.alpha if options.alpha is not None else default_alpha
        steps = isinstance(options, StepOptions)
        window = options.window if isinstance(options, StepOptions) else None
        entries: list[Job[_Frames] | ItemError] = []
        budget = self.image_policy.request_budget()
        for index, item in enumerate(items):
            images = load_item_images(item, index, self.image_policy, budget)
            if not images:
                entries.append(ItemError("a clip_goal item needs at least one image"))
                continue
            pixels = self.image_processor(images=images, return_tensors="pt")["pixel_values"]
            payload = _Frames(pixels, goal, baseline, alpha if baseline else 0.0, window, steps)
            entries.append(Job(length=len(images), payload=payload))
        return entries

    # ------------------------------------------------------------------ run

    @torch.inference_mode()  # type: ignore[untyped-decorator]  # torch is untyped
    def _image_embeddings(self, pixels: torch.Tensor) -> np.ndarray:
        out = self.model.get_image_features(pixel_values=pixels.to(self.device))
        out = out if isinstance(out, torch.Tensor) else out.pooler_output
        return _unit(out.double().cpu().numpy())

    @torch.inference_mode()  # type: ignore[untyped-decorator]  # torch is untyped
    def _text_embeddings(self, texts: tuple[str, ...]) -> np.ndarray:
        vectors: dict[str, np.ndarray] = {}
        for text in dict.fromkeys(texts):
            cached = self.text_cache.get(text)
            if cached is not None:
                vectors[text] = cached
        missing = [t for t in dict.fromkeys(texts) if t not in vectors]
        if missing:
            batch = self.tokenizer(missing, padding=True, truncation=True, return_tensors="pt")
            out = self.model.get_text_features(**{k: v.to(self.device) for k, v in batch.items()})
            out = out if isinstance(out, torch.Tensor) else out.pooler_output
            for text, vector in zip(missing, _unit(out.double().cpu().numpy())):
                vectors[text] = vector
                self.text_cache.put(text, vector)  # kept for later calls (a cache of 0 keeps none)
        return np.stack([vectors[t] for t in texts])

    def _prompt_vector(self, texts: tuple[str, ...]) -> np.ndarray:
        return _unit(self._text_embeddings(texts).mean(0))

    def run(self, units: list[Unit[Job[_Frames]]]) -> list[UnitOutput]:
        batch = [unit.payload for unit in units]
        frames = self._image_embeddings(torch.cat([w.payload.pixels for w in batch]))
        results: list[ItemResult | ItemError] = []
        at = 0
        for work in batch:
            job = work.payload
            x = frames[at : at + work.length]
            at += work.length
            baseline = self._prompt_vector(job.baseline) if job.baseline else None
            try:
                rewards = goal_reward(x, self._prompt_vector(job.goal), baseline, job.alpha).tolist()
            except ItemError as exc:
                results.append(exc)
                continue
            if job.window:
                rewards = [float(np.mean(rewards[max(0, k - job.window + 1) : k + 1])) for k in range(len(rewards))]
            if not job.steps:
                results.append(ItemResult(score=rewards[-1]))
                continue
            stats = aggregate(rewards, None)
            results.append(
                StepsResult(
                    score=rewards[-1], step_scores=rewards, steps_scored=len(rewards), aggregates=stats.aggregates
                )
            )
        return [[result] for result in results]
