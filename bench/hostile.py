"""Hostile requests for bench/soak.py --hostile: the attacks of tests/adversarial/, each
as one request (or one connection) a soak can send among legitimate traffic.

Every attack answers in its own way (413, 422, 401, or a result marked invalid); none
may answer 5xx, and none may slow the legitimate traffic beyond the soak's bound.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from dataclasses import dataclass

MiB = 1024 * 1024


@dataclass(frozen=True)
class Attack:
    name: str
    path: str
    body: bytes
    auth: bool = True
    client_timeout_s: float | None = None  # hangs up after this long


def _ab(n: int, rng: random.Random) -> str:
    return "".join(rng.choice("ab") for _ in range(n))


def _rubric(items: list[dict], criteria: list[dict]) -> bytes:
    return json.dumps({"items": items, "criteria": criteria}).encode()


def attacks(seed: int = 0) -> list[Attack]:
    """One of each attack, bodies built once (the big ones are reused as bytes)."""
    rng = random.Random(seed)
    text = _ab(50_000, rng)
    words = " ".join(["word"] * 10_000)
    tiny_items = b'{"model":"math","items":[' + b",".join([b'{"response":"1"}'] * 1_970_000) + b"]}"
    return [
        Attack(
            "fuzzy partial_ratio 50k",
            "/v1/rubric",
            _rubric(
                [{"response": text, "reference": text[::-1]}],
                [{"name": "f", "fn": "fuzzy", "args": {"method": "partial_ratio"}}],
            ),
        ),
        Attack(
            "backtracking schema pattern",
            "/v1/rubric",
            _rubric(
                [{"response": '"' + "a" * 28 + '!"'}],
                [{"name": "s", "fn": "json_schema", "args": {"schema": {"type": "string", "pattern": "^(a+)+$"}}}],
            ),
        ),
        Attack(
            "template 'x' * 1e9",
            "/v1/rubric",
            _rubric(
                [{"response": "x", "reference": "x"}],
                [{"name": "e", "fn": "exact_match", "args": {"extract": "{{ 'x' * 1000000000 }}"}}],
            ),
        ),
        Attack(
            "template nested ranges",
            "/v1/rubric",
            _rubric(
                [{"response": "x", "reference": "x"}],
                [
                    {
                        "name": "e",
                        "fn": "exact_match",
                        "args": {
                            "extract": "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
                        },
                    }
                ],
            ),
        ),
        Attack(
            "rouge 10k words",
            "/v1/rubric",
            _rubric([{"response": words, "reference": words}], [{"name": "r", "fn": "rouge"}]),
        ),
        Attack(
            "similarity 300 references",
            "/v1/rubric",
            _rubric([{"response": "a cat", "reference": ["a dog"] * 300}], [{"name": "s", "fn": "similarity"}]),
        ),
        Attack(
            "unclosed JSON brackets",
            "/v1/rubric",
            _rubric(
                [{"response": "[" * 900 + "1," * 200_000}],
                [{"name": "s", "fn": "json_schema", "args": {"schema": {"type": "array"}}}],
            ),
        ),
        Attack("1.97M tiny items", "/v1/score", tiny_items),
        Attack(
            "31.9 MiB body, no key",
            "/v1/score",
            json.dumps({"model": "rm", "items": [{"response": "x" * (31 * MiB)}]}).encode(),
            auth=False,
        ),
        Attack("lone surrogate", "/v1/score", rb'{"model":"math","items":[{"response":"\ud800","reference":"1"}]}'),
        Attack(
            "slow math, client hangs up",
            "/v1/score",
            json.dumps(
                {
                    "model": "math",
                    "items": [{"response": r"\boxed{9^{9^{9^{9}}}}", "reference": str(k)} for k in range(12)],
                }
            ).encode(),
            client_timeout_s=1.0,
        ),
        Attack(
            "formula 9**9**9",
            "/v1/rubric",
            json.dumps(
                {
                    "items": [{"response": "x", "reference": "x"}],
                    "criteria": [{"name": "e", "fn": "exact_match"}],
                    "aggregation": {"mode": "formula", "formula": "e * 9 ** 9 ** 9"},
                }
            ).encode(),
        ),
    ]


async def half_open_connection(host: str, port: int, hold_s: float = 3.0) -> None:
    """Headers that never finish, held open (the server closes it at its header timeout)."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"POST /v1/score HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n")
    await writer.drain()
    try:
        await asyncio.wait_for(reader.read(), hold_s)
    except asyncio.TimeoutError:
        pass
    writer.close()


def pick(rng: random.Random, menu: list[Attack], half_open: bool = True) -> Attack | Callable:
    """An attack at random; one time in (len(menu) + 1) a half-open connection."""
    index = rng.randrange(len(menu) + (1 if half_open else 0))
    return half_open_connection if index == len(menu) else menu[index]
