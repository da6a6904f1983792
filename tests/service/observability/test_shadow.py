"""Shadow scoring through the real service, in process: a twin candidate agrees exactly,
another model's agreement is what the test computes itself, a failing candidate changes
no answer, and the share of requests shadowed is the one asked for."""

from __future__ import annotations

import asyncio
import math
import shutil

import pytest
import pytest_asyncio

from rewardserve.engine.registry import ModelRegistry
from rewardserve.models.errors import StartupError
from rewardserve.models.kinds import build_checked
from rewardserve.models.spec import ModelSpec
from rewardserve.service.observability.metrics import Metrics
from rewardserve.service.settings import Settings
from tests.harness import metric


@pytest.fixture(scope="module")
def broken_rm(qwen3_rm, tmp_path_factory):
    out = tmp_path_factory.mktemp("broken_shadow")
    shutil.copytree(qwen3_rm, out, dirs_exist_ok=True)
    (out / "model.safetensors").write_bytes((out / "model.safetensors").read_bytes()[:1000])
    return out


@pytest_asyncio.fixture(scope="module")
async def service(qwen3_rm, llama_rm, broken_rm):
    from tests.harness import serve_in_process

    settings = Settings(
        keep_going=True,
        builtin_rules=False,
        models=[
            ModelSpec(name="rm", source=str(qwen3_rm), shadow={"model": "twin", "fraction": 1.0}),
            ModelSpec(name="twin", source=str(qwen3_rm)),
            ModelSpec(name="halved", source=str(qwen3_rm), shadow={"model": "other", "fraction": 0.5}),
            ModelSpec(name="other", source=str(llama_rm)),
            ModelSpec(name="guarded", source=str(qwen3_rm), shadow={"model": "broken", "fraction": 1.0}),
            ModelSpec(name="broken", source=str(broken_rm)),
        ],
    )
    async with serve_in_process(settings) as (app, http):
        yield app, http


def group(tag: str, n: int = 6) -> list[dict]:
    return [
        {"prompt": f"Question {tag}?", "response": f"Answer {k} to {tag}, with {k * 7} words.", "group_id": tag}
        for k in range(n)
    ]


async def score(http, model, items):
    response = await http.post("/v1/score", json={"model": model, "items": items})
    assert response.status_code == 200, response.text
    return response.json()


async def report_after(http, model, requests, timeout=60.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        out = (await http.get(f"/v1/models/{model}/shadow")).json()
        if out["requests"] + out["failed"] + out["skipped"] >= requests:
            return out
        assert asyncio.get_running_loop().time() < deadline, out
        await asyncio.sleep(0.1)


def ranks(values):
    ordered = sorted(values)
    return [sum(i + 1 for i, v in enumerate(ordered) if v == x) / ordered.count(x) for x in values]


def pearson(a, b):
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    return cov / math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))


async def test_a_twin_candidate_agrees_exactly(service):
    app, http = service
    for tag in ("a", "b", "c"):
        await score(http, "rm", group(tag))
    report = await report_after(http, "rm", 3)
    assert report["candidate"] == "twin" and report["requests"] == 3 and report["items"] == 18
    assert report["spearman"] == pytest.approx(1.0) and report["groups"] == 3
    assert report["best_changed"] == 0.0 and report["sign_flips"] == 0.0
    metrics = (await http.get("/metrics")).text
    assert metric(metrics, "rewardserve_shadow_spearman", model="rm", candidate="twin") == pytest.approx(1.0)
    assert metric(metrics, "rewardserve_shadow_items_total", model="rm", candidate="twin") == 18


async def test_another_model_s_agreement_is_what_we_compute(service):
    _, http = service
    batches = [group(tag) for tag in ("p", "q", "r", "s")]
    for batch in batches:
        await score(http, "halved", batch)
    report = await report_after(http, "halved", 2)
    assert report["requests"] == 2  # half of 4: the 2nd and the 4th
    shadowed = batches[1] + batches[3]
    ours = [r["score"] for r in (await score(http, "twin", shadowed))["results"]]
    theirs = [r["score"] for r in (await score(http, "other", shadowed))["results"]]
    assert report["spearman"] == pytest.approx(pearson(ranks(ours), ranks(theirs)), abs=0.02)
    flips = best = 0
    for at in (0, 6):
        o, t = ours[at : at + 6], theirs[at : at + 6]
        best += o.index(max(o)) != t.index(max(t))
        mo, mt = sum(o) / 6, sum(t) / 6
        flips += sum((x > mo) != (y > mt) for x, y in zip(o, t))
    assert report["best_changed"] == pytest.approx(best / 2)
    assert report["sign_flips"] == pytest.approx(flips / 12)


async def test_a_failing_candidate_changes_no_answer(service):
    _, http = service
    items = group("z")
    guarded = await score(http, "guarded", items)
    plain = await score(http, "twin", items)
    assert [r["score"] for r in guarded["results"]] == [r["score"] for r in plain["results"]]
    report = await report_after(http, "guarded", 1)
    assert report["failed"] == 1 and report["requests"] == 0 and report["spearman"] is None


async def test_a_model_without_a_shadow_has_no_report(service):
    _, http = service
    response = await http.get("/v1/models/twin/shadow")
    assert response.status_code == 404 and "no shadow" in response.json()["error"]["message"]


def test_a_shadow_that_is_not_served_stops_the_start():
    specs = [ModelSpec(name="rm", kind="rule", source="exact_match", shadow={"model": "nobody", "fraction": 0.1})]
    with pytest.raises(StartupError, match="its shadow 'nobody' must be another served model"):
        ModelRegistry(specs, Metrics(), build_checked, keep_going=False)
