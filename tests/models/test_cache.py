"""What the score cache keeps (models/cache.py): a code item's result holding a verdict the
host's load decides (TLE, MLE) is never served again; others are."""

from __future__ import annotations

import pytest

from rewardserve.models.cache import cacheable
from rewardserve.protocol import ItemResult
from rewardserve.protocol.common import TestVerdict as Verdict


def result(*verdicts: str) -> ItemResult:
    return ItemResult(score=0.5, tests=[Verdict(verdict=v) for v in verdicts])


@pytest.mark.parametrize("load", ["TLE", "MLE"])
def test_a_result_with_a_load_decided_verdict_is_not_cacheable(load):
    assert not cacheable(result("AC", load, "WA"))


def test_results_judged_by_the_program_alone_are_cacheable():
    assert cacheable(result("AC", "WA", "RE", "OLE", "CE"))
    assert cacheable(ItemResult(score=0.7))  # no tests: a model's score
