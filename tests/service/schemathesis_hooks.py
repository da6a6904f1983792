"""Schemathesis hooks for tests/service/test_fuzz.py: besides what the schema allows,
bodies with what JSON can carry and the service must refuse cleanly (a 4xx, never a
5xx): unpaired UTF-16 surrogates in strings, integers thousands of digits long, and
floats at the edge of the double range."""

from __future__ import annotations

import zlib

import schemathesis

HUGE_INT = 10**3999  # past the service's 1,000-digit limit, within what JSON writers print
EDGE_FLOAT = 1.7976931348623157e308


def _mutate(value, how: int):
    if isinstance(value, str):
        return value + "\ud800" if how == 0 else value
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return -HUGE_INT if how == 1 and value < 0 else HUGE_INT if how == 1 else value
    if isinstance(value, float):
        return EDGE_FLOAT if how == 1 else value
    if isinstance(value, list):
        return [_mutate(v, how) for v in value]
    if isinstance(value, dict):
        return {k: _mutate(v, how) for k, v in value.items()}
    return value


@schemathesis.hook
def map_body(context, body):
    """A third of the bodies get lone surrogates, a third huge numbers (chosen by a
    hash of the body, so a seeded run is repeatable)."""
    how = zlib.crc32(repr(body).encode("utf-8", "surrogatepass")) % 3
    return _mutate(body, how)
