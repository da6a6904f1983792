"""Start-up phases with their times in the log (load, pack, compile, probe), so the
seconds before a model is ready are never silent."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger("rewardserve.startup")


@contextmanager
def timed_phase(model: str, phase: str, detail: str = "") -> Iterator[None]:
    start = time.perf_counter()
    yield
    log.info("model %s: %s %.1fs%s", model, phase, time.perf_counter() - start, f" ({detail})" if detail else "")
