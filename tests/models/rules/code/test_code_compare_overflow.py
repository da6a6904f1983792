"""The ``tokens`` comparison (models/rules/code/compare.py) past float's range: float()
makes every such number infinity, so ``inf`` matched an expected ``1e400`` and 500 nines
matched a 401-digit answer. A number there is compared by its exact value; ``inf``
matches only infinity written out."""

from __future__ import annotations

import pytest

from rewardserve.models.rules.code import code_tests
from rewardserve.models.rules.code.compare import same_tokens

BIG = "1" + "0" * 400 + ".5"  # 401 digits before the point


@pytest.mark.parametrize(
    ("got", "want", "same"),
    [
        ("inf", "1e400", False),
        ("1e400", "inf", False),
        ("Infinity", "-1e400", False),
        ("9" * 500 + ".0", BIG, False),
        ("1e500", BIG, False),
        ("1.0e400", "1e400", True),
        ("1.0000000001e400", "1e400", True),  # the same relative tolerance as within range
        ("1.001e400", "1e400", False),
        (BIG + "000", BIG, True),
        ("-1e400", "-1E+400", True),
        ("1e999999999", "1e999999998", False),  # past even a decimal's default range
        ("inf", "Infinity", True),
        ("-inf", "inf", False),
        ("nan", "nan", False),
    ],
)
def test_numbers_past_float_s_range_are_not_infinity(got, want, same):
    assert same_tokens(got, want) is same


def test_a_program_printing_inf_fails_an_overflowing_answer():
    assert float(code_tests("print(float('inf'))", {"inputs": [""], "outputs": ["1e400\n"]})) == 0.0
    assert float(code_tests("print('9' * 500)", {"inputs": [""], "outputs": [BIG + "\n"]})) == 0.0
    assert float(code_tests("print('1.0e400')", {"inputs": [""], "outputs": ["1e400\n"]})) == 1.0
