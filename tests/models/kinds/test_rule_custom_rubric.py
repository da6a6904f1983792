"""A rubric criterion's ``fn: "my_rewards:length_bonus"`` and a rule model's
``module:function`` through the HTTP service in process: the same scores as calling the
function directly; a criterion naming any function the service does not serve is a 422
naming the criterion, and nothing is imported for it."""

from __future__ import annotations

import importlib
import sys

import pytest

from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.harness import post, serve_in_process

pytestmark = pytest.mark.alone  # the rule pool's time limits

SOURCE = """
def length_bonus(prompts, completions, reference, **columns):
    topics = columns.get("topic", [None] * len(completions))
    return [
        len(c) / 10 + (1.0 if c == r else 0.0) + (0.5 if t == "math" else 0.0) + (0.25 if p else 0.0)
        for p, c, r, t in zip(prompts, completions, reference, topics)
    ]


def fussy(prompts, completions, **columns):
    if completions[0] == "bad":
        raise ValueError("bad completion")
    return [1.0]
"""

ITEMS = [
    {"prompt": "2+2?", "response": "4", "reference": "4", "metadata": {"topic": "math"}},
    {"prompt": "2+2?", "response": "four", "reference": "4", "metadata": {"topic": "words"}},
    {"response": "a longer answer", "reference": "x", "metadata": {"topic": "math"}},
]


def direct_scores(directory):
    sys.path.insert(0, str(directory))
    try:
        fn = importlib.import_module("my_rewards").length_bonus
    finally:
        sys.path.remove(str(directory))
    return fn(
        [i.get("prompt") for i in ITEMS],
        [i["response"] for i in ITEMS],
        reference=[i["reference"] for i in ITEMS],
        topic=[i["metadata"]["topic"] for i in ITEMS],
    )


async def test_module_functions_through_the_service(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(SOURCE)
    monkeypatch.chdir(tmp_path)  # the served functions are imported from here
    settings = Settings(
        models=[
            ModelSpec(name="mine", kind="rule", source="my_rewards:length_bonus"),
            ModelSpec(name="fussy", kind="rule", source="my_rewards:fussy"),
        ],
        builtin_rules=False,
        rule_workers=2,
        rule_timeout_s=2.0,
    )
    direct = direct_scores(tmp_path)
    async with serve_in_process(settings) as (_, http):
        criteria = [{"name": "length", "fn": "my_rewards:length_bonus"}]
        out = await post(http, "/v1/rubric", {"items": ITEMS, "criteria": criteria})
        assert [r["criteria"][0]["score"] for r in out["results"]] == pytest.approx(direct)
        assert [r["score"] for r in out["results"]] == pytest.approx(direct)

        scored = await post(http, "/v1/score", {"model": "mine", "items": ITEMS})
        assert [r["score"] for r in scored["results"]] == pytest.approx(direct)

        # A raising function: only its item is invalid, with the function's error.
        fussy = [{"name": "fussy", "fn": "my_rewards:fussy"}]
        items = [{"response": "good"}, {"response": "bad"}]
        first, second = (await post(http, "/v1/rubric", {"items": items, "criteria": fussy}))["results"]
        assert first["valid"] is not False and first["score"] == 1.0
        assert second["valid"] is False and "ValueError: bad completion" in second["criteria"][0]["error"]

        (tmp_path / "side_effect.py").write_text("open('imported', 'w').close()\ndef f(p, c, **k):\n    return [1.0]\n")
        for fn in ("my_rewards:nope", "no_such_rewards:f", "os:system", "side_effect:f"):
            bad = {"items": ITEMS, "criteria": [{"name": "mine", "fn": fn}]}
            error = (await post(http, "/v1/rubric", bad, 422))["error"]
            assert error["param"] == "criteria[0].fn"
            assert error["message"].startswith(f"criterion 'mine': '{fn}' is not a reward function this service serves")
        assert not (tmp_path / "imported").exists()  # a request never chooses a module to import
