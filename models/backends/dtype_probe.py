"""Which of float32 and bfloat16 is faster on this CPU, measured at load.

Whether bf16 pays on a CPU depends on more than its flags (with AMX it is faster than
fp32, with avx512_bf16 alone or AVX2 only much slower). So the service times it: the
model's largest linear weight, copied to each dtype, multiplied by PROBE_TOKENS rows of
random activations (a forward's shape), the best of a few runs each. The weights the
model serves with are not touched, so no score changes. When the model was asked for the
slower dtype, the log says so with the figures; when the CPU default (fp32) is the slower
one, it says bf16 would be faster, at bf16's rounding.
"""

from __future__ import annotations

import logging
import time

import torch
from torch import nn

log = logging.getLogger(__name__)

PROBE_TOKENS = 256
RUNS = 3
# A dtype must be this much faster before the log recommends it (timings wobble).
MARGIN = 1.15


def largest_linear_weight(model: nn.Module) -> torch.Tensor | None:
    weights = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
    return max(weights, key=lambda w: w.numel(), default=None)


def time_linear(weight: torch.Tensor, dtype: torch.dtype, tokens: int = PROBE_TOKENS) -> float:
    """Seconds for one ``[tokens, in] @ [in, out]`` in ``dtype``: the best of RUNS, after
    one warm-up."""
    w = weight.detach().to(dtype=dtype, copy=True)
    x = torch.randn(tokens, w.shape[1], generator=torch.Generator().manual_seed(0)).to(dtype)
    best = float("inf")
    with torch.inference_mode():
        nn.functional.linear(x, w)
        for _ in range(RUNS):
            start = time.perf_counter()
            nn.functional.linear(x, w)
            best = min(best, time.perf_counter() - start)
    return best


def probe_cpu_dtypes(model: nn.Module) -> dict[torch.dtype, float] | None:
    """Seconds of the largest linear in each dtype; None for a model without one."""
    weight = largest_linear_weight(model)
    if weight is None:
        return None
    return {dtype: time_linear(weight, dtype) for dtype in (torch.float32, torch.bfloat16)}


def dtype_advice(
    name: str, asked: torch.dtype, timings: dict[torch.dtype, float], shape: tuple[int, int], explicit: bool
) -> tuple[int, str]:
    """The log level and line for ``timings``: a warning when the dtype asked for in the
    config is the slower one, info otherwise."""
    fp32, bf16 = timings[torch.float32], timings[torch.bfloat16]
    figures = (
        f"a [{PROBE_TOKENS} x {shape[1]}] x [{shape[1]} x {shape[0]}] linear: float32 {fp32 * 1e3:.2f} ms, "
        f"bfloat16 {bf16 * 1e3:.2f} ms on this CPU"
    )
    other, faster = (torch.float32, bf16 / fp32) if asked == torch.bfloat16 else (torch.bfloat16, fp32 / bf16)
    if faster >= MARGIN:
        wanted = str(other).removeprefix("torch.")
        if explicit:
            return logging.WARNING, (
                f"{name}: dtype {str(asked).removeprefix('torch.')} was asked for, but {wanted} "
                f"is {faster:.1f}x faster here ({figures}); set dtype: {wanted}"
            )
        return logging.INFO, (
            f"{name}: {wanted} is {faster:.1f}x faster here ({figures}); dtype: {wanted} would "
            "trade scores exact to fp32 for speed"
        )
    return logging.INFO, f"{name}: dtype probe, {figures}"


def advise(name: str, model: nn.Module, asked: torch.dtype, explicit: bool) -> dict[torch.dtype, float] | None:
    """Probe and log; the timings, for tests."""
    timings = probe_cpu_dtypes(model)
    weight = largest_linear_weight(model)
    if timings is None or weight is None:
        return None
    level, line = dtype_advice(name, asked, timings, (weight.shape[0], weight.shape[1]), explicit)
    log.log(level, line)
    return timings
