"""Sleep, wake and hot swap on a real `rewardserve serve` process, timed from outside:

    .venv/bin/python bench/lifecycle.py [--hidden 1024] [--layers 6] [--rounds 3] [--callers 4]

Builds a Qwen3 classifier (random weights; about 224 MB of float32 at the defaults) and
a second version of it, serves the first, then per round: sleep and wake at level 1 and
at level 2 (each call's duration as the admin API reports it and as the caller sees it,
the process's RSS asleep and awake), and a hot swap to the other version while
``callers`` closed-loop callers score, with their p50 / p99 before and during the swap.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

ITEMS = [{"prompt": "What is 2+2?", "response": r} for r in ("4", "five", "It is 4.", "22")]


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def status_mib(pid: int, field: str) -> float:
    """A memory field of /proc/PID/status (VmRSS, RssAnon, ...) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_mib(pid: int) -> float:
    return status_mib(pid, "VmRSS")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1)))] if ordered else float("nan")


def main() -> None:
    import httpx

    from rewardserve.client import RewardClient
    from tests.builders import build_sequence_classifier
    from tests.harness import serve_process

    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--callers", type=int, default=4)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-lifecycle-"))
    size = {"hidden": args.hidden, "layers": args.layers, "heads": args.hidden // 64, "head_dim": 64}
    versions = [build_sequence_classifier(root / f"v{k}", seed=k, **size) for k in (0, 1)]
    weights = (versions[0] / "model.safetensors").stat().st_size / 2**20
    rows: dict[str, list[float]] = {}

    def note(key: str, value: float) -> None:
        rows.setdefault(key, []).append(value)

    env = {"REWARDSERVE_ADMIN_KEYS": "admin"}
    with (
        serve_process("--model", f"rm={versions[0]}", "--no-builtin-rules", env=env) as (url, proc),
        RewardClient(url, api_key="admin") as admin,
        httpx.Client(timeout=120) as http,
    ):
        http.post(url + "/v1/score", json={"model": "rm", "items": ITEMS})
        for round_ in range(args.rounds):
            for level in (1, 2):
                awake = rss_mib(proc.pid)
                start = time.perf_counter()
                asleep = admin.admin.sleep("rm", level=level)
                note(f"sleep {level} (caller s)", time.perf_counter() - start)
                note(f"RSS freed by sleep {level} (MiB)", awake - rss_mib(proc.pid))
                start = time.perf_counter()
                woken = admin.admin.wake_up("rm")
                note(f"wake {level} (caller s)", time.perf_counter() - start)
                note(f"sleep {level} (service s)", asleep.last_operation_s or 0.0)
                note(f"wake {level} (service s)", woken.last_operation_s or 0.0)
            latencies: list[tuple[float, float]] = []
            stop = threading.Event()

            def caller(latencies: list[tuple[float, float]] = latencies, stop: threading.Event = stop) -> None:
                with httpx.Client(timeout=120) as own:
                    while not stop.is_set():
                        began = time.perf_counter()
                        own.post(url + "/v1/score", json={"model": "rm", "items": ITEMS}).raise_for_status()
                        latencies.append((began, time.perf_counter()))

            threads = [threading.Thread(target=caller) for _ in range(args.callers)]
            for thread in threads:
                thread.start()
            time.sleep(3)
            swap_start = time.perf_counter()
            admin.admin.load("rm", str(versions[(round_ + 1) % 2]), f"r{round_}")
            swap_end = time.perf_counter()
            time.sleep(1)
            stop.set()
            for thread in threads:
                thread.join()
            before = [e - s for s, e in latencies if e < swap_start]
            during = [e - s for s, e in latencies if s < swap_end and e > swap_start]
            note("swap (caller s)", swap_end - swap_start)
            note("callers p50 before swap (ms)", 1000 * percentile(before, 0.5))
            note("callers p99 before swap (ms)", 1000 * percentile(before, 0.99))
            note("callers p50 during swap (ms)", 1000 * percentile(during, 0.5))
            note("callers p99 during swap (ms)", 1000 * percentile(during, 0.99))
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; weights {weights:.0f} MiB; {args.rounds} rounds")
    for key, values in rows.items():
        runs = ", ".join(f"{v:.3g}" for v in values)
        print(f"{key:>32}: median {statistics.median(values):8.3f}  (runs {runs})")


if __name__ == "__main__":
    main()
