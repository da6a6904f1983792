"""/v1/score/turns through the service: the route's wire shape, the items it cannot read
answered as invalid beside the others, and its options refused by name."""

from __future__ import annotations

import pytest

from rewardserve.service.settings import Settings
from tests.harness import serve_in_process

TRAJECTORY = [
    {"role": "user", "content": "weather in Paris, in Fahrenheit"},
    {"role": "assistant", "tool_calls": [{"function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "content": "18 C"},
    {"role": "assistant", "tool_calls": [{"function": {"name": "convert", "arguments": '{"c": 18}'}}]},
    {"role": "assistant", "content": "64.4 F"},
]
REFERENCE = [{"name": "weather", "arguments": {"city": "Paris"}}, {"name": "convert", "arguments": {"c": 18}}]


@pytest.fixture(scope="module")
async def http():
    async with serve_in_process(Settings(models=[], builtin_rules=True)) as (_, client):
        yield client


async def test_each_turn_and_the_trajectory_get_rewards(http):
    items = [
        {"messages": TRAJECTORY, "reference": REFERENCE},
        {"messages": TRAJECTORY, "reference": {"tool_calls": REFERENCE[:1]}},
        {"messages": TRAJECTORY, "reference": "not calls"},
    ]
    for assignment in ("hard", "soft"):
        answer = await http.post("/v1/score/turns", json={"items": items, "options": {"assignment": assignment}})
        assert answer.status_code == 200, answer.text
        assert "x-inference-time" in answer.headers
        full, half, bad = answer.json()["results"]
        assert full["turns"] == [1, 3, 4] and full["valid"]
        if assignment == "hard":
            assert full["turn_rewards"] == [1.0, 1.0, 0.0] and full["score"] == 1.0
            assert half["turn_rewards"] == [1.0, 0.0, 0.0] and half["score"] == 0.5
        else:
            assert full["score"] == pytest.approx(1.0, abs=1e-3)
        assert not bad["valid"] and "expected calls" in bad["error"]


async def test_options_are_checked(http):
    wrong = await http.post(
        "/v1/score/turns", json={"items": [{"messages": TRAJECTORY, "reference": []}], "options": {"assign": "hard"}}
    )
    assert wrong.status_code == 422 and "assign" in wrong.text


async def test_a_request_is_charged_its_calls_and_refused_over_the_work_limit():
    many = [{"function": {"name": "f", "arguments": "{}"}}] * 40
    item = {"messages": [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": many}]}
    body = {"items": [{**item, "reference": [{"name": "f"}] * 40}] * 2}
    async with serve_in_process(Settings(models=[], builtin_rules=True, max_work_per_request=100)) as (_, client):
        over = await client.post("/v1/score/turns", json=body)  # 2 items + 160 calls
        within = await client.post("/v1/score/turns", json={"items": body["items"][:1]})  # 1 + 80
    assert over.status_code == 413 and "over the limit of 100" in over.text
    assert within.status_code == 200 and within.json()["results"][0]["score"] == 1.0
