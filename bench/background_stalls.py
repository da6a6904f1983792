"""A forward's latency beside CPU-bound background processes, by how they are kept below
it: none, ``nice 19`` (the rule workers' and sandboxes' priority today), or the
``SCHED_IDLE`` policy. Each background process spins on a core, as a rule call or a test
that burns its whole time limit does.

    .venv/bin/python bench/background_stalls.py [--seconds 15] [--rounds 1]

The forward is a stack of linear layers on torch's intra-op threads (one per core), run
every 5 ms, as a served model's batches come. Each mode runs in turn (none, nice, idle,
idle, nice, none per round: ABBA), and prints p50 / p99 / worst latency.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.compare import cpu_name  # noqa: E402

# Lowered as a rule worker is (isolation.lower_priority), then spinning.
SPIN = (
    "import sys\n"
    "from rewardserve.models.rules.worker import lower_priority\n"
    "lower_priority(sys.argv[1])\n"
    "while True:\n"
    "    pass\n"
)


def forward_latencies(mode: str, seconds: float) -> list[float]:
    import torch

    spinners = []
    if mode != "none":
        spinners = [subprocess.Popen([sys.executable, "-c", SPIN, mode]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.5)
        torch.manual_seed(0)
        layers = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(24)])
        x = torch.randn(64, 512)
        latencies = []
        with torch.inference_mode():
            for _ in range(20):
                layers(x)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                start = time.perf_counter()
                layers(x)
                latencies.append((time.perf_counter() - start) * 1000)
                time.sleep(0.005)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    return sorted(latencies)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=15.0, help="per mode")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    import torch

    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; torch threads {torch.get_num_threads()}")
    for _ in range(args.rounds):
        for mode in ("none", "nice", "idle", "idle", "nice", "none"):
            got = forward_latencies(mode, args.seconds)
            print(
                f"{mode:>4}: {len(got)} forwards, p50 {statistics.median(got):.2f} ms, "
                f"p99 {got[int(0.99 * len(got))]:.2f} ms, worst {got[-1]:.2f} ms",
                flush=True,
            )


if __name__ == "__main__":
    main()
