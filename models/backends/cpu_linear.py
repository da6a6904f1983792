"""Linear layers for inference on CPU: weights prepacked once for oneDNN, rows in chunks.

torch's fp32 ``nn.Linear`` on CPU calls MKL's sgemm, which on this workplace's AMD EPYC
runs at 170 GFLOP/s; oneDNN with weights reordered once to its blocked layout ran the
same shapes 1.9-2.9x faster (M = 1 to 2000 tokens, K 1024, N 3072) with outputs equal to
1e-6 relative. vLLM's CPU backend gets much of its speed the same way. bf16 goes through
oneDNN (AMX where the CPU has it) either way; prepacking spares the per-call reorder.

oneDNN builds (JIT-compiles) a kernel for every row count M it meets: ~5 ms per weight
shape for M near 1,000 here, against ~1.5 ms to run it. A packed batch of fresh texts has
a row count never seen before, so every batch paid that for every weight shape. Packed
rows are therefore a multiple of ``ROW_MULTIPLE`` long (packing.pack) and go through in
chunks of at most ``CHUNK_ROWS`` (the CPU batch budget), and ``build_kernels`` builds
every such count's kernels at load (2.5 s for bench/compare.py's model). Measured there
(bf16, fresh texts, packed rows of ~1,000 tokens in process): 25.5 items/s before, 30.5
after; chunks of 256 or 512 rows ran ~10% slower than whole rows.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

log = logging.getLogger(__name__)

CHUNK_ROWS = 1024  # transformers_backend's CPU batch budget
ROW_MULTIPLE = 16
# The largest difference to nn.Linear accepted when swapping one in, relative to the
# output's scale: fp32 agrees to ~1e-6; bf16 rounds to 8 bits, summed in another order.
_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class PackedLinear(nn.Module):
    """Drop-in for an inference-only ``nn.Linear``: same input and output shapes."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        weight = linear.weight.detach()
        self.register_buffer("packed", torch.ops.mkldnn._reorder_linear_weight(weight, None))
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        if rows.shape[0] <= CHUNK_ROWS:
            out = self._rows(rows)
        else:
            out = torch.cat([self._rows(chunk) for chunk in rows.split(CHUNK_ROWS)])
        return out.view(*x.shape[:-1], self.out_features)

    def _rows(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(rows, self.packed, self.bias, "none", [], "")


def pack_linears(module: nn.Module) -> int:
    """Replace every fp32 or bf16 ``nn.Linear`` under ``module`` whose packed twin gives
    the same numbers; returns how many were replaced. Leaves everything as it was on any
    doubt."""
    if not onednn_available():
        return 0
    replaced = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and child.weight.dtype in _TOLERANCE:
                packed = PackedLinear(child)
                if _agrees(child, packed):
                    setattr(parent, name, packed)
                    replaced += 1
    return replaced


@torch.inference_mode()
def build_kernels(module: nn.Module) -> int:
    """Run each packed weight shape under ``module`` once at every row count a chunk can
    have (1 to ROW_MULTIPLE, then multiples of it up to CHUNK_ROWS), so oneDNN builds
    those kernels now rather than in the first batches. Returns the shapes run."""
    shapes: dict = {}
    for child in module.modules():
        if isinstance(child, PackedLinear):
            shapes.setdefault((child.in_features, child.out_features, child.packed.dtype), child)
    counts = list(range(1, ROW_MULTIPLE)) + list(range(ROW_MULTIPLE, CHUNK_ROWS + 1, ROW_MULTIPLE))
    for linear in shapes.values():
        for count in counts:
            linear(torch.zeros(count, linear.in_features, dtype=linear.packed.dtype))
    return len(shapes)


@torch.inference_mode()
def _agrees(linear: nn.Linear, packed: PackedLinear) -> bool:
    # A few rows: the kernels' numbers are the question; chunking only concatenates them.
    probe = torch.randn(3, linear.in_features, generator=torch.Generator().manual_seed(0)).to(linear.weight.dtype)
    try:
        want, got = linear(probe).float(), packed(probe).float()
    except RuntimeError as exc:  # an op missing from this torch build
        log.info("oneDNN linear unavailable: %s", exc)
        return False
    scale = want.abs().max().clamp_min(1e-6)
    return bool(((want - got).abs().max() / scale) < _TOLERANCE[linear.weight.dtype])
