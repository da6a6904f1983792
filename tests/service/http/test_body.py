"""Bodies checked before they are parsed: value counts, item counts, numbers, Unicode."""

from __future__ import annotations

import json

import pytest

from rewardserve.protocol import ERROR_STATUS
from rewardserve.service.http.body import BodyError, QuoteCount, count_values, parse_body

LIMITS = {"max_values": 1000, "max_items": 10}


def refused(body: bytes, status: int, param: str = "body", **limits) -> BodyError:
    with pytest.raises(BodyError) as err:
        parse_body(body, **{**LIMITS, **limits})
    assert ERROR_STATUS[err.value.type] == status and err.value.param == param, err.value.message
    return err.value


def test_value_counts_ignore_what_strings_hold():
    prose = json.dumps({"items": [{"response": "a, b, c, [d], {e}" * 500}]}).encode()
    assert count_values(prose, 100) < 10  # commas and brackets inside the string do not count
    assert count_values(b"[" + b",".join([b"[]"] * 5000) + b"]", 100) > 5000
    assert count_values(b'["a","b","c"]', 1000) <= 4


def test_strings_counted_while_a_body_arrives_skip_escaped_quotes_even_split_across_chunks():
    body = json.dumps(["a", 'say "hi"', "b"]).encode()  # 3 strings, 2 escaped quotes
    cut = body.index(b'\\"') + 1  # between the backslash and its quote
    counted, chunks = QuoteCount(), []
    for chunk in (body[:cut], body[cut:]):
        counted.add(chunk)
        chunks.append(chunk)
    assert counted.may_be_over(3) and not counted.may_be_over(4)  # 8 quotes: 4 strings at most
    assert counted.strings(chunks) == 3


def test_too_many_values_or_items_are_413s():
    refused(b"[" + b",".join([b"0"] * 2000) + b"]", 413)
    refused(json.dumps({"model": "m", "items": [{"response": "x"}] * 11}).encode(), 413, "items")
    refused(json.dumps({"query": ["x"] * 11}).encode(), 413, "query")
    assert len(parse_body(json.dumps({"items": [{"response": "x"}] * 10}).encode(), **LIMITS)["items"]) == 10


def test_numbers_json_allows_but_python_should_not_build():
    assert "digits" in refused(b'{"a": ' + b"9" * 1001 + b"}", 422).message
    assert parse_body(b'{"a": ' + b"9" * 1000 + b"}", **LIMITS)["a"] > 0
    assert "NaN" in refused(b'{"a": NaN}', 422).message
    assert "Infinity" in refused(b'{"a": -Infinity}', 422).message


def test_unpaired_surrogates_are_named_and_pairs_pass():
    refused(rb'{"items": [{"response": "ok"}, {"response": "bad \udc00 here"}]}', 422, "items[1].response")
    refused(rb'{"items": [{"metadata": {"\ud800": 1}}]}', 422, "items[0].metadata")
    assert parse_body(rb'{"a": "\ud83d\ude00", "b": "\\ud800"}', **LIMITS) == {"a": "\U0001f600", "b": "\\ud800"}


def test_broken_bodies_say_what_is_wrong():
    assert "not UTF-8" in refused(b'{"a": "\xff"}', 422).message
    assert "line 1" in refused(b'{"a": ', 422).message
    assert "nested" in refused(b"[" * 100_000 + b"]" * 100_000, 422, max_values=10**6).message
