"""Which of float32 and bfloat16 is faster on this CPU, measured at load.

Whether bf16 pays on a CPU depends on more than its flags (with AMX it is faster than
fp32, with avx512_bf16 alone or AVX2 only much slower). So the service times it: the
model's largest linear weight, copied to each dtype, multiplied by PROBE_TOKENS rows of
random activations (a forward's shape), in ROUNDS rounds that alternate which dtype goes
first, each run long enough to time. A dtype is advised only when it is faster by MARGIN
in every round: one noisy timing (a neighbour's burst, a frequency step) cannot flip the
advice between starts on the same CPU. The weights the
model serves with are not touched, so no score changes. When the model was asked for the
slower dtype, the log says so with the figures; when the CPU default (fp32) is the slower
one, it says bf16 would be faster, at bf16's rounding.
"""

from __future__ import annotations

import logging
import statistics
import time

import torch
from torch import nn

log = logging.getLogger(__name__)

PROBE_TOKENS = 256
ROUNDS = 6
MIN_RUN_S = 0.003  # a run repeats the product until it takes about this long
# A dtype must be this much faster, in every round, before the log recommends it.
MARGIN = 1.15

Rounds = list[tuple[float, float]]  # seconds per product: (float32, bfloat16), one per round


def largest_linear_weight(model: nn.Module) -> torch.Tensor | None:
    weights = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
    return max(weights, key=lambda w: w.numel(), default=None)


def time_rounds(weight: torch.Tensor, tokens: int = PROBE_TOKENS, rounds: int = ROUNDS) -> Rounds:
    """Seconds per ``[tokens, in] @ [in, out]`` in float32 and bfloat16, round by round,
    the first dtype alternating (ABBA), after a warm-up of each."""
    x32 = torch.randn(tokens, weight.shape[1], generator=torch.Generator().manual_seed(0))
    operands = {
        dtype: (x32.to(dtype), weight.detach().to(dtype=dtype, copy=True)) for dtype in (torch.float32, torch.bfloat16)
    }

    def run(dtype: torch.dtype, repeats: int) -> float:
        x, w = operands[dtype]
        start = time.perf_counter()
        for _ in range(repeats):
            nn.functional.linear(x, w)
        return (time.perf_counter() - start) / repeats

    with torch.inference_mode():
        single = max(run(torch.float32, 1), run(torch.bfloat16, 1), run(torch.float32, 1), run(torch.bfloat16, 1))
        repeats = max(1, min(1000, round(MIN_RUN_S / max(single, 1e-7))))
        out: Rounds = []
        for k in range(rounds):
            first, second = (torch.float32, torch.bfloat16) if k % 2 == 0 else (torch.bfloat16, torch.float32)
            timed = {first: run(first, repeats)}
            timed[second] = run(second, repeats)
            out.append((timed[torch.float32], timed[torch.bfloat16]))
    return out


def probe_cpu_dtypes(model: nn.Module) -> Rounds | None:
    """The rounds of the largest linear in each dtype; None for a model without one."""
    weight = largest_linear_weight(model)
    return None if weight is None else time_rounds(weight)


def dtype_advice(
    name: str, asked: torch.dtype, rounds: Rounds, shape: tuple[int, int], explicit: bool
) -> tuple[int, str]:
    """The log level and line for ``rounds``: a warning when the dtype asked for in the
    config is the slower one in every round, info otherwise. The figures are medians; the
    speed-up claimed is the least one seen."""
    fp32 = statistics.median(r[0] for r in rounds)
    bf16 = statistics.median(r[1] for r in rounds)
    figures = (
        f"a [{PROBE_TOKENS} x {shape[1]}] x [{shape[1]} x {shape[0]}] linear: float32 {fp32 * 1e3:.2f} ms, "
        f"bfloat16 {bf16 * 1e3:.2f} ms on this CPU, median of {len(rounds)} rounds"
    )
    if asked == torch.bfloat16:
        other, faster = torch.float32, min(b / f for f, b in rounds)
    else:
        other, faster = torch.bfloat16, min(f / b for f, b in rounds)
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
    weight = largest_linear_weight(model)
    if weight is None:
        return None
    rounds = time_rounds(weight)
    level, line = dtype_advice(name, asked, rounds, (weight.shape[0], weight.shape[1]), explicit)
    log.log(level, line)
    return {
        torch.float32: statistics.median(r[0] for r in rounds),
        torch.bfloat16: statistics.median(r[1] for r in rounds),
    }
