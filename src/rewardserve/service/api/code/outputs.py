"""What one answer shows of code items' output: the code model bounds each item's
(its tests' stdout and stderr, 16 MiB together); an answer of many items shows 16 MiB of
them all, each test an equal share, those cut marked ``truncated``."""

from __future__ import annotations

from rewardserve.models.rules.code import ANSWER_BYTES, json_bytes, shown_streams
from rewardserve.protocol import ItemResult, TestVerdict


def bound_outputs(results: list[ItemResult], cap: int = ANSWER_BYTES) -> None:
    """Each shown stdout and stderr of ``results`` cut, in place, to its share of ``cap``
    where together they pass it."""
    tests = [test for result in results for test in result.tests or () if test.stdout or test.stderr]
    shown = sum(len(test.stdout or "") + len(test.stderr or "") for test in tests)
    if shown * 6 <= cap:  # a character is at most six bytes of JSON text (a control character's escape)
        return
    if sum(json_bytes(test.stdout or "") + json_bytes(test.stderr or "") for test in tests) <= cap:
        return
    share = cap // (2 * len(tests))
    for test in tests:
        _cut(test, share)


def _cut(test: TestVerdict, share: int) -> None:
    stdout, stderr, cut = shown_streams(test.stdout or "", test.stderr or "", share)
    if cut:
        test.stdout, test.stderr, test.truncated = stdout, stderr, True
