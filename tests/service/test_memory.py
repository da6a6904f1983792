"""Memory trimming after batches: at most once per interval, off at 0."""

from __future__ import annotations

import time

from rewardserve.service.memory import MallocTrim


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
