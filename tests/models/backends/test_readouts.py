"""The last layer of a packed forward runs at the read rows only, and reads the numbers a
full forward with transformers reads."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn
from transformers import AutoModelForSequenceClassification

from rewardserve.models.backends import TokenSequence, make_backend, readouts
from rewardserve.models.backends.readouts import LastLayerAtReads, wrap_last_layer
from rewardserve.models.spec import ModelSpec


@pytest.mark.parametrize("fixture", ["qwen3_rm", "llama_rm"])
def test_last_layer_runs_at_the_read_rows_only(request, fixture):
    source = request.getfixturevalue(fixture)
    backend = make_backend(ModelSpec(name="m", source=str(source)), "classify")
    last = backend.base.layers[-1]
    assert backend.packs and isinstance(last, LastLayerAtReads) and last.queries_at_reads
    mlp_rows: list[int] = []
    query_rows: list[int] = []
    last.layer.mlp.register_forward_hook(lambda mod, args, out: mlp_rows.append(args[0].shape[1]))
    last.layer.self_attn.q_proj.register_forward_hook(lambda mod, args, out: query_rows.append(args[0].shape[1]))

    rng = random.Random(0)
    prefix = [rng.randrange(10, 500) for _ in range(30)]
    conts = [[rng.randrange(10, 500) for _ in range(n)] for n in (7, 12)]
    lone = [rng.randrange(10, 500) for _ in range(25)]
    units = [(prefix, [TokenSequence(c, (0, len(c) - 1)) for c in conts]), ([], [TokenSequence(lone, (3, 24))])]
    packed = backend.read_packed(units)
    assert mlp_rows == query_rows == [6]  # 2 rows for each of the 3 sequences, of 74 in the row

    # Reference: transformers' own classifier over each whole sequence, every position.
    model = AutoModelForSequenceClassification.from_pretrained(source, dtype=torch.float32).eval()
    with torch.inference_mode():

        def logits(ids):
            hidden = model.model(input_ids=torch.tensor([ids])).last_hidden_state
            return model.score(hidden)[0].numpy()

        np.testing.assert_allclose(packed[0][0], logits(prefix + conts[0])[[30, 36]], atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(packed[0][1], logits(prefix + conts[1])[[30, 41]], atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(packed[1][0], logits(lone)[[3, 24]], atol=1e-4, rtol=1e-4)


def test_padded_reads_run_the_whole_last_layer(qwen3_rm):
    """Forwards without a packed layout (padded batches, KV-cache passes, generation)
    run the wrapped layer as it is."""
    backend = make_backend(ModelSpec(name="m", source=str(qwen3_rm)), "classify")
    mlp_rows: list[int] = []
    backend.base.layers[-1].layer.mlp.register_forward_hook(lambda mod, args, out: mlp_rows.append(args[0].shape[1]))
    backend.read([TokenSequence(list(range(10, 30)), (19,)), TokenSequence(list(range(40, 52)), (11,))])
    assert mlp_rows == [20]


def test_probe_turns_reads_only_off_and_keeps_packing(qwen3_rm, monkeypatch):
    """A layer the wrapper gets wrong (here: one that forgets the MLP) reads different
    numbers at load; the backend unwraps it and still packs."""

    def without_mlp(self, hidden_states, *args, **kwargs):
        reads = kwargs["packed_layout"].reads if kwargs.get("packed_layout") is not None else None
        if reads is None:
            return self.layer(hidden_states, *args, **kwargs)
        attended, _ = self.layer.self_attn(hidden_states=self.layer.input_layernorm(hidden_states), **kwargs)
        return (hidden_states + attended)[:, reads]

    monkeypatch.setattr(readouts.LastLayerAtReads, "forward", without_mlp)
    backend = make_backend(ModelSpec(name="m", source=str(qwen3_rm)), "classify")
    assert backend.packs
    assert not isinstance(backend.base.layers[-1], LastLayerAtReads)


def test_probe_keeps_the_mlp_cut_when_only_the_query_cut_is_wrong(qwen3_rm, monkeypatch):
    """Attention at the read rows that gets a model wrong (here: rotary embeddings
    forgotten) is dropped at load; the MLP still runs at the read rows only."""

    def no_rotary(attn, x, layout, position_embeddings):
        ones = tuple(torch.ones_like(t) for t in position_embeddings)
        zeros = (ones[0], torch.zeros_like(ones[1]))
        return real(attn, x, layout, zeros)

    real = readouts.attend_at_reads
    monkeypatch.setattr(readouts, "attend_at_reads", no_rotary)
    backend = make_backend(ModelSpec(name="m", source=str(qwen3_rm)), "classify")
    last = backend.base.layers[-1]
    assert backend.packs and isinstance(last, LastLayerAtReads) and not last.queries_at_reads


def test_only_pre_norm_layers_are_wrapped():
    class Layer(nn.Module):
        def __init__(self, extra: bool):
            super().__init__()
            self.self_attn, self.mlp = nn.Identity(), nn.Identity()
            self.input_layernorm, self.post_attention_layernorm = nn.Identity(), nn.Identity()
            if extra:  # Gemma-style norms around the MLP: another forward
                self.pre_feedforward_layernorm = nn.Identity()

    plain, gemma_like = nn.Module(), nn.Module()
    plain.layers = nn.ModuleList([Layer(False), Layer(False)])
    gemma_like.layers = nn.ModuleList([Layer(True), Layer(True)])
    assert wrap_last_layer(plain) and isinstance(plain.layers[-1], LastLayerAtReads)
    assert not isinstance(plain.layers[0], LastLayerAtReads)
    assert not wrap_last_layer(gemma_like)


def test_a_packed_batch_with_nothing_to_read(qwen3_rm):
    """A process model's batch whose texts hold no step tag reads no rows: empty
    readouts, not an error (the last layer then runs whole)."""
    backend = make_backend(ModelSpec(name="m", source=str(qwen3_rm)), "classify")
    packed = backend.read_packed([([], [TokenSequence([3, 4, 5], ())]), ([], [TokenSequence([6, 7], ())])])
    assert [rows[0].shape[0] for rows in packed] == [0, 0]
