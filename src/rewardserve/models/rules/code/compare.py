"""How the code model (code.py) decides that a test's output is the expected one.

``tokens`` (the default) normalises line ends, drops trailing whitespace on each line and
trailing empty lines, needs the same line count, and compares whitespace-separated tokens:
an expected integer matches only the same integer (``1000000.0`` or ``1e6`` is not
``1000000``: a float's tolerance would pass an integer answer that is off by one), other
numbers match when within 1e-6 absolute or relative (NaN never matches). ``exact`` is
the rule of verl's client for SandboxFusion: equal after trailing newlines are stripped.
``lines`` is LiveCodeBench's: the whole output stripped, then each line stripped, the same
line count, each line equal as text or as a list of decimals (``1.0`` is ``1``, with no
tolerance). ``sandbox_fusion`` is the judge of SandboxFusion's own server: the whole output
stripped, the same line count, each line equal case-insensitively once stripped, or both
lines numbers (as Python's ``float`` reads them) within 1e-5 relative to the expected one.
Call-based results compare as JSON values (``same_value``): tuples as lists, an expected
integer by ``==`` (a float result only where it is that integer exactly), an expected float
by the 1e-6 rule, recursively; under a harness with an equality of its own, by that one
(``HARNESS_EQUALITY``: LiveCodeBench's and prime_code's ``==``).

A number beyond float's range (``1e400``, 401 digits before the point) is not infinity:
``tokens`` compares it with its exact value (as a decimal), and ``inf`` matches only ``inf``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from decimal import Decimal, localcontext
from typing import Any

TOLERANCE = 1e-6
_INTEGER = re.compile(r"[+-]?\d+", re.ASCII)
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|infinity|nan)", re.ASCII | re.IGNORECASE)


def same_value(got: Any, want: Any) -> bool:
    if isinstance(got, tuple):
        got = list(got)
    if isinstance(want, tuple):
        want = list(want)
    if isinstance(got, bool) or isinstance(want, bool):
        return got is want if isinstance(got, bool) and isinstance(want, bool) else False
    if isinstance(got, (int, float)) and isinstance(want, (int, float)):
        return _close(float(got), float(want)) if isinstance(want, float) else got == want
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(same_value(g, w) for g, w in zip(got, want))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(same_value(got[k], want[k]) for k in got)
    return bool(got == want)


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return False
    if a == b:
        return True
    diff = abs(a - b)
    return diff <= TOLERANCE or diff <= TOLERANCE * abs(b)


def integer_text(token: str) -> str:
    """An integer token's canonical text (int() refuses over 4,300 digits)."""
    digits = token.lstrip("+-").lstrip("0") or "0"
    return ("-" if token.startswith("-") and digits != "0" else "") + digits


def _number(token: str) -> float | None:
    if not _FLOAT.fullmatch(token):  # float() also takes 1_000 and other scripts' digits
        return None
    try:
        value = float(token)
    except ValueError:
        return None
    return value


def _every_line(got: list[str], want: list[str], same_line: Callable[[str, str], bool]) -> bool:
    """The same number of lines, each pair the same by ``same_line``."""
    return len(got) == len(want) and all(same_line(g, w) for g, w in zip(got, want))


def same_tokens(got: str, want: str) -> bool:
    """The default stdout comparison (see the module's docstring)."""
    return _every_line(_normal_lines(got), _normal_lines(want), _same_token_line)


def _same_token_line(got_line: str, want_line: str) -> bool:
    got_tokens, want_tokens = got_line.split(), want_line.split()
    if len(got_tokens) != len(want_tokens):
        return False
    for a, b in zip(got_tokens, want_tokens):
        if a == b and a.lower() != "nan":
            continue
        if _INTEGER.fullmatch(b):  # never a tolerance on integers
            if not _INTEGER.fullmatch(a) or integer_text(a) != integer_text(b):
                return False
            continue
        if not _same_number(a, b):
            return False
    return True


def _same_number(a: str, b: str) -> bool:
    """Two number tokens within the tolerance; past float's range, by their exact values
    (float() would make both infinity)."""
    x, y = _number(a), _number(b)
    if x is None or y is None:
        return False
    if math.isfinite(x) and math.isfinite(y):
        return _close(x, y)
    try:
        with localcontext() as context:
            context.prec = 60
            exact_a, exact_b = Decimal(a), Decimal(b)
            if exact_a.is_nan() or exact_b.is_nan():
                return False
            if exact_a.is_infinite() or exact_b.is_infinite():  # written out: inf only for inf
                return exact_a == exact_b
            diff = abs(exact_a - exact_b)
            return bool(diff <= Decimal(TOLERANCE) or diff <= Decimal(TOLERANCE) * abs(exact_b))
    except ArithmeticError:  # an exponent past even a decimal's range
        return False


def _normal_lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def same_exact(got: str, want: str) -> bool:
    return got.rstrip("\n") == want.rstrip("\n")


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except ArithmeticError:  # InvalidOperation, where a token is not a number
        return None


def same_lines(got: str, want: str) -> bool:
    """LiveCodeBench's rule (see the module's docstring)."""
    return _every_line(_stripped_lines(got), _stripped_lines(want), _same_decimal_line)


def _same_decimal_line(got_line: str, want_line: str) -> bool:
    if got_line == want_line:
        return True
    a, b = _decimals(got_line), _decimals(want_line)
    try:
        return a is not None and b is not None and a == b
    except ArithmeticError:  # a signalling NaN refuses to compare; LiveCodeBench crashes
        return False


def same_sandbox_fusion(got: str, want: str) -> bool:
    """SandboxFusion's rule (see the module's docstring)."""
    got_lines, want_lines = got.strip().split("\n"), want.strip().split("\n")
    return len(got_lines) == len(want_lines) and all(map(_same_folded_line, got_lines, want_lines))


def _same_folded_line(got_line: str, want_line: str) -> bool:
    got_line, want_line = got_line.lower(), want_line.lower()
    if got_line.strip() == want_line.strip():
        return True
    try:
        a, b = float(got_line), float(want_line)
    except ValueError:
        return False
    return abs(a - b) / max(abs(b), 1e-10) < 1e-5  # NaN and inf - inf compare false


COMPARE = {"tokens": same_tokens, "exact": same_exact, "lines": same_lines, "sandbox_fusion": same_sandbox_fusion}


def same_as_lcb(got: Any, want: Any) -> bool:
    """LiveCodeBench's grade_call_based (testing_util.py at the commit code/formats.py
    names): a tuple result as a list, then Python's ``==`` (``True`` is ``1``; no float
    tolerance; a nested tuple is not a list)."""
    if isinstance(got, tuple):
        got = list(got)
    return bool(got == want)


def same_as_prime_code(got: Any, want: Any) -> bool:
    """verl 0.9.1's prime_code run_test (prime_code/testing_util.py): an expected dict's
    keys as integers (where they all are), a tuple result as a list, then ``==`` against
    the value or its first item, or a list of tuples as lists against its first item."""
    try:
        if isinstance(want, dict):
            want = [{int(k): v for k, v in want.items()}]
    except (TypeError, ValueError):
        pass
    try:
        if isinstance(want[0], dict):
            want = [{int(k): v for k, v in want[0].items()}]
    except (TypeError, ValueError, IndexError, KeyError):
        pass
    if isinstance(got, tuple):
        got = list(got)
    same = got == want
    if isinstance(want, list) and want:
        same = same or got == want[0]
    try:
        if isinstance(got[0], tuple):
            same = same or [list(x) for x in got] == want[0]
    except (TypeError, IndexError, KeyError):
        pass
    return same is True


def same_as_prime_code_stdout(got: str, want: str) -> bool:
    """verl 0.9.1's prime_code run_test on a stdin program's output (its lines, as
    ``splitlines`` cuts them): the whole text stripped, or each line stripped then the
    whole; the expected text's non-empty lines, stripped, against the output's lines, then
    its non-empty lines; where not every pair of lines is two digit strings, each line as
    one float within numpy's allclose (rtol 1e-5, atol 1e-8). Its last step, on sets of
    tokens, is computed but never checked there, so not here either."""
    lines = got.splitlines()
    if "\n".join(lines).strip() == want.strip() or "\n".join(line.strip() for line in lines).strip() == want.strip():
        return True
    if lines == [want]:
        return True
    wanted = [line.strip() for line in want.split("\n") if line]
    if lines == wanted:
        return True
    lines = [line for line in lines if line]
    if lines == wanted:
        return True
    if len(lines) != len(wanted) or all(a.isdigit() and b.isdigit() for a, b in zip(lines, wanted)):
        return False
    try:
        return all(_allclose(float(a), float(b)) for a, b in zip(lines, wanted))
    except ValueError:
        return False


def _allclose(a: float, b: float) -> bool:
    """numpy's isclose with its defaults: no NaN, infinities only equal ones."""
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-8 + 1e-5 * abs(b)


HARNESS_EQUALITY: dict[str, Callable[[Any, Any], bool]] = {"lcb": same_as_lcb, "prime_code": same_as_prime_code}
# A harness's own rule for a stdin program's output, over the request's ``compare``.
HARNESS_STDOUT: dict[str, Callable[[str, str], bool]] = {"lcb": same_lines, "prime_code": same_as_prime_code_stdout}
