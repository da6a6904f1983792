"""The naive way to score steps: one forward pass per step prefix, straight transformers,
each family as its model card computes it. The service must match these in one pass."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.builders import CHATML_TEMPLATE  # noqa: F401  (documents the template in use)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=-1)


def _qwen_prm_last_tag(model_dir: Path, conversations: list[list[dict]]) -> list[float]:
    """For each conversation, P(label 1) at its last <extra_0>: Qwen2.5-Math-PRM's card
    readout (softmax over the head's 2 labels). The head is built here from the
    checkpoint's `score.*` tensors; the backbone is transformers' Qwen2."""
    from safetensors.torch import load_file
    from transformers import Qwen2Model

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    base = Qwen2Model.from_pretrained(model_dir, dtype=torch.float32).eval()
    weights = load_file(Path(model_dir) / "model.safetensors")
    head = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    head.load_state_dict({k[len("score.") :]: v for k, v in weights.items() if k.startswith("score.")})
    sep_id = tokenizer.encode("<extra_0>")[0]
    out = []
    with torch.inference_mode():
        for conv in conversations:
            text = tokenizer.apply_chat_template(conv, tokenize=False, add_generation_prompt=False)
            ids = torch.tensor([tokenizer.encode(text)])
            logits = head(base(input_ids=ids).last_hidden_state)[0]
            at = (ids[0] == sep_id).nonzero().flatten()[-1]
            out.append(float(_softmax(logits[at])[1]))
    return out


def qwen_prm_steps(model_dir: Path, messages: list[dict], steps: list[str]) -> list[float]:
    """Qwen2.5-Math-PRM card: assistant content = steps joined by <extra_0> and ended by
    one; one pass per step prefix."""
    return _qwen_prm_last_tag(
        model_dir,
        [
            messages + [{"role": "assistant", "content": "<extra_0>".join(steps[:k]) + "<extra_0>"}]
            for k in range(1, len(steps) + 1)
        ],
    )


def qwen_prm_turns(model_dir: Path, messages: list[dict]) -> list[float]:
    """An agent trajectory the same way: each assistant turn ends with <extra_0>; one pass
    per trajectory prefix ending at an assistant turn."""
    tagged = [{**m, "content": m["content"] + "<extra_0>"} if m["role"] == "assistant" else m for m in messages]
    ends = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    return _qwen_prm_last_tag(model_dir, [tagged[: i + 1] for i in ends])


def shepherd_steps(model_dir: Path, question: str, steps: list[str]) -> list[float]:
    """Math-Shepherd card: f"{question} {output}" with each step ended by " ки" and steps
    on lines; softmax over the logits of "+" / "-" at the ки positions, "+"."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    candidates = [
        tokenizer.encode("+", add_special_tokens=False)[-1],
        tokenizer.encode("-", add_special_tokens=False)[-1],
    ]
    tag_id = tokenizer.encode("ки", add_special_tokens=False)[-1]
    out = []
    with torch.inference_mode():
        for k in range(1, len(steps) + 1):
            output = "\n".join(f"{s} ки" for s in steps[:k])
            ids = torch.tensor([tokenizer.encode(f"{question} {output}")])
            scores = _softmax(model(ids).logits[:, :, candidates])[:, :, 0]
            out.append(float(scores[ids == tag_id][-1]))
    return out


def skywork_steps(model_dir: Path, question: str, steps: list[str]) -> list[float]:
    """Skywork-o1-Open-PRM's prepare_input: BOS + problem + "\\n", then each step
    encoded alone plus the step token; sigmoid of the value head at those tokens."""
    from safetensors.torch import load_file

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    weights = load_file(Path(model_dir) / "model.safetensors")
    v_head = torch.nn.Linear(64, 1)
    v_head.load_state_dict({"weight": weights["v_head.summary.weight"], "bias": weights["v_head.summary.bias"]})
    step_id = tokenizer.encode("\n")[-1]
    out = []
    with torch.inference_mode():
        for k in range(1, len(steps) + 1):
            ids = tokenizer.encode(tokenizer.bos_token + question + "\n")
            flags = [0] * len(ids)
            for step in steps[:k]:
                step_ids = tokenizer.encode(step) + [step_id]
                ids += step_ids
                flags += [0] * (len(step_ids) - 1) + [1]
            hidden = model.model(input_ids=torch.tensor([ids])).last_hidden_state
            rewards = torch.sigmoid(v_head(hidden).squeeze(-1))[0]
            last = max(i for i, f in enumerate(flags) if f)
            out.append(float(rewards[last]))
    return out


def rlhflow_steps(model_dir: Path, question: str, steps: list[str]) -> list[float]:
    """RLHFlow card loop: the conversation grows by (user step, assistant "+") and each
    step's score is softmax over "+" / "-" of logits[:, -3] (Llama 3 template)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    plus, minus = tokenizer.encode("+")[-1], tokenizer.encode("-")[-1]
    conversation, out = [], []
    with torch.inference_mode():
        for k, step in enumerate(steps):
            conversation.append({"role": "user", "content": f"{question} {step}" if k == 0 else step})
            conversation.append({"role": "assistant", "content": "+"})
            text = tokenizer.apply_chat_template(conversation, tokenize=False)
            ids = torch.tensor([tokenizer.encode(text, add_special_tokens=False)])
            logits = model(ids).logits[:, -3, [plus, minus]]
            out.append(float(_softmax(logits)[0, 0]))
    return out
