"""Kind `ensemble`: served models' scores mixed, with their disagreement, through the real
service in process; members that fail, and escalation to a judge."""

from __future__ import annotations

import math
import shutil
import statistics

import pytest
import pytest_asyncio

from rewardserve.engine.registry import ModelRegistry
from rewardserve.models.errors import StartupError
from rewardserve.models.kinds import build_checked
from rewardserve.models.spec import ModelSpec
from rewardserve.service.observability.metrics import Metrics
from rewardserve.service.settings import Settings
from tests.builders import reference_outcome_scores
from tests.harness import post


@pytest.fixture(scope="module")
def broken_rm(qwen3_rm, tmp_path_factory):
    """A checkpoint whose weights file is cut short: found at start, fails to load."""
    out = tmp_path_factory.mktemp("broken_rm")
    shutil.copytree(qwen3_rm, out, dirs_exist_ok=True)
    weights = out / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    return out


def ensemble(name: str, members: list, **options) -> ModelSpec:
    return ModelSpec(name=name, kind="ensemble", source="ensemble", options={"members": members, **options})


@pytest_asyncio.fixture(scope="module")
async def service(qwen3_rm, llama_rm, judge_lm, broken_rm):
    from tests.harness import serve_in_process

    settings = Settings(
        keep_going=True,
        models=[
            ModelSpec(name="rm", source=str(qwen3_rm)),
            ModelSpec(name="rm2", source=str(llama_rm)),
            ModelSpec(name="judge", kind="verifier", source=str(judge_lm)),
            ModelSpec(name="broken", source=str(broken_rm)),
            ensemble("pair", ["rm", {"name": "rm2", "weight": 3.0}]),
            ensemble("pair_sigmoid", ["rm", "rm2"], normalize="sigmoid"),
            ensemble("with_rule", ["rm", "math"], min_members=1),
            ensemble("strict_rule", ["rm", "math"]),
            ensemble("with_broken", ["rm", "broken"]),
            ensemble(
                "unsure",
                ["rm", "rm2"],
                normalize="sigmoid",
                escalate={"to": "judge", "when": {"uncertainty_above": 0.0}, "max_fraction": 0.25},
            ),
        ],
    )
    async with serve_in_process(settings) as (app, http):
        yield app, http


ITEMS = [{"prompt": "What is 6 times 7?", "response": f"It is {40 + i}.", "reference": "42"} for i in range(4)]


def conversations(items):
    return [
        [{"role": "user", "content": it["prompt"]}, {"role": "assistant", "content": it["response"]}] for it in items
    ]


async def test_the_score_is_the_weighted_mean_and_the_uncertainty_the_spread(service, qwen3_rm, llama_rm):
    _, http = service
    out = await post(http, "/v1/score", {"model": "pair", "items": ITEMS})
    a = [s[0] for s in reference_outcome_scores(qwen3_rm, conversations(ITEMS))]
    b = [s[0] for s in reference_outcome_scores(llama_rm, conversations(ITEMS))]
    for i, result in enumerate(out["results"]):
        assert result["components"] == {"rm": pytest.approx(a[i], abs=1e-4), "rm2": pytest.approx(b[i], abs=1e-4)}
        assert result["score"] == pytest.approx((result["components"]["rm"] + 3 * result["components"]["rm2"]) / 4)
        assert result["uncertainty"] == pytest.approx(statistics.pstdev(result["components"].values()))
    alone = await post(http, "/v1/score", {"model": "rm", "items": ITEMS})
    assert [r["components"]["rm"] for r in out["results"]] == pytest.approx(
        [r["score"] for r in alone["results"]], abs=1e-5
    )
    sig = await post(http, "/v1/score", {"model": "pair_sigmoid", "items": ITEMS})
    for i, result in enumerate(sig["results"]):
        assert result["components"]["rm"] == pytest.approx(1 / (1 + math.exp(-a[i])), abs=1e-4)


async def test_compare_and_group_advantages_work_on_an_ensemble(service):
    _, http = service
    out = await post(
        http,
        "/v1/compare",
        {"model": "pair", "items": [{"prompt": ITEMS[0]["prompt"], "responses": [it["response"] for it in ITEMS[:3]]}]},
    )
    scored = await post(http, "/v1/score", {"model": "pair", "items": ITEMS[:3]})
    (result,) = out["results"]
    scores = [r["score"] for r in scored["results"]]
    assert result["scores"] == pytest.approx(scores, abs=1e-5)
    assert result["preference"][0][1] == pytest.approx(1 / (1 + math.exp(scores[1] - scores[0])), abs=1e-5)
    grouped = await post(
        http,
        "/v1/score",
        {"model": "pair", "options": {"normalize": "group"}, "items": [dict(it, group_id="g") for it in ITEMS]},
    )
    advantages = [r["advantage"] for r in grouped["results"]]
    assert sum(advantages) == pytest.approx(0.0, abs=1e-6)


async def test_an_invalid_member_fails_the_item_unless_min_members_allows(service):
    _, http = service
    no_reference = [{"prompt": "Hi", "response": "Hello"}]
    strict = await post(http, "/v1/score", {"model": "strict_rule", "items": no_reference})
    (item,) = strict["results"]
    assert item["valid"] is False and item["score"] is None
    assert "1 of 2 members" in item["error"] and "model 'math'" in item["error"]
    lenient = await post(http, "/v1/score", {"model": "with_rule", "items": no_reference})
    (item,) = lenient["results"]
    assert item["valid"] and item["components"]["math"] is None
    assert item["score"] == pytest.approx(item["components"]["rm"])


async def test_a_member_that_fails_to_load_makes_the_ensemble_not_ready(service):
    _, http = service
    out = await post(http, "/v1/score", {"model": "with_broken", "items": ITEMS[:1]}, status=503)
    assert "needs broken" in out["error"]["message"] and "did not load" in out["error"]["message"]
    cards = {c["id"]: c for c in (await http.get("/v1/models")).json()["data"]}
    assert cards["with_broken"]["ready"] is False and cards["pair"]["ready"] is True


async def test_escalation_never_passes_its_share(service):
    _, http = service
    batch = [dict(ITEMS[i % 4], id=str(i), response=f"{ITEMS[i % 4]['response']} ({i})") for i in range(8)]
    out = await post(http, "/v1/score", {"model": "unsure", "items": batch})
    escalated = [r for r in out["results"] if r["escalated"]]
    assert len(escalated) == 2  # a quarter of 8; every item's members disagree a little
    most = sorted(out["results"], key=lambda r: -r["uncertainty"])[:2]
    assert {r["id"] for r in escalated} == {r["id"] for r in most}
    for r in escalated:
        assert r["escalated"].startswith("uncertainty ") and r["escalated"].endswith("scored by judge")
        assert 0.0 <= r["score"] <= 1.0


def test_an_unknown_member_stops_the_start_naming_it():
    specs = [ensemble("mix", ["rm", "nobody"]), ModelSpec(name="rm", kind="rule", source="exact_match")]
    with pytest.raises(StartupError, match="'mix' needs 'nobody', which is not served here"):
        ModelRegistry(specs, Metrics(), build_checked, keep_going=False)


def test_options_are_checked_at_start():
    from rewardserve.models.kinds import build_model
    from rewardserve.models.options import OptionsError

    with pytest.raises(OptionsError, match="members must differ"):
        build_model(ensemble("mix", ["a", "a"]))
    with pytest.raises(OptionsError, match="min_members 3"):
        build_model(ensemble("mix", ["a", "b"], min_members=3))
    with pytest.raises(OptionsError, match="memebrs"):
        build_model(ModelSpec(name="mix", kind="ensemble", source="e", options={"memebrs": ["a"]}))
