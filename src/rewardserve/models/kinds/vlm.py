"""Kind ``vlm``: vision-language reward models (Qwen2-VL / Qwen2.5-VL backbones).

The conversation, images included, is templated by the tokenizer's chat template; each
image placeholder is expanded to as many image tokens as the image processor's patch
grid gives (what the Qwen2-VL processor does; it is built here from the PIL image
processor because its video half needs torchvision). The reward is read at the last
token by one of three heads (``options.head``):

    value_head  Linear(h, 1) stored as ``v_head.summary`` (Skywork-VL-Reward layout)
    mlp         Linear(h, h) -> activation -> Linear(h, 1) under ``score.0`` / ``score.2``
    yes_no      the LM's next-token probability of "yes" over "no" spellings after the
                generation prompt (UI-Genie's ``<|+|>`` / ``<|-|>``, or Yes / No)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field
from torch import nn

from rewardserve.models.backends.loading import context_limit, weights_from_host, weights_to_host
from rewardserve.models.batch_policy import BatchPolicy
from rewardserve.models.checkpoints import load_tokenizer
from rewardserve.models.errors import ItemError, RequestError
from rewardserve.models.images import load_item_images
from rewardserve.models.kinds import register_kind
from rewardserve.models.options import KindOptions
from rewardserve.models.plan import Job, Unit, UnitOutput
from rewardserve.models.reward_model import RewardModel, sigmoid
from rewardserve.models.text.chat import fit_text
from rewardserve.protocol import ImagePart, ImageURLPart, Item, ItemResult, ScoreOptions

_ACTIVATIONS = {"relu": nn.ReLU, "silu": nn.SiLU, "gelu": nn.GELU, "tanh": nn.Tanh}


def expected_load_notes(record: logging.LogRecord) -> bool:
    """False for what transformers says of every VL reward checkpoint: the head's
    weights, read apart by _load_head, as unexpected keys (a report with missing or
    mismatched keys still shows), and which layers a single process does not shard."""
    message = record.getMessage()
    if "LOAD REPORT" in message:
        return "MISSING" in message or "MISMATCH" in message
    return "were not sharded" not in message


@dataclass
class _VLMInput:
    ids: list[int]
    pixel_values: torch.Tensor | None
    grid_thw: torch.Tensor | None
    activation: str


class VLMOptions(KindOptions):
    head: Literal["value_head", "mlp", "yes_no"] = Field(
        "value_head", description="value_head: a linear head; mlp: Linear-act-Linear; yes_no: P(yes) from the LM head."
    )
    head_prefix: str | None = Field(
        None, description="The head's weight names in the checkpoint (default v_head.summary. or score.)."
    )
    head_activation: Literal["relu", "gelu", "silu", "tanh"] = Field("relu", description="mlp: the activation.")
    yes: list[str] = Field(["Yes", " Yes"], description="yes_no: spellings of yes.")
    no: list[str] = Field(["No", " No"], description="yes_no: spellings of no.")


@register_kind("vlm")
class VLMModel(RewardModel):
    Options = VLMOptions
    options: VLMOptions
    default_policy = BatchPolicy(max_batch_tokens=8192, max_batch_items=32, max_wait_ms=5.0)
    endpoints = frozenset({"score", "compare"})

    def to_host(self) -> str:
        return weights_to_host([self.backbone, self.head], self.device)

    def from_host(self) -> None:
        weights_from_host([self.backbone, self.head], self.device)

    def load(self) -> None:
        if self.spec.adapter is not None:
            raise ValueError(f"model {self.name!r}: 'adapter' is for outcome, process and verifier models")
        from transformers import AutoImageProcessor, AutoModelForImageTextToText

        from rewardserve.models.backends.loading import pick_device, pick_dtype

        source = self.spec.source
        self.device = pick_device(self.spec.device)
        self.dtype = pick_dtype(self.spec.dtype, self.device)
        spec = self.spec
        remote = spec.trust_remote_code
        self.tokenizer = load_tokenizer(
            source, tokenizer=spec.tokenizer, chat_template=spec.chat_template, trust_remote_code=remote
        )
        self.image_processor = AutoImageProcessor.from_pretrained(source, trust_remote_code=remote)
        loggers = [
            logging.getLogger(n) for n in ("transformers.modeling_utils", "transformers.distributed.tensor_parallel")
        ]
        for logger in loggers:
            logger.addFilter(expected_load_notes)
        try:
            model = AutoModelForImageTextToText.from_pretrained(source, dtype=self.dtype, trust_remote_code=remote)
        finally:
            for logger in loggers:
                logger.removeFilter(expected_load_notes)
        model = model.to(self.device).eval()
        self.backbone = model.model
        config = model.config
        text_config = config.get_text_config()
        self.image_token_id = config.image_token_id
        self.image_token = self.tokenizer.convert_ids_to_tokens(config.image_token_id)
        self.merge = self.image_processor.merge_size
        self.pad_id = text_config.pad_token_id if text_config.pad_token_id is not None else 0
        self.max_tokens_limit = context_limit(self.name, self.spec.max_tokens, text_config, self.tokenizer)
        self.head_kind = self.options.head
        self.head, self.token_ids = self._load_head(model, text_config.hidden_size)
        if self.device.type == "cpu" and self.dtype == torch.float32:
            from rewardserve.models.backends.kernels.cpu_linear import pack_linears

            pack_linears(self.backbone)

    def _load_head(self, model: Any, hidden: int) -> tuple[nn.Module, list[int] | None]:
        from rewardserve.models.backends.architectures import checkpoint_tensors

        if self.head_kind == "yes_no":
            yes, no = self.options.yes, self.options.no
            ids = [[self.tokenizer.encode(w, add_special_tokens=False)[0] for w in words] for words in (yes, no)]
            if set(ids[0]) & set(ids[1]):
                raise ValueError("the yes and no spellings share a first token")
            self.n_yes = len(set(ids[0]))
            return model.lm_head, sorted(set(ids[0])) + sorted(set(ids[1]))
        if self.head_kind == "value_head":
            prefix = self.options.head_prefix or "v_head.summary."
            head = nn.Linear(hidden, 1)
            layers = {"": head}
        elif self.head_kind == "mlp":
            prefix = self.options.head_prefix or "score."
            activation = _ACTIVATIONS[self.options.head_activation]
            head = nn.Sequential(nn.Linear(hidden, hidden), activation(), nn.Linear(hidden, 1))
            layers = {"0.": head[0], "2.": head[2]}
        else:
            raise ValueError(f"model {self.name!r}: options.head must be value_head, mlp or yes_no")
        tensors = checkpoint_tensors(self.spec.source, prefix)
        for sub, layer in layers.items():
            if f"{sub}weight" not in tensors:
                raise ValueError(f"{self.spec.source}: no {prefix}{sub}weight in the checkpoint")
            with torch.no_grad():
                layer.weight.copy_(tensors[f"{sub}weight"])
                layer.bias.copy_(tensors[f"{sub}bias"])
        return head.to(device=self.device, dtype=self.dtype), None

    max_tokens_limit: int | None = None  # set by load()

    @property
    def max_tokens(self) -> int | None:
        return self.max_tokens_limit if self.max_tokens_limit is not None else self.spec.max_tokens

    @property
    def backend_name(self) -> str:
        return "transformers"

    # ------------------------------------------------------------------ prepare

    def prepare(self, items: list[Item], options: ScoreOptions) -> list[Job[_VLMInput] | ItemError]:
        activation = options.activation
        budget = self.image_policy.request_budget()
        return [self._prepare_one(index, item, activation, budget) for index, item in enumerate(items)]

    def _prepare_one(self, index: int, item: Item, activation: str, budget: Any) -> Job[_VLMInput] | ItemError:
        images = load_item_images(item, index, self.image_policy, budget)  # bad images: 413 / 422
        try:
            return self._encode(index, item, images, activation)
        except ItemError as exc:
            return exc

    def _encode(self, index: int, item: Item, images: list[Any], activation: str) -> Job[_VLMInput]:
        messages = []
        for message in item.conversation():
            d = message.model_dump(exclude_none=True)
            if isinstance(message.content, list):  # the template only needs where images go
                d["content"] = [
                    {"type": "image"} if isinstance(p, (ImagePart, ImageURLPart)) else p.model_dump()
                    for p in message.content
                ]
            messages.append(d)
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=self.head_kind == "yes_no"
        )
        bos = self.tokenizer.bos_token
        if bos and text.startswith(bos):
            text = text[len(bos) :]
        assert self.max_tokens_limit is not None  # set by load()
        fit_text(text, self.max_tokens_limit, "error", index=index)  # before tokenizing
        pixel_values = grid = None
        if images:
            processed = self.image_processor(images=images, return_tensors="pt")
            pixel_values, grid = processed["pixel_values"], processed["image_grid_thw"]
            text = expand_image_tokens(text, self.image_token, [int(g.prod()) // self.merge**2 for g in grid])
        ids = self.tokenizer(text)["input_ids"]
        if len(ids) > self.max_tokens_limit:
            raise RequestError(
                f"items[{index}] has {len(ids)} tokens with its images, over this model's limit of "
                f"{self.max_tokens_limit}",
                param=f"items[{index}]",
                type="payload_too_large",
            )
        return Job(len(ids), _VLMInput(ids, pixel_values, grid, activation), prompt_tokens=len(ids))

    # ------------------------------------------------------------------ run

    @torch.inference_mode()  # type: ignore[untyped-decorator]  # torch is untyped
    def run(self, units: list[Unit[Job[_VLMInput]]]) -> list[UnitOutput]:
        inputs = [unit.payload.payload for unit in units]
        width = max(len(x.ids) for x in inputs)
        ids = torch.full((len(inputs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(inputs), width), dtype=torch.long)
        for row, x in enumerate(inputs):
            ids[row, : len(x.ids)] = torch.tensor(x.ids)
            mask[row, : len(x.ids)] = 1
        with_images = [x for x in inputs if x.pixel_values is not None]
        extra = {}
        if with_images:
            extra = {
                "pixel_values": torch.cat([x.pixel_values for x in with_images]).to(self.device, self.dtype),
                "image_grid_thw": torch.cat([x.grid_thw for x in with_images]).to(self.device),
                # Where the image tokens are, for the multimodal rotary positions.
                "mm_token_type_ids": (ids == self.image_token_id).int().to(self.device),
            }
        hidden = self.backbone(
            input_ids=ids.to(self.device), attention_mask=mask.to(self.device), **extra
        ).last_hidden_state
        last = hidden[torch.arange(len(inputs)), torch.tensor([len(x.ids) - 1 for x in inputs])]
        if self.head_kind == "yes_no":
            logits = nn.functional.linear(last, self.head.weight[self.token_ids]).double()
            probs = torch.softmax(logits, -1)
            values = probs[:, : self.n_yes].sum(-1).tolist()
        else:
            values = self.head(last).float().squeeze(-1).tolist()
        results: list[ItemResult | ItemError] = []
        for x, value in zip(inputs, values):
            if not np.isfinite(value):
                results.append(ItemError("the model produced a non-finite score"))
                continue
            score = sigmoid(value) if x.activation == "sigmoid" and self.head_kind != "yes_no" else value
            results.append(ItemResult(score=score, tokens=len(x.ids)))
        return [[result] for result in results]


def expand_image_tokens(text: str, image_token: str, counts: list[int]) -> str:
    """Each image placeholder, in order, repeated as many times as its image's merged
    patch count (Qwen2-VL's processor does the same before tokenizing)."""
    marker = "\x00IMAGE\x00"
    for count in counts:
        if image_token not in text:
            raise ItemError("the chat template wrote fewer image placeholders than there are images")
        text = text.replace(image_token, marker * count, 1)
    if image_token in text:
        raise ItemError("the chat template wrote more image placeholders than there are images")
    return text.replace(marker, image_token)
