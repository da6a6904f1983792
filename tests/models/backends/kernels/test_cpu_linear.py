"""CPU linear layers through oneDNN (prepacked weights, row chunks, kernels built at load)
compute what nn.Linear computes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from rewardserve.models.backends import make_backend
from rewardserve.models.backends.kernels.cpu_linear import (
    CHUNK_ROWS,
    PackedLinear,
    ProjectionPart,
    build_kernels,
    onednn_available,
    pack_linears,
)
from rewardserve.models.spec import ModelSpec

# Relative to the output's scale: fp32 only reorders sums; bf16 rounds to 8 bits.
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
# oneDNN's bf16 kernels need avx512 or avx_ne_convert; AVX2-only CPUs keep torch's linears.
BF16_ONEDNN = onednn_available(torch.bfloat16)
needs_bf16_onednn = pytest.mark.skipif(not BF16_ONEDNN, reason="this CPU's oneDNN has no bf16 kernels")


@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.bfloat16, marks=needs_bf16_onednn)])
@pytest.mark.parametrize("rows", [1, 17, CHUNK_ROWS, CHUNK_ROWS + 37, 2 * CHUNK_ROWS + 5])
def test_packed_linear_equals_nn_linear(dtype, rows):
    torch.manual_seed(0)
    linear = nn.Linear(96, 40, bias=True).to(dtype)
    packed = PackedLinear(linear.weight, linear.bias)
    x = torch.randn(1, rows, 96).to(dtype)
    with torch.inference_mode():
        want, got = linear(x).float(), packed(x).float()
    assert got.shape == want.shape == (1, rows, 40)
    assert ((got - want).abs().max() / want.abs().max()).item() < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pack_linears_swaps_every_linear_and_builds_their_kernels(dtype):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.SiLU(), nn.Linear(64, 32, bias=False), nn.Linear(32, 64)).to(dtype)
    x = torch.randn(5, 32).to(dtype)
    with torch.inference_mode():
        want = model(x).float()
    if dtype == torch.bfloat16 and not BF16_ONEDNN:  # left to torch, untouched
        assert pack_linears(model) == 0 and [type(m) for m in model] == [nn.Linear, nn.SiLU, nn.Linear, nn.Linear]
        return
    assert pack_linears(model) == 3
    assert all(type(m) is not nn.Linear for m in model)
    assert build_kernels(model) == 2  # (32 -> 64) twice and (64 -> 32): two shapes
    with torch.inference_mode():
        got = model(x).float()
    assert ((got - want).abs().max() / want.abs().max()).item() < TOLERANCE[dtype]


class Projections(nn.Module):
    """The three sibling projections of an attention module, each of the same input."""

    def __init__(self, bias: bool):
        super().__init__()
        self.q_proj = nn.Linear(64, 64, bias=bias)
        self.k_proj, self.v_proj = nn.Linear(64, 32, bias=bias), nn.Linear(64, 32, bias=bias)

    def forward(self, x):
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)


@needs_bf16_onednn
@pytest.mark.parametrize("bias", [False, True])
def test_bf16_q_k_v_run_as_one_gemm_with_each_projections_numbers(bias):
    torch.manual_seed(2)
    module = Projections(bias).to(torch.bfloat16)
    x, other = torch.randn(2, 7, 64).to(torch.bfloat16), torch.randn(2, 5, 64).to(torch.bfloat16)
    with torch.inference_mode():
        want, want_other = module(x), module(other)
    assert pack_linears(module) == 3
    parts = [module.q_proj, module.k_proj, module.v_proj]
    assert all(type(p) is ProjectionPart for p in parts) and len({id(p.fused) for p in parts}) == 1
    assert build_kernels(module) == 1  # one fused (64 -> 128) weight
    with torch.inference_mode():
        got = module(x)
        assert module.q_proj.fused._input is None  # a whole forward leaves nothing held
        # The last layer asks for queries of other rows than keys and values (readouts.py),
        # and a part may be asked twice: each time its own numbers.
        mixed = (module.q_proj(other), module.k_proj(x), module.k_proj(x), module.v_proj(other))
    for a, b in zip(got + mixed, want + (want_other[0], want[1], want[1], want_other[2])):
        assert a.shape == b.shape
        assert ((a.float() - b.float()).abs().max() / b.float().abs().max()) < TOLERANCE[torch.bfloat16]


def test_fp32_projections_stay_separate():
    module = Projections(bias=False)
    assert pack_linears(module) == 3
    assert all(type(p) is PackedLinear for p in (module.q_proj, module.k_proj, module.v_proj))


def test_bf16_packed_scores_follow_transformers(qwen3_rm, caplog):
    """The whole CPU path in bf16 (oneDNN linears where the CPU has bf16 kernels, packed
    rows filled to the row multiple, kernels built at load, layers and the norms outside
    them compiled) against transformers' own bf16 forward of the same files."""
    from transformers import AutoModelForSequenceClassification

    from rewardserve.models.backends import TokenSequence

    with caplog.at_level("INFO", logger="rewardserve.models.backends.dtype_probe"):
        backend = make_backend(ModelSpec(name="m", source=str(qwen3_rm), dtype="bfloat16"), "classify")
    assert backend.packs and (backend._pack_multiple > 1) == BF16_ONEDNN
    assert "float32" in caplog.text and "bfloat16" in caplog.text  # the load timed both (dtype_probe.py)
    assert backend.compiled_layers == 1  # of 2: the last runs at the read rows
    assert backend.compiled_norms == 4 + 1  # the last layer's 2 norms, q_norm, k_norm; the final norm
    sequences = [[5 + (i * 7 + j) % 400 for j in range(n)] for i, n in enumerate((9, 23, 40))]
    units = [([], [TokenSequence(ids, (len(ids) - 1,))]) for ids in sequences]
    got = [rows[0][0, 0] for rows in backend.read_packed(units)]
    reference = AutoModelForSequenceClassification.from_pretrained(qwen3_rm, dtype=torch.bfloat16).eval()
    with torch.inference_mode():
        want = [reference(input_ids=torch.tensor([ids])).logits[0, 0].float().item() for ids in sequences]
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, atol=3e-2 * scale)


def test_layers_and_norms_stay_eager_when_compiling_fails_or_is_off(qwen3_rm, monkeypatch):
    """No compiler on the machine (or any other failure): eager layers and norms, still packed."""
    from rewardserve.models.backends.kernels.compiled_layers import CompiledLayer

    def failing_compile(fn, **kwargs):
        def compiled(*args, **kw):
            raise RuntimeError("no C++ compiler")

        return compiled

    monkeypatch.setattr(torch, "compile", failing_compile)
    backend = make_backend(ModelSpec(name="m", source=str(qwen3_rm), dtype="bfloat16"), "classify")
    assert backend.packs and backend.compiled_norms == backend.compiled_layers == 0
    assert not any("forward" in vars(m) or isinstance(m, CompiledLayer) for m in backend.base.modules())
    monkeypatch.undo()
    off = make_backend(
        ModelSpec(name="m", source=str(qwen3_rm), dtype="bfloat16", options={"compile_norms": False}), "classify"
    )
    assert off.packs and off.compiled_norms == 0 and off.compiled_layers == 1
    off = make_backend(
        ModelSpec(name="m", source=str(qwen3_rm), dtype="bfloat16", options={"compile_layers": False}), "classify"
    )
    assert off.packs and off.compiled_layers == 0 and off.compiled_norms == 2 * 4 + 1
