"""The reward-model contract every kind implements.

A kind turns request items into units of ``Work`` (``prepare``: templating and
tokenization, cheap, called once per request) and turns a batch of work into results
(``predict``: the forward pass and the readout, called by the service's batcher on the
model's worker thread). The service never looks inside ``Work.payload``.

    load()      heavy set-up: weights, tokenizer, pools
    prepare()   items -> Work (or ItemError per bad item; RequestError fails the request)
    predict()   [Work] -> [ItemResult | ItemError], same order
    probe()     one real forward, proving the model can serve
"""

from __future__ import annotations

import hashlib
import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rewardserve.client.protocol import Item, ItemResult, ModelCard, ScoreOptions
from rewardserve.models.request_scope import RequestScope
from rewardserve.models.spec import ModelSpec

if TYPE_CHECKING:
    from rewardserve.models.images import ImagePolicy
    from rewardserve.models.rules.runner import RuleRunner


class ItemError(Exception):
    """This item cannot be scored; its neighbours still are. Becomes ``valid: false``."""


class RequestError(Exception):
    """The request as a whole is unacceptable (the service maps ``status`` to its table)."""

    def __init__(self, message: str, *, param: str | None = None, status: int = 422):
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status


@dataclass
class Work:
    """One forward unit. ``length`` is what the batcher budgets (tokens for models that
    pad, 1 for rule calls); ``payload`` is the kind's own business. ``key`` identifies
    the result (the token ids and everything else the result depends on): work with a
    key is answered from the score cache when it can be, and computed once per batch."""

    length: int
    payload: Any
    prompt_tokens: int = 0
    truncated: bool = False
    key: bytes | None = None
    # The request it belongs to (set by the service): who shares a pool fairly with
    # whom, and whether the work is still wanted.
    scope: RequestScope | None = None
    # A unit of several items: the tokens it does not compute again because they are
    # shared (a prompt run once for a group), reported as cached, as OpenAI counts a
    # prefix-cache hit.
    shared_tokens: int = 0


@dataclass(frozen=True)
class ModelContext:
    """What the service lends every model it builds: the image rules and the shared rule
    pools. A model built alone (a test, a script) gets defaults and pools of its own."""

    image_policy: ImagePolicy | None = None
    rules: RuleRunner | None = None


def sigmoid(x: float) -> float:
    """The logistic function, without overflow for large |x|."""
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def work_key(ids: list[int], *params: Any) -> bytes:
    """A short, collision-safe key for a result: a hash of the token ids and params."""
    digest = hashlib.blake2b(digest_size=20)
    digest.update(np.asarray(ids, dtype=np.int64).tobytes())
    digest.update(repr(params).encode())
    return digest.digest()


@dataclass(frozen=True)
class BatchPolicy:
    """How the batcher feeds a model.

    pads: a batch costs ``longest * count`` (padded forward) rather than ``sum(lengths)``.
    concurrency: batches in flight at once (1 for a GPU/CPU forward; more for rule calls
    that wait on a process pool).
    """

    max_batch_tokens: int = 8192
    max_batch_items: int = 256
    max_wait_ms: float = 5.0
    max_queue_tokens: int = 1_000_000
    pads: bool = True
    concurrency: int = 1
    # Close a batch rather than let padding pass this share of its tokens.
    max_padding_ratio: float = 1.0

    def cost(self, lengths: list[int]) -> int:
        if not lengths:
            return 0
        return max(lengths) * len(lengths) if self.pads else sum(lengths)

    def fits(self, lengths: list[int]) -> bool:
        """Whether these items may form one batch."""
        if len(lengths) <= 1:
            return True
        cost = self.cost(lengths)
        return (
            cost <= self.max_batch_tokens
            and len(lengths) <= self.max_batch_items
            and 1.0 - sum(lengths) / cost <= self.max_padding_ratio
        )


class RewardModel(ABC):
    """Base class of every kind. Subclasses set ``kind`` and implement the four steps."""

    kind: ClassVar[str]
    default_policy: ClassVar[BatchPolicy] = BatchPolicy()
    # Which scoring routes this kind answers: "score" (/v1/score), "steps"
    # (/v1/score/steps), "pooling" (vLLM's /pooling).
    endpoints: ClassVar[frozenset[str]] = frozenset({"score"})
    # Whether the kind computes with torch in this process (rule kinds call functions).
    runs_torch: ClassVar[bool] = True
    # The item shapes the kind scores: "chat" (messages, prompt + response, steps) and
    # the pre-rendered "text" / "input_ids" (scored as they are, no template applied).
    inputs: ClassVar[frozenset[str]] = frozenset({"chat"})

    def __init__(
        self, spec: ModelSpec, preset: dict[str, Any] | None = None, context: ModelContext | None = None
    ):
        from rewardserve.models.cache import LRUCache
        from rewardserve.models.images import ImagePolicy

        self.spec = spec
        self.name = spec.name
        self.created = int(time.time())
        self.context = context or ModelContext()
        self.image_policy: ImagePolicy = self.context.image_policy or ImagePolicy()
        # Preset options first, then the user's own options on top.
        self.options: dict[str, Any] = {**(preset or {}).get("options", {}), **spec.options}
        self.preset_name: str | None = (preset or {}).get("name")
        # Results by Work.key: GRPO sends the same completion many times.
        self.score_cache = LRUCache(int(self.options.get("score_cache_size", 20_000)))

    # ---- the contract

    @abstractmethod
    def load(self) -> None: ...

    @abstractmethod
    def prepare(self, items: list[Item], options: ScoreOptions) -> list[Work | ItemError]: ...

    @abstractmethod
    def predict(self, batch: list[Work]) -> list[ItemResult | ItemError]: ...

    def refuse_unscorable_shapes(self, items: list[Item]) -> None:
        """A pre-rendered item sent to a kind that needs the conversation (a rule needs
        the response, a judge its prompt) fails the request, naming the field."""
        for index, item in enumerate(items):
            shape = item.rendered
            if shape is not None and shape not in self.inputs:
                raise RequestError(
                    f"items[{index}].{shape}: a {self.kind} model needs the conversation, not "
                    f"pre-rendered {shape}; send 'messages' or 'prompt' + 'response'",
                    param=f"items[{index}].{shape}",
                )

    def combine(self, works: list[Work]) -> list[tuple[Work, list[int]]]:
        """Forward units for a request's work: ``(unit, positions in works)``. A unit for
        several items returns a list of results from ``predict``, one per member. Kinds
        that share a prefix between items (one prompt, many completions) override this;
        by default every item is its own unit."""
        return [(work, [i]) for i, work in enumerate(works)]

    def probe(self) -> None:
        """Default probe: prepare and predict one tiny item; any failure raises."""
        probe_item = Item(prompt="1+1?", response="2", reference="2")
        entries = self.prepare([probe_item], ScoreOptions())
        works = [e for e in entries if isinstance(e, Work)]
        if not works:
            raise RuntimeError(f"probe item was rejected: {entries[0]}")
        (result,) = self.predict(works)
        if isinstance(result, ItemError):
            raise RuntimeError(f"probe failed: {result}")

    def close(self) -> None:
        """Release pools and processes (a vLLM engine's among them). Weights go with the
        object."""
        backend = getattr(self, "backend", None)
        if backend is not None and hasattr(backend, "close"):
            backend.close()

    # ---- description

    @property
    def backend_name(self) -> str:
        """The loaded backend's name (kinds with weights set ``self.backend`` in load)."""
        backend = getattr(self, "backend", None)
        return backend.name if backend is not None else self.spec.backend

    @property
    def torch_on_cpu(self) -> bool:
        """Whether this model's forwards are torch ops on this process's CPU (not a vLLM
        engine's process, not a GPU). The service runs all such models on one thread:
        see service/served_models.py."""
        if not self.runs_torch or self.spec.backend == "vllm":
            return False
        from rewardserve.models.backends.transformers_backend import pick_device

        return pick_device(self.spec.device).type == "cpu"

    @property
    def max_tokens(self) -> int | None:
        backend = getattr(self, "backend", None)
        return backend.max_tokens if backend is not None else self.spec.max_tokens

    def policy(self) -> BatchPolicy:
        """The kind's defaults, then what the backend prefers on its device (CPUs lose
        speed on big or padded batches), then what the spec sets."""
        preferred = getattr(getattr(self, "backend", None), "batch_preferences", None) or {}
        policy = replace(self.default_policy, **preferred)
        spec = self.spec
        overrides = {
            "max_batch_tokens": spec.max_batch_tokens,
            "max_wait_ms": spec.max_wait_ms,
            "max_queue_tokens": spec.max_queue_tokens,
            "max_padding_ratio": spec.max_padding_ratio,
        }
        return replace(policy, **{k: v for k, v in overrides.items() if v is not None})

    def card(self, ready: bool) -> ModelCard:
        return ModelCard(
            id=self.name,
            created=self.created,
            name=self.name,
            kind=self.kind,
            backend=self.backend_name,
            source=self.spec.source,
            preset=self.preset_name,
            max_tokens=self.max_tokens,
            ready=ready,
        )
