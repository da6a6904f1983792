"""New weights while serving, in place against loaded beside, on a real `rewardserve
serve` process, measured from outside:

    .venv/bin/python bench/weights_update.py [--hidden 1024] [--layers 6] [--rounds 3]

Builds a Qwen3 classifier (random weights; about 218 MiB of float32 at the defaults) and
a second version of it, serves the first with its weights as plain torch tensors
(``cpu_linear: torch``, ``compile_layers: false``: what an in-place write needs on a CPU;
a GPU's are so already), then per round, in the order in place, beside, beside, in place
(ABBA), pushes the other version: ``POST .../weights`` (written into the serving
tensors) or ``POST .../load`` (built beside, then swapped). For each: the caller's time,
the process's peak RSS and RssAnon during the call above their values before (sampled
every 5 ms), and RssAnon after.
"""

from __future__ import annotations

import argparse
import os
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

from bench.lifecycle import ITEMS, cpu_name, status_mib  # noqa: E402


class PeakRSS:
    """The highest RSS and RssAnon of ``pid`` while inside the ``with`` block. RssAnon is
    the memory the process owns; RSS also counts the checkpoint's file pages while they
    are mapped (clean page cache, which the kernel takes back under pressure)."""

    def __init__(self, pid: int):
        self.pid, self.peak, self.peak_anon, self._stop = pid, 0.0, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, status_mib(self.pid, "VmRSS"))
            self.peak_anon = max(self.peak_anon, status_mib(self.pid, "RssAnon"))
            time.sleep(0.005)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    import httpx
    import yaml

    from rewardserve.client import RewardClient
    from tests.builders import build_sequence_classifier
    from tests.harness import serve_process

    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-weights-"))
    size = {"hidden": args.hidden, "layers": args.layers, "heads": args.hidden // 64, "head_dim": 64}
    versions = [build_sequence_classifier(root / f"v{k}", seed=k, **size) for k in (0, 1)]
    weights = (versions[0] / "model.safetensors").stat().st_size / 2**20
    config = root / "models.yaml"
    options = {"cpu_linear": "torch", "compile_layers": False}
    config.write_text(yaml.safe_dump({"models": [{"name": "rm", "source": str(versions[0]), "options": options}]}))
    rows: dict[str, list[float]] = {}
    env = {"REWARDSERVE_ADMIN_KEYS": "admin"}
    with (
        serve_process("--config", str(config), "--no-builtin-rules", env=env) as (url, proc),
        RewardClient(url, api_key="admin") as admin,
        httpx.Client(timeout=120) as http,
    ):
        http.post(url + "/v1/score", json={"model": "rm", "items": ITEMS}).raise_for_status()
        pushed = 0
        for round_ in range(args.rounds):
            for how in ("in place", "beside", "beside", "in place"):
                pushed += 1
                target, version = str(versions[pushed % 2]), f"r{round_}-{pushed}"
                before, before_anon = status_mib(proc.pid, "VmRSS"), status_mib(proc.pid, "RssAnon")
                start = time.perf_counter()
                with PeakRSS(proc.pid) as peak:
                    if how == "in place":
                        state = admin.admin.weights("rm", target, version)
                        assert state.weights_update == "in place", state.weights_update
                    else:
                        admin.admin.load("rm", target, version)
                took = time.perf_counter() - start
                http.post(url + "/v1/score", json={"model": "rm", "items": ITEMS}).raise_for_status()
                rows.setdefault(f"{how}: seconds", []).append(took)
                rows.setdefault(f"{how}: peak RSS above before (MiB)", []).append(peak.peak - before)
                rows.setdefault(f"{how}: peak RssAnon above before (MiB)", []).append(peak.peak_anon - before_anon)
                rows.setdefault(f"{how}: RssAnon after - before (MiB)", []).append(
                    status_mib(proc.pid, "RssAnon") - before_anon
                )
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; weights {weights:.0f} MiB; {args.rounds} rounds (ABBA)")
    for key, values in sorted(rows.items()):
        runs = ", ".join(f"{v:.3g}" for v in values)
        print(f"{key:>40}: median {statistics.median(values):8.3f}  (runs {runs})")


if __name__ == "__main__":
    main()
