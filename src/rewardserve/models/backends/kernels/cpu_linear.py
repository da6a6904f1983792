"""Linear layers for inference on CPU: weights prepacked once for oneDNN, rows in chunks.

torch's fp32 ``nn.Linear`` on CPU calls MKL's sgemm; oneDNN with weights reordered once to
its blocked layout runs the same shapes as fast or faster, with outputs equal to 1e-6
relative (vLLM's CPU backend gets much of its speed the same way; figures by CPU in
bench/results/design-measurements.md). bf16 goes through oneDNN (AMX where the CPU has it)
either way; prepacking spares the per-call reorder. CPUs without oneDNN's bf16 kernels
(avx512 or avx_ne_convert) keep torch's bf16 linears.

oneDNN builds (JIT-compiles) a kernel for every row count M it meets, which costs more
than running it. A packed batch of fresh texts has
a row count never seen before, so every batch paid that for every weight shape. Packed
rows are therefore a multiple of ``ROW_MULTIPLE`` long (packing.pack) and go through in
chunks of at most ``CHUNK_ROWS`` (the CPU batch budget), and ``build_kernels`` builds
every such count's kernels at load, so no batch pays a build; smaller chunks than whole
rows ran slower (figures: bench/results/design-measurements.md).

In bf16 an attention module's q, k and v projections of the same input run as one GEMM
(``FusedProjections``): one call is much cheaper than three there. In fp32, and for the
MLP's gate and up projections, fusing gained nothing, so they stay apart.
"""

from __future__ import annotations

import logging
from typing import cast

import torch
from torch import nn

log = logging.getLogger(__name__)

CHUNK_ROWS = 1024  # transformers_backend's CPU batch budget
ROW_MULTIPLE = 16
# The largest difference to nn.Linear accepted when swapping one in, relative to the
# output's scale: fp32 agrees to ~1e-6; bf16 rounds to 8 bits, summed in another order.
_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}


def onednn_available(dtype: torch.dtype = torch.float32) -> bool:
    """Whether oneDNN takes prepacked ``dtype`` weights on this CPU: bf16 needs avx512
    (bw, vl, dq) or avx_ne_convert; an AVX2-only CPU keeps torch's bf16 linears."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    return dtype != torch.bfloat16 or bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


class PackedLinear(nn.Module):  # type: ignore[misc]  # torch is untyped: nn.Module is Any
    """Drop-in for an inference-only ``nn.Linear`` of this ``weight`` ([out, in]) and
    ``bias``: same input and output shapes."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.register_buffer("packed", torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None))
        self.register_buffer("bias", None if bias is None else bias.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        if rows.shape[0] <= CHUNK_ROWS:
            out = self._rows(rows)
        else:
            out = torch.cat([self._rows(chunk) for chunk in rows.split(CHUNK_ROWS)])
        return out.view(*x.shape[:-1], self.out_features)

    def _rows(self, rows: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():  # inductor lowers the op only for frozen weights
            return torch.ops.rewardserve.packed_linear(rows, self.packed, self.bias)
        return torch.ops.mkldnn._linear_pointwise(rows, self.packed, self.bias, "none", [], "")


# Sibling projections that read the same input, fused in FUSED_DTYPES (see the top).
FUSED_PROJECTIONS = (("q_proj", "k_proj", "v_proj"),)
FUSED_DTYPES = {torch.bfloat16}


class FusedProjections(nn.Module):  # type: ignore[misc]  # torch is untyped: nn.Module is Any
    """One packed GEMM for several projections of one input. Each projection is replaced
    by a ``ProjectionPart``; the first part called with an input computes every part's
    output and keeps the others' until they are asked for with that same tensor. A part
    called with another input (the last layer computes its queries at the read rows only,
    readouts.py) or twice with one runs the GEMM again: same numbers, more work. Not for
    concurrent callers: every CPU model runs on one thread (engine/registry.py)."""

    def __init__(self, linears: list[nn.Linear]):
        super().__init__()
        bias = None if linears[0].bias is None else torch.cat([linear.bias.detach() for linear in linears])
        self.linear = PackedLinear(torch.cat([linear.weight.detach() for linear in linears]), bias)
        self.sizes = [linear.out_features for linear in linears]
        self._input: torch.Tensor | None = None
        self._outputs: list[torch.Tensor | None] = []

    def output(self, x: torch.Tensor, index: int) -> torch.Tensor:
        if x is not self._input or self._outputs[index] is None:
            self._input, self._outputs = x, list(self.linear(x).split(self.sizes, dim=-1))
        out, self._outputs[index] = self._outputs[index], None
        if all(o is None for o in self._outputs):
            self._input = None  # nothing held between forwards
        return out


class ProjectionPart(nn.Module):  # type: ignore[misc]  # torch is untyped: nn.Module is Any
    """One projection of a ``FusedProjections``: the input and output shapes of the
    ``nn.Linear`` it replaces (its output a view of the fused one's columns)."""

    def __init__(self, fused: FusedProjections, index: int):
        super().__init__()
        self.fused, self.index = fused, index
        self.in_features, self.out_features = fused.linear.in_features, fused.sizes[index]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fused.output(x, self.index)


def pack_linears(module: nn.Module) -> int:
    """Replace every fp32 or bf16 ``nn.Linear`` under ``module`` whose packed twin gives
    the same numbers (sibling projections fused, see FUSED_PROJECTIONS); returns how many
    were replaced (only dtypes oneDNN takes on this CPU). Leaves everything as it was on
    any doubt."""
    dtypes = {dtype for dtype in _TOLERANCE if onednn_available(dtype)}
    if not dtypes:
        return 0
    fusable, replaced = dtypes & FUSED_DTYPES, 0
    for parent in list(module.modules()):
        replaced += _fuse_projections(parent, fusable)
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and child.weight.dtype in dtypes:
                packed = PackedLinear(child.weight, child.bias)
                if _agrees(child, packed):
                    setattr(parent, name, packed)
                    replaced += 1
    return replaced


def _fuse_projections(parent: nn.Module, dtypes: set[torch.dtype]) -> int:
    """Fuses the sibling projections whose weights are of one of ``dtypes``."""
    replaced = 0
    for names in FUSED_PROJECTIONS:
        found = [getattr(parent, name, None) for name in names]
        if not all(type(linear) is nn.Linear for linear in found):
            continue
        linears = cast(list[nn.Linear], found)  # each checked just above
        first = linears[0]
        if first.weight.dtype not in dtypes or any(
            linear.in_features != first.in_features
            or linear.weight.dtype != first.weight.dtype
            or (linear.bias is None) != (first.bias is None)
            for linear in linears
        ):
            continue
        fused = FusedProjections(linears)
        parts = [ProjectionPart(fused, i) for i in range(len(names))]
        if all(_agrees(linear, part) for linear, part in zip(linears, parts)):
            for name, part in zip(names, parts):
                setattr(parent, name, part)
            replaced += len(names)
    return replaced


@torch.inference_mode()  # type: ignore[untyped-decorator]  # torch is untyped
def build_kernels(module: nn.Module) -> int:
    """Run each packed weight shape under ``module`` once at every row count a chunk can
    have (1 to ROW_MULTIPLE, then multiples of it up to CHUNK_ROWS), so oneDNN builds
    those kernels now rather than in the first batches. Returns the shapes run."""
    shapes: dict[tuple[int, int, torch.dtype], PackedLinear] = {}
    for child in module.modules():
        if isinstance(child, PackedLinear):
            shapes.setdefault((child.in_features, child.out_features, child.packed.dtype), child)
    counts = list(range(1, ROW_MULTIPLE)) + list(range(ROW_MULTIPLE, CHUNK_ROWS + 1, ROW_MULTIPLE))
    for linear in shapes.values():
        for count in counts:
            linear(torch.zeros(count, linear.in_features, dtype=linear.packed.dtype))
    return len(shapes)


@torch.inference_mode()  # type: ignore[untyped-decorator]  # torch is untyped
def _agrees(linear: nn.Linear, packed: nn.Module) -> bool:
    # A few rows: the kernels' numbers are the question; chunking only concatenates them.
    probe = torch.randn(3, linear.in_features, generator=torch.Generator().manual_seed(0)).to(linear.weight.dtype)
    try:
        want, got = linear(probe).float(), packed(probe).float()
    except RuntimeError as exc:  # an op missing from this torch build
        log.info("oneDNN linear unavailable: %s", exc)
        return False
    scale = want.abs().max().clamp_min(1e-6)
    return bool(((want - got).abs().max() / scale) < _TOLERANCE[linear.weight.dtype])
