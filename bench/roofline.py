"""How close the forward gets to this machine's GEMM, in one run.

    .venv/bin/python bench/roofline.py [--items 64] [--tokens 300] [--dtype float32|bfloat16] [--seed N]

The bench model of bench/compare.py (Qwen3 classifier, hidden 1024, 8 layers, head_dim
128, intermediate 2048, random weights), loaded by the service's own backend (oneDNN
prepacked linears, packed rows, compiled layers: as the service runs it). Independent
items of ``tokens`` fresh tokens each, read in the batches the CPU batch policy makes.

  achieved  model FLOPs per token (2 x the linear weights, plus attention's 4 x context
            x hidden per layer) x tokens / the forward's seconds
  GEMM      the same packed kernel alone on the model's largest linear shape, with as
            many rows as a batch has tokens
Then a torch profile of one batch: where the time goes.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from bench.compare import cpu_name, fresh_seed  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--batch-tokens", type=int, default=1024, help="tokens per forward batch")
    parser.add_argument("--seed", type=int, default=None)
    # bfloat16 where the CPU has bf16 kernels (avx512_bf16, AMX): the GEMM alone then runs
    # in bf16 too, so the fraction compares like with like.
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    args = parser.parse_args()
    seed = fresh_seed(args.seed)
    rng = random.Random(seed)

    import torch

    from rewardserve.models.backends import TokenSequence, make_backend
    from rewardserve.models.backends.kernels.cpu_linear import ProjectionPart
    from rewardserve.models.spec import ModelSpec
    from tests.builders import build_sequence_classifier

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_sequence_classifier(
            Path(tmp) / "rm", "qwen3", hidden=1024, layers=8, heads=8, head_dim=128, max_positions=4096
        )
        backend = make_backend(ModelSpec(name="rm", source=str(model_dir), dtype=args.dtype), "classify")
        config = backend.base.config
        vocab = config.vocab_size
        items = [[rng.randrange(10, vocab) for _ in range(args.tokens)] for _ in range(args.items)]
        per_batch = max(1, args.batch_tokens // args.tokens)
        batches = [items[k : k + per_batch] for k in range(0, len(items), per_batch)]

        def forward(batch):
            units = [([], [TokenSequence(ids, (len(ids) - 1,))]) for ids in batch]
            return backend.read_packed(units)

        forward(batches[0])  # warm
        start = time.perf_counter()
        for batch in batches:
            forward(batch)
        seconds = time.perf_counter() - start

        # A fused projection's parts (bf16: q, k, v as one GEMM) name shapes whose work the
        # fused linear does: counted once, there.
        linears = [
            m
            for m in backend.base.modules()
            if hasattr(m, "in_features") and hasattr(m, "out_features") and not isinstance(m, ProjectionPart)
        ]
        weights = sum(m.in_features * m.out_features for m in linears)
        layers = config.num_hidden_layers
        heads_dim = config.num_attention_heads * config.head_dim
        tokens = args.items * args.tokens
        # Causal attention over a sequence of n: per token on average n/2 keys, QK and AV.
        attention = layers * 2 * 2 * (args.tokens / 2) * heads_dim
        flops = tokens * (2 * weights + attention)
        achieved = flops / seconds / 1e9

        largest = max(linears, key=lambda m: m.in_features * m.out_features)
        rows = per_batch * args.tokens
        x = torch.randn(rows, largest.in_features, dtype=getattr(torch, args.dtype))
        with torch.inference_mode():
            largest(x)
            best = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                largest(x)
                best = min(best, time.perf_counter() - t)
        gemm = 2 * rows * largest.in_features * largest.out_features / best / 1e9
        kind = type(largest).__name__

        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            forward(batches[0])
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)

    print()
    print(
        f"CPU: {cpu_name()}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}; {args.dtype}; seed {seed}"
    )
    print(
        f"{args.items} items x {args.tokens} tokens, {per_batch} items per batch; linear weights "
        f"{weights / 1e6:.1f} M; {flops / tokens / 1e6:.1f} MFLOP per token"
    )
    print(f"forward (the service's backend, {kind} linears): {tokens / seconds:,.0f} tokens/s, {achieved:.1f} GFLOP/s")
    print(
        f"GEMM alone ({kind}, [{rows} x {largest.in_features}] x [{largest.in_features} x {largest.out_features}]): "
        f"{gemm:.1f} GFLOP/s"
    )
    print(f"fraction of the GEMM: {achieved / gemm:.0%} (target >= 80%)")
    print()
    print(table)


if __name__ == "__main__":
    main()
