"""The reward-model contract every kind implements.

A kind plans a request's work and computes units of it:

    load()        heavy set-up: weights, tokenizer, pools
    plan_score()  items -> Plan (and plan_steps, plan_verify, plan_compare, ... for the
                  routes the kind declares in ``endpoints``): templating, tokenization,
                  the score cache, prefix sharing, and how outputs become results
    run()         [Unit] -> per unit, one output per member: the forward pass and the
                  readout, called by the service's batcher on the model's worker thread
    probe()       one real forward, proving the model can serve

Most kinds implement three smaller steps and let ``plan_items`` assemble the plan:
``prepare`` (items -> Job or ItemError each; RequestError fails the request),
``combine`` (jobs -> units, sharing prefixes) and ``run``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np

from rewardserve.models.batch_policy import BatchPolicy
from rewardserve.models.cache import LRUCache
from rewardserve.models.errors import ItemError, RequestError
from rewardserve.models.options import KindOptions, validate_options
from rewardserve.models.plan import Job, PeerLookup, Plan, RuleCalls, Unit, UnitOutput
from rewardserve.models.spec import ModelSpec
from rewardserve.models.text.tokenize import Tokenized, tokenize
from rewardserve.protocol import (
    CompareItem,
    CompareOptions,
    CompareResult,
    Item,
    ItemResult,
    Message,
    ModelCard,
    ScoreOptions,
    StepOptions,
    StepsResult,
    VerifyOptions,
    VerifyResult,
)

if TYPE_CHECKING:
    from rewardserve.models.backends.backend import Backend
    from rewardserve.models.checkpoints import CheckpointWeights
    from rewardserve.models.images import ImagePolicy

log = logging.getLogger(__name__)
OptionsT = TypeVar("OptionsT", bound=KindOptions)
R = TypeVar("R", bound=ItemResult)


@dataclass(frozen=True)
class ModelContext:
    """What the service lends every model it builds: the image rules and the engine's
    rule pools. Other served models are never here: a plan is lent those it names, per
    request (``peers``). A model built alone (a test, a script) gets the defaults; a rule
    model then needs pools given to it (engine/pools/runner.py's RuleRunner)."""

    image_policy: ImagePolicy | None = None
    rules: RuleCalls | None = None
    # False: no torch.compile at load for models whose options do not ask for it.
    compile: bool = True


def sigmoid(x: float) -> float:
    """The logistic function, without overflow for large |x|."""
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def work_key(ids: list[int], *params: Any) -> bytes:
    """A short, collision-safe key for a result: a hash of the token ids and params."""
    digest = hashlib.blake2b(digest_size=20)
    digest.update(np.asarray(ids, dtype=np.int64).tobytes())
    digest.update(repr(params).encode())
    return digest.digest()


class RewardModel(ABC):
    """Base class of every kind. Subclasses set ``kind`` (``@register_kind``), declare
    ``Options`` and implement ``load``, ``prepare`` and ``run`` (or a ``plan_*`` of
    their own)."""

    kind: ClassVar[str]
    Options: ClassVar[type[KindOptions]] = KindOptions
    default_policy: ClassVar[BatchPolicy] = BatchPolicy()
    # Which routes this kind answers: "score" (/v1/score), "steps" (/v1/score/steps),
    # "pooling" (vLLM's /pooling), "verify", "judge" (rubric judge), "compare",
    # "classify" (/classify, /v1/embeddings).
    endpoints: ClassVar[frozenset[str]] = frozenset({"score"})
    # Whether the kind computes with torch in this process (rule kinds call functions).
    runs_torch: ClassVar[bool] = True
    # Whether its jobs' payloads are rule-pool calls (``call_result`` reads their values)
    # rather than units for its batcher.
    pooled: ClassVar[bool] = False
    # The item shapes the kind scores: "chat" (messages, prompt + response, steps) and
    # the pre-rendered "text" / "input_ids" (scored as they are, no template applied).
    inputs: ClassVar[frozenset[str]] = frozenset({"chat"})
    # Kinds with weights set it in load().
    backend: Backend | None = None
    # What runs the work where that is not this process, in words (the code model's
    # sandbox): /health and the start-up log say it.
    runs_on: str | None = None

    @property
    def depends_on(self) -> list[str]:
        """The served models this one uses (an ensemble's members): loaded before it; it is
        not ready unless they are."""
        return []

    def __init__(self, spec: ModelSpec, preset: dict[str, Any] | None = None, context: ModelContext | None = None):
        from rewardserve.models.images import ImagePolicy

        self.spec = spec
        self.name = spec.name
        self.source = spec.source  # as the config names it (``spec.source`` once pinned: the snapshot)
        self.created = int(time.time())
        self.context = context or ModelContext()
        self.image_policy: ImagePolicy = self.context.image_policy or ImagePolicy()
        # Preset options first, then the user's own options on top; checked now, at start.
        merged = {**(preset or {}).get("options", {}), **spec.options}
        self.options = validate_options(spec.name, self.kind, self.Options, merged)
        self.preset_name: str | None = (preset or {}).get("name")

    def pin_revision(self) -> None:
        """Before ``load``: a hub id at a ``revision`` becomes that snapshot's local
        directory, so every file the kind reads (weights, tokenizer, heads stored beside
        them) comes from the one revision."""
        from rewardserve.models.checkpoints import pinned_source

        if self.spec.trust_remote_code:
            log.warning("model %s: trust_remote_code is on: the checkpoint's own code runs here", self.name)
        if self.spec.revision is not None and self.runs_torch:
            self.spec = self.spec.model_copy(update={"source": pinned_source(self.spec.source, self.spec.revision)})

    # ---- the contract

    @abstractmethod
    def load(self) -> None: ...

    @abstractmethod
    def prepare(self, items: list[Item], options: Any) -> list[Job[Any] | ItemError]:
        """Per item, its job or why it cannot be scored; a RequestError fails the request."""

    @abstractmethod
    def run(self, units: list[Unit[Any]]) -> list[UnitOutput]:
        """Per unit, one result (or ItemError) per member."""

    def call_result(self, value: Any) -> Any:
        """A pooled kind's result (or ItemError) from its call's value."""
        raise NotImplementedError(f"kind {self.kind!r} runs no pool calls")

    def combine(self, jobs: list[Job[Any]]) -> list[tuple[Unit[Any], list[int]]]:
        """Forward units for a request's jobs: ``(unit, positions in jobs)``. Kinds that
        share a prefix between items (one prompt, many completions) override this; by
        default every job is a unit of its own, its payload the job."""
        return [(Unit(job.length, job), [i]) for i, job in enumerate(jobs)]

    # ---- plans, one per route

    def plan_score(
        self, items: list[Item], options: ScoreOptions, cache: LRUCache | None = None, peers: PeerLookup | None = None
    ) -> Plan[ItemResult]:
        """``cache``: the score cache as the request's tenant sees it; ``peers``: the other
        served models as that tenant sees them (kinds that mix their scores read them)."""
        from rewardserve.models.operations.groups import group_advantages

        normalize = options.normalize == "group"
        return self.plan_items(
            items,
            options,
            cache,
            ItemResult,
            lambda results: group_advantages(items, results) if normalize else results,
        )

    def plan_steps(self, items: list[Item], options: StepOptions, cache: LRUCache | None = None) -> Plan[StepsResult]:
        from rewardserve.models.operations.groups import shape_steps

        def shaped(results: list[StepsResult]) -> list[StepsResult]:
            return shape_steps(items, results, options.shaping, options.gamma)

        return self.plan_items(items, options, cache, StepsResult, shaped)

    def plan_verify(
        self, items: list[Item], options: VerifyOptions, cache: LRUCache | None = None
    ) -> Plan[VerifyResult]:
        return self.plan_items(items, options, cache, VerifyResult)

    def plan_compare(
        self,
        items: list[CompareItem],
        options: CompareOptions,
        cache: LRUCache | None = None,
        peers: PeerLookup | None = None,
    ) -> Plan[CompareResult]:
        """Bradley-Terry preferences from this model's scores of each response."""
        from rewardserve.models.operations.compare import compare_by_scores

        return compare_by_scores(self, items, cache, peers)

    def plan_pooling(
        self, inputs: list[str | list[int]], keep: int | None = None, side: str = "right"
    ) -> Plan[list[list[float]]]:
        """vLLM's /pooling: per input, the vectors read at its step tags (process kinds)."""
        raise RequestError(f"model {self.name!r} is of kind {self.kind}; it does not answer /pooling", param="model")

    def plan_items(
        self,
        items: list[Item],
        options: Any,
        cache: LRUCache | None,
        result_type: type[R],
        then: Callable[[list[R]], list[R]] | None = None,
    ) -> Plan[R]:
        """``prepare``, the score cache, one computation per distinct key, ``combine``;
        the plan's finish puts each item's result (or its error, ``valid: false``) back
        in request order as ``result_type``, then applies ``then``."""
        from rewardserve.models.operations.items import plan_items

        return plan_items(self, items, options, cache, result_type, then)

    def prepare_isolating(self, items: list[Item], options: Any) -> list[Job[Any] | ItemError]:
        """``prepare``; if it fails on something other than a RequestError, each item
        again alone, so the item at fault is the only one invalid (a 500 on client input
        is a bug, but one bug must not fail the neighbours)."""
        self.refuse_unscorable_shapes(items)
        try:
            return self.prepare(items, options)
        except RequestError:
            raise
        except Exception:
            pass
        entries: list[Job[Any] | ItemError] = []
        for index, item in enumerate(items):
            try:
                (entry,) = self.prepare([item], options)
            except RequestError as exc:
                param = exc.param or ""
                if param.startswith("items[0]"):
                    param = f"items[{index}]" + param[len("items[0]") :]
                raise RequestError(
                    exc.message.replace("items[0]", f"items[{index}]"), param=param or None, type=exc.type
                ) from exc
            except Exception as exc:
                entry = ItemError(f"the item could not be prepared: {type(exc).__name__}: {exc}")
            entries.append(entry)
        return entries

    def refuse_unscorable_shapes(self, items: list[Item]) -> None:
        """A pre-rendered item sent to a kind that needs the conversation (a rule needs
        the response, a judge its prompt) fails the request, naming the field."""
        for index, item in enumerate(items):
            shape = item.rendered
            if shape is not None and shape not in self.inputs:
                raise RequestError(
                    f"items[{index}].{shape}: a model of kind {self.kind} needs the conversation, not "
                    f"pre-rendered {shape}; send 'messages' or 'prompt' + 'response'",
                    param=f"items[{index}].{shape}",
                )

    def probe(self) -> None:
        """Default probe: plan and run one tiny item to a valid result; else raises."""
        plan = self.plan_score([Item(prompt="1+1?", response="2", reference="2")], ScoreOptions())
        done = plan.finish(self.run(plan.units), [])
        assert isinstance(done, list)
        (result,) = done
        if not result.valid:
            raise RuntimeError(f"probe failed: {result.error}")

    def weights_in_place(self) -> str | None:
        """Why new weights cannot be written into this model's own (None: they can)."""
        if self.backend is None:
            return f"model {self.name!r} holds no weights here"
        why: str | None = self.backend.weights_in_place()
        return why

    def check_weights(self, weights: CheckpointWeights) -> None:
        """ValueError when ``weights`` are not a checkpoint of this model (names, shapes,
        finite values)."""
        assert self.backend is not None  # weights_in_place said it has weights
        self.backend.check_weights(weights)

    def update_weights(self, weights: CheckpointWeights) -> None:
        """``weights`` (checked) written into the tensors its backend reads; every cache
        the kind keeps (a judge's verdicts, a CLIP goal's text) forgets the old weights'."""
        assert self.backend is not None
        self.backend.update_weights(weights)
        for value in vars(self).values():
            if isinstance(value, LRUCache):
                value.clear()

    @property
    def hosted_rule(self) -> str | None:
        """The rule this model runs for other requests' rubric criteria (a rule model's
        own rule), or None."""
        return None

    def between_layers(self, callback: Callable[[], None] | None) -> AbstractContextManager[None]:
        """How the engine runs other work between two layers of this model's forward in
        flight: its backend's, where the backend declares it can (``preemptible``)."""
        return self.backend.between_layers(callback) if self.backend is not None else nullcontext()

    def backends(self) -> list[Backend]:
        """The backends that hold its weights (a kind with a second one adds it)."""
        return [self.backend] if self.backend is not None else []

    def to_host(self) -> str:
        """A level-1 sleep: what its weights hold on a device freed, the weights kept in host
        memory (``from_host`` before it serves again); what was done, in a few words."""
        done = [backend.to_host() for backend in self.backends()]
        return "; ".join(dict.fromkeys(done)) or "nothing freed: it holds no weights"

    def from_host(self) -> None:
        """Its weights back where they serve from; where that fails (the device is full),
        all of them stay in host memory and the error is raised."""
        try:
            for backend in self.backends():
                backend.from_host()
        except Exception:
            self.to_host()
            raise

    def close(self) -> None:
        """Release pools and processes (a vLLM engine's among them). Weights go with the
        object."""
        if self.backend is not None:
            self.backend.close()

    # ---- description

    @property
    def backend_name(self) -> str:
        """The loaded backend's name (kinds with weights set ``self.backend`` in load)."""
        return self.backend.name if self.backend is not None else self.spec.backend

    def describe(self) -> str:
        """What will be served and how, in one line for the start-up log: the device and
        dtype ``auto`` resolves to, the token limit against the checkpoint's context."""
        spec = self.spec
        parts = [
            f"source={spec.source}",
            f"kind={self.kind}",
            f"preset={self.preset_name or '-'}",
            f"backend={spec.backend}",
        ]
        if self.runs_torch:
            from rewardserve.models.backends.loading import pick_device, pick_dtype
            from rewardserve.models.checkpoints import checkpoint_context

            device = pick_device(spec.device)
            dtype = str(pick_dtype(spec.dtype, device)).removeprefix("torch.")
            context = checkpoint_context(spec.source)
            limit = spec.max_tokens or "the checkpoint's"
            parts += [
                f"dtype={dtype}",
                f"device={device}",
                f"max_tokens={limit} (checkpoint context {context or 'unknown'})",
            ]
        return " ".join(parts)

    @property
    def torch_on_cpu(self) -> bool:
        """Whether this model's forwards are torch ops on this process's CPU (not a vLLM
        engine's process, not a GPU). The service runs all such models on one thread:
        see engine/registry.py."""
        if not self.runs_torch or self.spec.backend == "vllm":
            return False
        from rewardserve.models.backends.loading import pick_device

        on_cpu: bool = pick_device(self.spec.device).type == "cpu"
        return on_cpu

    @property
    def max_tokens(self) -> int | None:
        return self.backend.max_tokens if self.backend is not None else self.spec.max_tokens

    def policy(self) -> BatchPolicy:
        """The kind's defaults, then what the backend prefers on its device (CPUs lose
        speed on big or padded batches), then what the spec sets."""
        preferred = self.backend.batch_preferences if self.backend is not None else {}
        policy = replace(self.default_policy, **preferred)
        spec = self.spec
        overrides: dict[str, Any] = {
            "max_batch_tokens": spec.max_batch_tokens,
            "max_wait_ms": spec.max_wait_ms,
            "max_queue_tokens": spec.max_queue_tokens,
            "max_padding_ratio": spec.max_padding_ratio,
        }
        return replace(policy, **{k: v for k, v in overrides.items() if v is not None})

    def placement(self) -> tuple[str | None, str | None]:
        """(dtype, device) its forwards run in, as loaded (else as ``auto`` resolves them,
        what ``describe`` logs); (None, None) for a kind without weights."""
        if not self.runs_torch:
            return None, None
        holder = self.backend if self.backend is not None else self
        dtype, device = getattr(holder, "dtype", None), getattr(holder, "device", None)
        if dtype is None or device is None or isinstance(dtype, str):
            from rewardserve.models.backends.loading import pick_device, pick_dtype

            device = pick_device(self.spec.device)
            dtype = pick_dtype(self.spec.dtype, device)
        return str(dtype).removeprefix("torch."), str(device)

    @property
    def text_tokenizer(self) -> Any | None:
        """The tokenizer it reads text with: its backend's, or one the kind loads itself
        (``self.tokenizer``: vlm, clip_goal); None for a kind that reads no tokens (a
        rule, an ensemble) or one not loaded yet."""
        if self.backend is not None:
            return self.backend.tokenizer
        return getattr(self, "tokenizer", None)

    def tokenize(
        self,
        prompt: str | None = None,
        messages: list[Message] | None = None,
        *,
        add_special_tokens: bool,
        add_generation_prompt: bool = False,
        continue_final_message: bool = False,
        token_strs: bool = False,
    ) -> Tokenized:
        """vLLM's /tokenize with this model's own tokenizer (models/text/tokenize.py)."""
        tok = self.text_tokenizer
        if tok is None:
            raise RequestError(f"model {self.name!r} is of kind {self.kind}: it has no tokenizer", param="model")
        return tokenize(
            tok,
            self.max_tokens,
            prompt,
            messages,
            name=self.name,
            add_special_tokens=add_special_tokens,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            token_strs=token_strs,
        )

    def card(self, ready: bool) -> ModelCard:
        return ModelCard(
            id=self.name,
            created=self.created,
            name=self.name,
            kind=self.kind,
            backend=self.backend_name,
            source=self.source,
            revision=self.spec.revision,
            preset=self.preset_name,
            max_tokens=self.max_tokens,
            chat_template_sha256=self.chat_template_digest(),
            ready=ready,
        )

    def chat_template_digest(self) -> str | None:
        """The sha256 of the chat template this model renders conversations with (its
        tokenizer's, or the spec's in its place); None without one."""
        template = getattr(self.text_tokenizer, "chat_template", None)
        if not template:
            return None
        text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()
