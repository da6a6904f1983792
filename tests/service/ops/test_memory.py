"""Memory trimming after batches: at most once per interval, off at 0; activation-sized
allocations kept mapped between uses; loaded objects frozen out of the collector's scans."""

from __future__ import annotations

import subprocess
import sys
import time

from rewardserve.service.ops.malloc_trim import MallocTrim


def test_trims_at_most_once_per_interval():
    calls = []
    trim = MallocTrim(0.2)
    assert trim._trim is not None  # glibc here
    trim._trim = calls.append
    trim()
    trim()
    assert calls == [0]
    time.sleep(0.25)
    trim()
    assert calls == [0, 0]


def test_off_when_interval_is_zero():
    trim = MallocTrim(0)
    assert trim._trim is None
    trim()  # no-op


FAULTS = """
import resource, sys
import numpy as np
from rewardserve.service.ops.malloc_trim import keep_activation_memory
if sys.argv[1] == "keep":
    assert keep_activation_memory()
def cycle():  # a forward's worth of activations: several blocks alive, then all freed
    blocks = [np.empty(8 << 20, dtype=np.uint8) for _ in range(6)]
    for b in blocks:
        b[::4096] = 1  # touch every page
    del blocks
cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    cycle()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_activation_sized_blocks_stay_mapped_between_uses():
    """With glibc's defaults, 48 MB of activations freed at the end of a pass go back to
    the OS and the next pass faults pages in again (~3,000 of 12,288 per pass here); with
    keep_activation_memory the freed blocks are reused as they are."""

    def faults(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return int(out.stdout)

    default, kept = faults("default"), faults("keep")
    assert default > 50 * 1_000  # 3,000 a pass here
    assert kept < default / 20  # 0 here


def test_a_served_process_freezes_its_loaded_objects_out_of_gc_scans(qwen3_rm, tmp_path):
    """Once the models have loaded, the objects alive are frozen out of the collector's
    full scans (service/ops/malloc_trim.py); the start-up log says how many."""
    import json

    from tests.harness import serve_subprocess

    log = tmp_path / "server.log"
    spec = [{"name": "rm", "source": str(qwen3_rm)}]
    with serve_subprocess("--no-builtin-rules", env={"REWARDSERVE_MODELS": json.dumps(spec)}, log_path=log):
        deadline = time.monotonic() + 60  # ready comes first, the freeze right after
        while "garbage collector:" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
    frozen = [line for line in log.read_text().splitlines() if "garbage collector:" in line]
    assert frozen, log.read_text()[-2000:]
    assert int(frozen[0].split("garbage collector: ")[1].split()[0]) > 10_000, frozen
