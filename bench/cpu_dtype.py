"""bf16 on a CPU that has it (avx512_bf16 / AMX) against fp32 with oneDNN linears: speed
and the score difference it costs, same model, same items, rewardserve's own backend.

    .venv/bin/python bench/cpu_dtype.py [--items 64]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import numpy as np

    from bench.outcome import build_items, build_model
    from rewardserve.models.kinds import build_model as build_kind
    from rewardserve.models.plan import Unit
    from rewardserve.models.spec import ModelSpec
    from rewardserve.protocol import Item, ScoreOptions

    flags = open("/proc/cpuinfo").read()
    print("CPU bf16 support:", "avx512_bf16" in flags, "| AMX:", "amx_bf16" in flags)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(Path(tmp) / "rm")
        items = [Item.model_validate(i) for i in build_items(args.items, seed=3)]
        models = {
            dtype: build_kind(ModelSpec(name=dtype, kind="outcome", source=str(model_dir), dtype=dtype))
            for dtype in ("float32", "bfloat16")
        }
        works = {}
        for dtype, model in models.items():
            model.load()
            works[dtype] = model.prepare(items, ScoreOptions())
        best = {d: float("inf") for d in models}
        scores = {}
        for _ in range(args.rounds):  # alternated, best of each: the machine's speed drifts
            for dtype, model in models.items():
                batches = [works[dtype][k : k + 8] for k in range(0, len(items), 8)]
                start = time.perf_counter()
                scores[dtype] = [
                    out[0].score for batch in batches for out in model.run([Unit(job.length, job) for job in batch])
                ]
                best[dtype] = min(best[dtype], time.perf_counter() - start)
        tokens = sum(w.length for w in works["float32"])
        for dtype in models:
            print(f"{dtype:>9}: {args.items / best[dtype]:.2f} items/s ({tokens / best[dtype]:.0f} tokens/s)")
        diff = np.abs(np.array(scores["bfloat16"]) - np.array(scores["float32"]))
        spread = float(np.std(scores["float32"]))
        print(
            f"bf16 / fp32 speed: {best['float32'] / best['bfloat16']:.2f}x; score |diff| max {diff.max():.3g}, "
            f"mean {diff.mean():.3g} (scores' std {spread:.3g})"
        )


if __name__ == "__main__":
    main()
