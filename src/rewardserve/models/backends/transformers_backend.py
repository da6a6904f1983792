"""Forward passes with transformers: the default backend, on CUDA when present, else CPU.

Every task runs the same way: the backbone over a right-padded batch, then a head applied
only at the rows that are read. For a causal LM that means a handful of lm_head rows at a
handful of positions instead of the full vocabulary at every position.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from torch import nn

from rewardserve.models.backends.backend import TASKS, Backend, TokenSequence, after_prefix
from rewardserve.models.backends.checkpoint_tensors import check_fit, checkpoint_state, write_into
from rewardserve.models.backends.heads import heads_at
from rewardserve.models.backends.layer_boundaries import mark_layers
from rewardserve.models.backends.loading import (
    context_limit,
    own_memory,
    pick_device,
    pick_dtype,
    weights_from_host,
    weights_to_host,
)
from rewardserve.models.backends.packing import Unit
from rewardserve.models.backends.readouts import unwrap_last_layer, wrap_last_layer
from rewardserve.models.checkpoints import CheckpointWeights, load_tokenizer
from rewardserve.models.options import BackendOptions
from rewardserve.models.spec import ModelSpec
from rewardserve.models.startup_phases import timed_phase

log = logging.getLogger(__name__)

# A CPU's matmuls are saturated by one item of a few hundred tokens, so padding is pure
# loss, and batches of about 1k tokens run fastest (figures: bench/results).
CPU_BATCH_PREFERENCES = {"max_batch_tokens": 1024, "max_padding_ratio": 0.05, "short_when_shared": True}
# Packed rows have no padding: a batch costs the sum of its lengths.
PACKED_BATCH_PREFERENCES = {"max_batch_tokens": 1024, "pads": False, "short_when_shared": True}
# How far compiled parts may read from eager ones on the load probe, relative to the
# scores' scale. fp32 agrees to ~1e-6; fused bf16 kernels round intermediates at other
# places, a few percent of the score spread. A layer that lost the packed layout reads
# other numbers entirely.
COMPILED_TOLERANCE = {torch.float32: 1e-3, torch.bfloat16: 5e-2}


def batch_preferences(device: torch.device, packing: bool) -> dict[str, Any]:
    """What the batcher should know of this backend on ``device``: CPUs run fastest under
    1,024 tokens a batch; a GPU keeps the kind's budget (16k tokens), packed or padded."""
    if device.type == "cpu":
        return PACKED_BATCH_PREFERENCES if packing else CPU_BATCH_PREFERENCES
    return {"pads": False} if packing else {}


class TransformersBackend(Backend):
    name = "transformers"

    def __init__(self, spec: ModelSpec, task: str, options: BackendOptions | None = None):
        if task not in TASKS:
            raise ValueError(f"transformers backend: unknown task {task!r}")
        self.options = options or BackendOptions.model_validate(spec.options)
        self.task = task
        self.device = pick_device(spec.device)
        self.dtype = pick_dtype(spec.dtype, self.device)
        with timed_phase(spec.name, "weights", f"{self.dtype}, {self.device}".replace("torch.", "")):
            self.tokenizer = load_tokenizer(
                spec.source,
                tokenizer=spec.tokenizer,
                chat_template=spec.chat_template,
                trust_remote_code=spec.trust_remote_code,
            )
            self._remote_code = spec.trust_remote_code
            self._adapter = spec.adapter
            # The module whose state dict a checkpoint of this model holds (None: the
            # head comes from a file of its own, value_head).
            self._checkpoint_module: nn.Module | None = None
            self.base, self.head, config, self._whole = self._load(spec.source, task)
            if self.device.type == "cpu":
                for module in self._modules():
                    own_memory(module)
        # Packed rows are rounded up to a multiple of this many tokens (packing.pack).
        self._pack_multiple = 1
        self._linears_packed = 0
        if self.device.type == "cpu" and self.dtype in (torch.float32, torch.bfloat16):
            from rewardserve.models.backends.dtype_probe import advise

            with timed_phase(spec.name, "dtype probe"):  # before the linears are packed
                advise(
                    spec.name,
                    self.base if self._whole is None else self._whole,
                    self.dtype,
                    explicit=spec.dtype != "auto",
                )
        if (
            self.device.type == "cpu"
            and self.dtype in (torch.float32, torch.bfloat16)
            and self.options.cpu_linear == "onednn"
        ):
            from rewardserve.models.backends.kernels.cpu_linear import ROW_MULTIPLE, build_kernels, pack_linears

            # Only inside the backbone (or the whole classifier): heads stay nn.Linear
            # because the lm task reads rows of their weight.
            packed_in = self.base if self._whole is None else self._whole
            with timed_phase(spec.name, "pack", "linear layers through oneDNN"):
                packed = pack_linears(packed_in)
                self._linears_packed = packed
                if packed:
                    self._pack_multiple = ROW_MULTIPLE
                    build_kernels(packed_in)
        self.pad_token_id = config.pad_token_id
        # Token ids sent by callers (/pooling) are checked against it: an id past the
        # embedding table is a bad request, not an IndexError mid-batch.
        self.vocab_size = getattr(config, "vocab_size", None) or len(self.tokenizer)
        self.max_tokens = context_limit(spec.name, spec.max_tokens, config, self.tokenizer)
        self._softcap = getattr(config, "final_logit_softcapping", None)
        self._pad = self.pad_token_id if self.pad_token_id is not None else 0
        self._reads_only = False
        self.attention = self._attention_kernel(self.options.attention)
        self._packing = self._whole is None and self.options.packing and self._install_segments()
        self.compiled_layers = self.compiled_norms = 0
        if (
            self._packing
            and self.attention == "segments"
            and self.device.type == "cpu"
            and self.dtype in (torch.bfloat16, torch.float32)
        ):
            with timed_phase(spec.name, "compile"):
                self._compile(self.options)
        self.batch_preferences = batch_preferences(self.device, self._packing)
        if self.options.layer_boundaries and self._whole is None and mark_layers(self.base):  # after any wrapping
            self.preemptible = True
            self.batch_preferences = {**self.batch_preferences, "preemptible": True}

    def _load(self, source: str, task: str) -> tuple[Any, Any, Any, nn.Module | None]:
        """(backbone, head, text config, whole model for heads that pool on their own).
        Backbone and head are None where the whole model is returned."""
        from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification

        kw = {"dtype": self.dtype, "trust_remote_code": self._remote_code}
        if task == "classify":
            model = AutoModelForSequenceClassification.from_pretrained(source, **kw)
            model = self._merged(model).to(self.device).eval()
            self._checkpoint_module = model  # its state dict's names are the checkpoint's
            base = getattr(model, model.base_model_prefix, None)
            head = getattr(model, "score", None)
            # Decoder reward models (Llama, Qwen, Gemma, ...) are a base model plus a
            # linear `score` over every position: same numbers read at fewer rows.
            if isinstance(head, nn.Linear) and base is not None:
                return base, head, model.config.get_text_config(), None
            # Encoder classifiers pool on their own (CLS / pooler).
            return None, None, model.config.get_text_config(), model
        if task == "prm_head":
            from rewardserve.models.backends.architectures import Qwen2ForProcessRewardModel

            model = self._merged(Qwen2ForProcessRewardModel.from_pretrained(source, **kw)).to(self.device).eval()
            self._checkpoint_module = model
            return model.model, model.score, model.config, None
        if task == "value_head":
            from rewardserve.models.backends.architectures import load_value_head

            base = self._merged(AutoModel.from_pretrained(source, **kw)).to(self.device).eval()
            config = base.config.get_text_config()
            head = load_value_head(source, config.hidden_size, self.dtype).to(self.device)
            return base, head, config, None
        model = self._merged(AutoModelForCausalLM.from_pretrained(source, **kw)).to(self.device).eval()
        self.causal_lm = model  # for generate()
        self._checkpoint_module = model
        return model.get_decoder(), model.get_output_embeddings(), model.config.get_text_config(), None

    def _modules(self) -> list[nn.Module]:
        """The distinct modules that hold its weights."""
        held = (self._checkpoint_module, self._whole, self.base, self.head)
        return list({id(m): m for m in held if m is not None}.values())

    def to_host(self) -> str:
        return weights_to_host(self._modules(), self.device)

    def from_host(self) -> None:
        weights_from_host(self._modules(), self.device)

    def _pad_batch(self, seqs: list[TokenSequence]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(s.ids) for s in seqs)
        ids = torch.full((len(seqs), width), self._pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, seq in enumerate(seqs):
            ids[row, : len(seq.ids)] = torch.tensor(seq.ids, dtype=torch.long)
            mask[row, : len(seq.ids)] = 1
        return ids.to(self.device), mask.to(self.device)

    @torch.inference_mode()  # type: ignore[untyped-decorator]  # torch is untyped
    def read(self, seqs: list[TokenSequence], token_ids: list[int] | None = None) -> list[np.ndarray]:
        ids, mask = self._pad_batch(seqs)
        if self._whole is not None:
            logits = self._whole(input_ids=ids, attention_mask=mask).logits
            return [logits[i : i + 1].float().cpu().numpy() for i in range(len(seqs))]
        hidden = self.base(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
        return self._heads_at(hidden, seqs, token_ids)

    @torch.inference_mode()  # type: ignore[untyped-decorator]  # torch is untyped
    def read_packed(self, units: list[Unit], token_ids: list[int] | None = None) -> list[list[np.ndarray]]:
        """Units of (prefix, continuations) in one row, no padding (see packing.py); for
        each unit, the rows read at each continuation's positions."""
        from rewardserve.models.backends.packing import pack

        packed = pack(units, self.device, self._pack_multiple, self._pad)
        packed.layout.kernel = self.attention
        # One row: every readout is a position of it; split per continuation after.
        spans = [r for rows in packed.readouts for r in rows]
        positions = [p for r in spans for p in r]
        if self._reads_only and positions:  # the last layer returns the read rows alone, in this order
            packed.layout.reads = torch.tensor(positions, dtype=torch.long, device=self.device)
            positions = list(range(len(positions)))
        hidden = self.base(
            input_ids=packed.ids, position_ids=packed.position_ids, packed_layout=packed.layout, use_cache=False
        ).last_hidden_state
        flat = [s for _, seqs in units for s in seqs]
        targets = tuple(t for s in flat for t in s.targets or ()) if flat and flat[0].targets is not None else None
        (read,) = self._heads_at(hidden, [TokenSequence([], tuple(positions), targets)], token_ids)
        out = iter(np.split(read, np.cumsum([len(r) for r in spans])[:-1]))
        return [[next(out) for _ in rows] for rows in packed.readouts]

    @property  # read-only here: known once the model is loaded
    def packs(self) -> bool:  # type: ignore[override]  # Backend's is a plain class attribute
        """Whether read_packed serves this model: heads read from the backbone's hidden
        states (classifiers that pool on their own do not pack), the backbone on
        transformers' SDPA attention, and a packed probe read the same numbers as
        separate forwards. ``options.packing: false`` turns it off."""
        return self._packing

    def _attention_kernel(self, choice: str) -> str:
        """How packed rows attend: ``flex`` where asked (``auto``: on CUDA) and FlexAttention
        is importable; the packed probe falls back to ``segments`` if it reads otherwise."""
        if choice == "segments" or (choice == "auto" and self.device.type != "cuda"):
            return "segments"
        import importlib.util

        if importlib.util.find_spec("torch.nn.attention.flex_attention") is None:
            log.info("attention: FlexAttention is not in this torch; one SDPA call per segment")
            return "segments"
        return "flex"

    def _install_segments(self) -> bool:
        """Switch the backbone to ``segmented_attention`` and check a packed read against
        plain ones (a model whose layers do not hand the layout down to attention would
        read wrong numbers: it keeps plain SDPA and padded batches)."""
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        from rewardserve.models.backends.packing import ATTENTION_NAME, segmented_attention

        if self.base.config._attn_implementation != "sdpa":
            return False
        AttentionInterface.register(ATTENTION_NAME, segmented_attention)
        AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
        self.base.set_attn_implementation(ATTENTION_NAME)
        if self.attention == "flex" and not self._packed_probe_agrees():
            log.info("attention: a packed read through FlexAttention differs or fails; one SDPA call per segment")
            self.attention = "segments"
        # Most work saved first: the last layer's queries and MLP at the read rows, its MLP
        # only, then the whole layer; the first whose reads match plain passes stays.
        for queries_at_reads in (True, False):
            self._reads_only = wrap_last_layer(self.base, queries_at_reads)
            if not self._reads_only:
                break
            if self._packed_probe_agrees():
                return True
            log.info("last layer at the read rows (queries too: %s) off: reads differ", queries_at_reads)
        unwrap_last_layer(self.base)
        self._reads_only = False
        if self._packed_probe_agrees():
            return True
        log.info("packing off: a packed read differs from plain reads on this model")
        self.base.set_attn_implementation("sdpa")
        return False

    def weights_in_place(self) -> str | None:
        if self._checkpoint_module is None:
            return f"task {self.task}: its head is read from a file of its own"
        if self._linears_packed:
            return "its linear layers are packed for oneDNN (cpu_linear: torch keeps them rewritable)"
        if self.compiled_layers or self.compiled_norms:
            return "its layers are compiled (compile_layers: false keeps them rewritable)"
        if self._adapter is not None:
            return "a LoRA adapter is merged into its weights"
        return None

    def check_weights(self, weights: CheckpointWeights) -> None:
        why = self.weights_in_place()
        if why is not None:
            raise NotImplementedError(why)
        assert self._checkpoint_module is not None
        check_fit(checkpoint_state(self._checkpoint_module), weights)

    @torch.no_grad()  # type: ignore[untyped-decorator]  # torch is untyped
    def update_weights(self, weights: CheckpointWeights) -> None:
        """Each tensor checked again as it is written: the files may have changed since
        ``check_weights`` (a ValueError then, the caller reading the old weights back)."""
        assert self._checkpoint_module is not None
        write_into(checkpoint_state(self._checkpoint_module), weights)

    def _merged(self, model: Any) -> Any:
        """``model`` with the spec's LoRA adapter merged into its weights (peft): one set
        of weights, so packing, the oneDNN linears and compiling see a plain model."""
        if self._adapter is None:
            return model
        from peft import PeftModel

        return PeftModel.from_pretrained(model, self._adapter).merge_and_unload()

    def _compile(self, options: BackendOptions) -> None:
        """Decoder layers compiled whole for packed forwards (compiled_layers.py), then in
        bf16 the RMSNorms left outside them (cpu_norms.py): compiled now and checked by the packed
        probe and a one-row read (sizes of 1 get graphs of their own). On a failure, the
        norms alone, then nothing compiled. ``options.compile_layers`` /
        ``compile_norms: false`` turn either off."""
        from rewardserve.models.backends.kernels.compiled_layers import (
            CompiledLayer,
            compile_layers,
            compiler_settings,
            uncompile_layers,
        )
        from rewardserve.models.backends.kernels.cpu_norms import compile_norms, uncompile_norms

        for layers in (True, False) if options.compile_layers else (False,):
            with compiler_settings():
                self.compiled_layers = compile_layers(self.base) if layers else 0
                if options.compile_norms and self.dtype == torch.bfloat16:
                    self.compiled_norms = compile_norms(self.base, skip=(CompiledLayer,))
                if not (self.compiled_layers or self.compiled_norms):
                    return
                if self._packed_probe_agrees(COMPILED_TOLERANCE[self.dtype]) and self._one_read_works():
                    log.debug(
                        "compiled: %d decoder layers, %d RMSNorm layers", self.compiled_layers, self.compiled_norms
                    )
                    return
            uncompile_layers(self.base)
            uncompile_norms(self.base)
            self.compiled_layers = self.compiled_norms = 0
            log.info("compiled %s failed the probe", "layers" if layers else "norms")

    def _one_read_works(self) -> bool:
        try:
            self.read_packed([([], [TokenSequence([3, 4, 5], (2,))])], [0, 1] if self.task == "lm" else None)
        except Exception as exc:  # noqa: BLE001 - any failure means: not this way
            log.info("one-row read failed (%s)", exc)
            return False
        return True

    def _packed_probe_agrees(self, compiled_tolerance: float | None = None) -> bool:
        """A packed read (a prefix with two continuations, a lone sequence) against plain
        padded reads of the same sequences. Packing must read the same numbers: 1e-3 of
        each read's own scale. Compiled parts are held to ``compiled_tolerance`` of the
        scale of all the probe's scores (bf16 rounding follows the activations' size,
        not each score's)."""
        ids = [3 + i % max(1, self.vocab_size - 3) for i in range(12)]
        units = [
            (ids[:4], [TokenSequence(ids[4:7], (0, 2)), TokenSequence(ids[7:8], (0,))]),
            ([], [TokenSequence(ids[8:], (3,))]),
        ]
        token_ids = [0, 1] if self.task == "lm" else None
        try:
            packed = self.read_packed(units, token_ids)
            plain = [self.read(after_prefix(prefix, seqs), token_ids) for prefix, seqs in units]
        except Exception as exc:  # noqa: BLE001 - any failure means: not this way
            log.info("packed probe failed (%s)", exc)
            return False
        pairs = [(a, b) for got, want in zip(packed, plain) for a, b in zip(got, want)]
        if compiled_tolerance is None:
            return all(np.allclose(a, b, rtol=1e-3, atol=1e-3 * max(1.0, float(np.abs(b).max()))) for a, b in pairs)
        scale = max([1.0] + [float(np.abs(b).max()) for _, b in pairs])
        return all(np.allclose(a, b, rtol=compiled_tolerance, atol=compiled_tolerance * scale) for a, b in pairs)

    @torch.inference_mode()  # type: ignore[untyped-decorator]  # torch is untyped
    def read_shared(
        self, prefix: list[int], seqs: list[TokenSequence], token_ids: list[int] | None = None
    ) -> list[np.ndarray]:
        """Every sequence as a continuation of ``prefix``: the prefix runs once, its KV
        cache is repeated for the continuations, which then run as one batch. Positions
        are relative to each continuation. Same numbers as running prefix + continuation
        whole, at the cost of one prefix instead of len(seqs)."""
        from transformers import DynamicCache

        if self._whole is not None or not prefix:
            whole = after_prefix(prefix, seqs)
            rows: list[np.ndarray] = self.read(whole, token_ids)
            return rows
        cache = DynamicCache(config=self.base.config)
        self.base(input_ids=torch.tensor([prefix], device=self.device), past_key_values=cache, use_cache=True)
        cache.batch_repeat_interleave(len(seqs))
        ids, mask = self._pad_batch(seqs)
        full_mask = torch.cat([torch.ones((len(seqs), len(prefix)), dtype=mask.dtype, device=mask.device), mask], 1)
        hidden = self.base(
            input_ids=ids, attention_mask=full_mask, past_key_values=cache, use_cache=True
        ).last_hidden_state
        return self._heads_at(hidden, seqs, token_ids)

    @torch.inference_mode()  # type: ignore[untyped-decorator]  # torch is untyped
    def generate(
        self, prompt: list[int], *, n: int, temperature: float, top_p: float, max_new_tokens: int, seed: int | None
    ) -> list[str]:
        """``n`` samples continuing ``prompt``; greedy (temperature 0) gives one."""
        if self.task != "lm":
            raise ValueError("generate needs a causal LM")
        if seed is not None:
            torch.manual_seed(seed)
        ids = torch.tensor([prompt], device=self.device)
        sampling = temperature > 0
        out = self.causal_lm.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=sampling,
            temperature=temperature if sampling else None,
            top_p=top_p if sampling else None,
            top_k=None,
            max_new_tokens=max_new_tokens,
            num_return_sequences=n if sampling else 1,
            pad_token_id=self._pad,
        )
        texts: list[str] = self.tokenizer.batch_decode(out[:, len(prompt) :], skip_special_tokens=True)
        return texts

    def _heads_at(
        self, hidden: torch.Tensor, seqs: list[TokenSequence], token_ids: list[int] | None
    ) -> list[np.ndarray]:
        return heads_at(hidden, seqs, token_ids, self.head, lm=self.task == "lm", softcap=self._softcap)
