"""Tenants: keys to tenants checked at start, weighted fair queueing in the batcher
(shares by weight, a light tenant's work ahead of a flood), per-tenant limits and
metrics a tenant's key cannot see past, through the real service in process."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable

import httpx
import pytest

from rewardserve.engine.batcher import Batcher
from rewardserve.engine.errors import QueueFull, TenantQueueFull
from rewardserve.engine.scope import RequestScope
from rewardserve.engine.tenants import Tenants, TenantSpec, load_tenants
from rewardserve.models.batch_policy import BatchPolicy
from rewardserve.models.plan import Unit
from rewardserve.models.spec import ModelSpec
from rewardserve.service.observability.metrics import Metrics
from rewardserve.service.settings import Settings
from tests.harness import metric


def tenants(**weights) -> Tenants:
    return Tenants([TenantSpec(name=n, keys=[f"key-{n}"], weight=w) for n, w in weights.items()], Metrics())


def units(tenant: str, n: int, length: int = 10) -> list[Unit]:
    scope = RequestScope(tenant=tenant)
    return [Unit(length, (tenant, k), scope=scope) for k in range(n)]


def two_tenant_batcher(
    batches: list[list[str]], tokens_per_s: float, batch_ms: float, short_when_shared: bool
) -> Batcher:
    """A started batcher for tenants a and b (2,000-token batches) whose model takes
    ``1 / tokens_per_s`` s a token and records each batch's tenants in ``batches``."""

    def run(batch):
        batches.append([u.payload[0] for u in batch])
        time.sleep(sum(u.length for u in batch) / tokens_per_s)
        return [[None] for _ in batch]

    table = Tenants([TenantSpec(name=n, keys=[f"key-{n}"]) for n in "ab"], Metrics(), batch_ms=batch_ms)
    policy = BatchPolicy(
        max_batch_tokens=2000, max_wait_ms=0, max_queue_tokens=10**6, pads=False, short_when_shared=short_when_shared
    )
    batcher = Batcher("m", run, policy, Metrics(), tenants=table)
    batcher.start()
    return batcher


async def test_saturating_tenants_are_served_by_weight():
    served: list[str] = []

    def run(batch):
        served.extend(u.payload[0] for u in batch)
        time.sleep(0.002)
        return [[None] for _ in batch]

    policy = BatchPolicy(max_batch_tokens=40, max_wait_ms=0, max_queue_tokens=10**6, pads=False)
    batcher = Batcher("m", run, policy, Metrics(), tenants=tenants(a=3.0, b=1.0))
    batcher.start()
    futures = batcher.submit(units("a", 1200), None) + batcher.submit(units("b", 1200), None)
    await asyncio.sleep(0.5)
    while len(served) < 800:  # both still saturating: neither queue runs dry before this
        await asyncio.sleep(0.01)
    first = served[:800]
    share = first.count("a") / first.count("b")
    assert share == pytest.approx(3.0, rel=0.1)
    await asyncio.gather(*futures)
    await batcher.stop()


async def test_a_light_tenant_goes_ahead_of_a_flood():
    order: list[str] = []

    def run(batch):
        order.extend(u.payload[0] for u in batch)
        return [[None] for _ in batch]

    policy = BatchPolicy(max_batch_tokens=40, max_wait_ms=0, max_queue_tokens=10**6, pads=False)
    batcher = Batcher("m", run, policy, Metrics(), tenants=tenants(a=1.0, b=1.0))
    flood = batcher.submit(units("a", 400), None)
    light = batcher.submit(units("b", 2), None)
    batcher.start()
    await asyncio.gather(*light)
    # b's two items went out with the first batches, not after a's 400.
    assert max(i for i, t in enumerate(order) if t == "b") < 12
    await asyncio.gather(*flood)
    await batcher.stop()


@pytest.mark.parametrize("short", [True, False], ids=["cpu", "gpu"])
async def test_batches_shrink_to_batch_ms_while_two_tenants_use_the_model(monkeypatch, short):
    """One tenant alone: full batches. Both: about batch_ms of compute each (at the rate
    measured), the light tenant's batch its own work only. The other idle again: full.
    A policy without ``short_when_shared`` (a GPU's) keeps full batches throughout."""
    import rewardserve.engine.tenants as tenants_module

    monkeypatch.setattr(tenants_module, "ACTIVE_S", 0.5)
    batches: list[list[str]] = []
    batcher = two_tenant_batcher(batches, tokens_per_s=100_000, batch_ms=3, short_when_shared=short)
    flood = batcher.submit(units("a", 1500, length=100), None)
    while len(batches) < 3:
        await asyncio.sleep(0.005)
    light = batcher.submit(units("b", 1, length=100), None)
    await asyncio.gather(*light)
    shared_from = len(batches)
    while len(batches) < shared_from + 4:
        await asyncio.sleep(0.005)
    assert batches[:2] == [["a"] * 20] * 2
    if short:
        assert ["b"] in batches
        assert all(1 <= len(b) <= 4 for b in batches[shared_from : shared_from + 4]), batches
    else:
        assert all(len(b) == 20 for b in batches[shared_from : shared_from + 4]), batches
        assert any("b" in b and len(b) == 20 for b in batches)
    await asyncio.sleep(0.6)  # b idle past ACTIVE_S
    alone_from = len(batches)
    while len(batches) < alone_from + 2:
        await asyncio.sleep(0.005)
    assert len(batches[alone_from + 1]) == 20, batches[alone_from:]
    await asyncio.gather(*flood)
    await batcher.stop()


async def test_shared_batches_hold_one_tenant_s_work_when_batch_ms_is_above_the_budget():
    """A model fast enough that batch_ms of compute is over its token budget: batches keep
    the full budget while both tenants use it, but the light tenant's batch is its own
    item alone, not filled up with the flood's (its wait is one batch of the flood's, not two)."""
    batches: list[list[str]] = []
    batcher = two_tenant_batcher(batches, tokens_per_s=1_000_000, batch_ms=10_000, short_when_shared=True)
    flood = batcher.submit(units("a", 600, length=100), None)
    while len(batches) < 3:
        await asyncio.sleep(0.002)
    await asyncio.gather(*batcher.submit(units("b", 1, length=100), None))
    assert ["b"] in batches
    after_b = batches.index(["b"]) + 1
    while len(batches) < after_b + 3:
        await asyncio.sleep(0.002)
    assert batches[after_b : after_b + 3] == [["a"] * 20] * 3
    await asyncio.gather(*flood)
    await batcher.stop()


def layered_batcher(events: list[str], preemptible: bool = True) -> Batcher:
    """Tenants a and b on a model of 8 layers of 10 ms, each logged as tenant + layer."""
    from rewardserve.models.backends.layer_boundaries import layer_boundary, run_between_layers

    def run(batch):
        who = batch[0].payload[0]
        for layer in range(8):
            layer_boundary()
            events.append(f"{who}{layer}")
            time.sleep(0.01)
        return [[unit.payload] for unit in batch]

    table = Tenants([TenantSpec(name=n, keys=[f"key-{n}"]) for n in "ab"], Metrics())
    policy = BatchPolicy(
        max_batch_tokens=2000, max_wait_ms=0, pads=False, short_when_shared=True, preemptible=preemptible
    )
    # The model's between_layers, as a backend that marks its layers gives it.
    batcher = Batcher("m", run, policy, Metrics(), tenants=table, between_layers=run_between_layers)
    batcher.start()
    return batcher


@pytest.mark.parametrize("preemptible", [True, False])
async def test_a_light_tenant_s_batch_runs_between_layers_of_a_flood_s_batch(preemptible):
    """A model whose forward passes layer boundaries: b's item, sent while a's batch is in
    flight, runs whole at the next boundary (a's batch then goes on), and every unit gets
    its own output. Without the capability it waits for a's whole batch."""
    events: list[str] = []
    batcher = layered_batcher(events, preemptible)
    flood = batcher.submit(units("a", 20), None)
    while "a1" not in events:
        await asyncio.sleep(0.001)
    (light,) = batcher.submit(units("b", 1), None)
    outcomes = await asyncio.gather(*flood, light)
    assert [o.result for o in outcomes] == [[("a", k)] for k in range(20)] + [[("b", 0)]]
    if preemptible:
        at = events.index("b0")
        assert events[at - 1] in ("a1", "a2"), events  # the next boundary after b was sent
        assert events[at : at + 8] == [f"b{k}" for k in range(8)]  # whole, not itself interrupted
        assert events.index("a7") > at + 7
    else:
        assert events.index("b0") > events.index("a7")
    await batcher.stop()


async def test_a_flood_s_batch_never_runs_inside_a_light_tenant_s_short_one():
    """b's one-item batch is in flight when a's flood comes: a's batch waits for it rather
    than b waiting for a's whole batch between two of its own layers."""
    events: list[str] = []
    batcher = layered_batcher(events)
    (light,) = batcher.submit(units("b", 1), None)
    while "b1" not in events:
        await asyncio.sleep(0.001)
    flood = batcher.submit(units("a", 20), None)
    await asyncio.gather(light, *flood)
    assert events[:8] == [f"b{k}" for k in range(8)], events
    await batcher.stop()


async def test_light_work_sent_while_other_light_work_waits_for_a_boundary_goes_at_the_next_one():
    """Two of b's items sent one after the other while a's batch is in flight: the first
    is posted for the next layer boundary, the second (queued while the first waited) at
    the boundary after it, not after a's whole batch."""
    events: list[str] = []
    batcher = layered_batcher(events)
    flood = batcher.submit(units("a", 20), None)
    while "a1" not in events:
        await asyncio.sleep(0.001)
    first = batcher.submit(units("b", 1), None)
    second = batcher.submit(units("b", 1), None)
    await asyncio.gather(*flood, *first, *second)
    a_end = events.index("a7")
    assert events.count("b0") == 2 and all(events.index(f"b{k}") < a_end for k in range(8)), events
    assert len([e for e in events[:a_end] if e.startswith("b")]) == 16, events
    await batcher.stop()


async def test_work_posted_for_a_boundary_that_never_comes_is_answered_at_stop():
    """b's batch is posted after a's batch passed its last layer boundary; the service then
    stops: b gets an error, not a wait forever."""
    from rewardserve.models.backends.layer_boundaries import layer_boundary, run_between_layers
    from rewardserve.models.errors import NotReady

    def run(batch):
        layer_boundary()
        time.sleep(0.2)
        return [[None] for _ in batch]

    table = Tenants([TenantSpec(name=n, keys=[f"key-{n}"]) for n in "ab"], Metrics())
    policy = BatchPolicy(max_wait_ms=0, pads=False, short_when_shared=True, preemptible=True)
    batcher = Batcher("m", run, policy, Metrics(), tenants=table, between_layers=run_between_layers)
    batcher.start()
    flood = batcher.submit(units("a", 3), None)
    await asyncio.sleep(0.05)
    (light,) = batcher.submit(units("b", 1), None)
    await batcher.stop()
    await asyncio.gather(*flood)
    with pytest.raises(NotReady):
        await asyncio.wait_for(light, 5)


async def test_a_tenant_over_its_queue_limit_is_refused_alone():
    table = Tenants(
        [TenantSpec(name="a", keys=["ka"], max_queued_tokens=100), TenantSpec(name="b", keys=["kb"])], Metrics()
    )
    policy = BatchPolicy(max_batch_tokens=40, max_wait_ms=0, max_queue_tokens=10**6, pads=False)
    batcher = Batcher("m", lambda batch: [[None] for _ in batch], policy, Metrics(), tenants=table)
    batcher.submit(units("a", 10), None)  # 100 tokens: at the limit
    with pytest.raises(TenantQueueFull) as refused:
        batcher.submit(units("a", 1), None)
    assert "tenant 'a'" in refused.value.message and refused.value.retry_after_s >= 1
    assert refused.value.type == "overloaded"
    batcher.submit(units("b", 50), None)  # the other tenant is still taken
    await batcher.stop()


async def test_a_flood_that_filled_the_model_s_queue_leaves_the_others_their_share_of_it():
    """No tenant limits: a's flood fills the model's whole queue; b still gets in, up to
    its weighted share (1/4 at weights 3:1), and the queue never holds over twice its size."""
    policy = BatchPolicy(max_batch_tokens=40, max_wait_ms=0, max_queue_tokens=1000, pads=False)
    batcher = Batcher("m", lambda batch: [[None] for _ in batch], policy, Metrics(), tenants=tenants(a=3.0, b=1.0))
    batcher.submit(units("a", 100), None)  # 1,000 tokens: the queue is full (not started: nothing runs)
    with pytest.raises(QueueFull):
        batcher.submit(units("a", 1), None)
    batcher.submit(units("b", 25), None)  # b's share: 1,000 x 1/4
    with pytest.raises(QueueFull):
        batcher.submit(units("b", 1), None)
    with pytest.raises(QueueFull):  # the flood does not get in behind b either
        batcher.submit(units("a", 1), None)
    assert batcher.pending_items == 125
    await batcher.stop()


async def test_without_tenants_a_full_queue_refuses_everyone():
    policy = BatchPolicy(max_batch_tokens=40, max_wait_ms=0, max_queue_tokens=1000, pads=False)
    batcher = Batcher("m", lambda batch: [[None] for _ in batch], policy, Metrics())
    batcher.submit(units("a", 100), None)
    with pytest.raises(QueueFull):
        batcher.submit(units("b", 1), None)
    await batcher.stop()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tenants:\n  - {name: a, keys: [k1]}\n  - {name: b, keys: [k1]}\n", "two tenants: 'a' and 'b'"),
        ("tenants:\n  - {name: a, keys: [k1], weight: -1}\n", "tenants[0].weight: Input should be greater than 0"),
        ("tenants:\n  - {name: a, keys: [k1], wieght: 2}\n", "tenants[0].wieght: Extra inputs are not permitted"),
        ("tenants:\n  - {name: a, keys: [k1]}\nmodels: []\n", "a tenants file holds 'tenants:' only"),
    ],
)
def test_a_bad_tenants_file_stops_the_start_saying_why(tmp_path, monkeypatch, capsys, text, message):
    path = tmp_path / "tenants.yaml"
    path.write_text(text)
    from rewardserve.cli.main import main

    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Tenants(load_tenants(path), Metrics())
    monkeypatch.setenv("REWARDSERVE_TENANTS_FILE", str(path))
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--no-builtin-rules", "--model", "r=exact_match:rule", "--port", "0"])
    assert exited.value.code == 2 and message in capsys.readouterr().err


@pytest.fixture
async def service(tmp_path, qwen3_rm):
    from tests.harness import serve_in_process

    path = tmp_path / "tenants.yaml"
    path.write_text(
        "tenants:\n"
        "  - {name: team-a, keys: [key-a], items_per_second: 5}\n"
        "  - {name: team-b, keys: [key-b], weight: 2}\n"
    )
    settings = Settings(
        tenants_file=path,
        api_keys=["admin"],
        models=[ModelSpec(name="echo", kind="rule", source="exact_match"), ModelSpec(name="rm", source=str(qwen3_rm))],
        builtin_rules=False,
    )
    async with serve_in_process(settings) as (app, http):
        yield http


def body(n: int) -> dict:
    return {"model": "echo", "items": [{"response": "x", "reference": "x"}] * n}


async def test_items_per_second_refuses_one_tenant_and_serves_the_other(service):
    http: httpx.AsyncClient = service
    a, b = {"authorization": "Bearer key-a"}, {"authorization": "Bearer key-b"}
    assert (await http.post("/v1/score", json=body(5), headers=a)).status_code == 200
    over = await http.post("/v1/score", json=body(5), headers=a)
    assert over.status_code == 429 and int(over.headers["retry-after"]) >= 1
    assert "team-a" in over.json()["error"]["message"]
    for _ in range(5):  # in the same second, the other tenant is served every time
        assert (await http.post("/v1/score", json=body(5), headers=b)).status_code == 200
    assert (await http.post("/v1/score", json=body(1))).status_code == 401


async def test_each_tenant_is_charged_its_tokens_share_of_the_model_s_time(service):
    http: httpx.AsyncClient = service
    for key, n in (("key-a", 2), ("key-b", 5)):  # items of their own: none answered from the cache
        items = [{"response": f"{key} {i}", "reference": "x"} for i in range(n)]
        for model in ("rm", "echo"):
            sent = await http.post(
                "/v1/score", json={"model": model, "items": items}, headers={"authorization": f"Bearer {key}"}
            )
            assert sent.status_code == 200
    text = (await http.get("/metrics", headers={"authorization": "Bearer admin"})).text
    charged = {t: metric(text, "rewardserve_tenant_model_seconds_total", tenant=t) for t in ("team-a", "team-b")}
    assert all(seconds > 0 for seconds in charged.values()), charged
    assert sum(charged.values()) == pytest.approx(metric(text, "rewardserve_forward_duration_seconds_sum"))
    # A rule model's items are rule-pool calls: their worker time is charged too.
    assert all(metric(text, "rewardserve_tenant_rule_seconds_total", tenant=t) > 0 for t in ("team-a", "team-b"))
    # One scheduler gave each its turns at the gate, at the model and at the rule pool,
    # charged in each resource's unit: the tokens queued, the rule seconds billed.
    for t in ("team-a", "team-b"):
        scheduled = {
            r: metric(text, "rewardserve_tenant_scheduled_work_total", tenant=t, resource=r)
            for r in ("gate", "forward", "rules")
        }
        assert scheduled["gate"] >= 2, scheduled  # two requests' parse and plan steps at least
        assert scheduled["forward"] == metric(text, "rewardserve_tenant_tokens_total", tenant=t)
        assert scheduled["rules"] == pytest.approx(metric(text, "rewardserve_tenant_rule_seconds_total", tenant=t))


async def test_a_tenant_sees_its_own_metrics_only(service):
    http: httpx.AsyncClient = service
    for key in ("key-a", "key-b"):
        await http.post("/v1/score", json=body(1), headers={"authorization": f"Bearer {key}"})
    as_a = (await http.get("/metrics", headers={"authorization": "Bearer key-a"})).text
    assert metric(as_a, "rewardserve_tenant_items_total", tenant="team-a") >= 1
    assert 'tenant="team-b"' not in as_a
    as_admin = (await http.get("/metrics", headers={"authorization": "Bearer admin"})).text
    assert 'tenant="team-a"' in as_admin and 'tenant="team-b"' in as_admin


async def test_the_gate_lets_a_light_tenant_in_ahead_of_a_flood_and_loses_no_slot():
    from rewardserve.engine.tenants import FairGate

    gate = FairGate(tenants(a=1.0, b=1.0), slots=1)
    order: list[str] = []
    release = asyncio.Event()

    async def step(tenant: str, hold: bool = False):
        async with gate.slot(tenant):
            order.append(tenant)
            if hold:
                await release.wait()
            await asyncio.sleep(0)

    holder = asyncio.ensure_future(step("a", hold=True))
    await asyncio.sleep(0)
    flood = [asyncio.ensure_future(step("a")) for _ in range(10)]
    await asyncio.sleep(0)
    cancelled = asyncio.ensure_future(step("b"))
    light = asyncio.ensure_future(step("b"))
    await asyncio.sleep(0)
    cancelled.cancel()  # a waiter that gives up takes no slot with it
    release.set()
    await asyncio.gather(holder, light, *flood)
    assert order.index("b") <= 2  # right after the holder (and at most one of a's)
    assert len(order) == 12
    async with gate.slot("a"):  # the slot came back
        pass


@pytest.mark.alone  # it saturates the CPU on purpose: beside other tests, both would crawl
def test_weights_split_a_saturated_model_3_to_1_in_a_real_process(tmp_path):
    """Two tenants, weights 3:1, both keeping 8 requests in flight against one model in a
    real service process: b's share of the items its batches serve is a quarter (within
    10%): 3:1. Measured over a count of items served, never a span of
    wall-clock time: how much a loaded machine serves in a few seconds is the load's
    doing, the split is the scheduler's."""
    import threading

    from tests.builders import build_sequence_classifier, random_text
    from tests.harness import serve_subprocess

    rm = build_sequence_classifier(tmp_path / "rm", hidden=256, layers=4, heads=4, head_dim=64, max_positions=1024)
    tenants_file = tmp_path / "tenants.yaml"
    tenants_file.write_text("tenants:\n  - {name: a, keys: [key-a], weight: 3}\n  - {name: b, keys: [key-b]}\n")
    spec = [{"name": "rm", "source": str(rm), "options": {"score_cache_size": 0}}]
    env = {
        "REWARDSERVE_MODELS": json.dumps(spec),
        "REWARDSERVE_TENANTS_FILE": str(tenants_file),
        "REWARDSERVE_COMPILE": "false",
        "REWARDSERVE_LOG_LEVEL": "warning",
    }
    with serve_subprocess("--no-builtin-rules", env=env) as url:
        stop = threading.Event()

        def caller(key: str, seed: int) -> None:
            rng = random.Random(seed)
            # A loaded machine may take long over a request: a caller that gave up would leave
            # its tenant fewer requests in flight, unsaturated, and its share smaller.
            with httpx.Client(timeout=240, headers={"authorization": f"Bearer {key}"}) as http:
                while not stop.is_set():
                    items = [{"prompt": random_text(rng, 20), "response": random_text(rng, 120)} for _ in range(2)]
                    assert http.post(url + "/v1/score", json={"model": "rm", "items": items}).status_code == 200

        def served() -> dict[str, float]:
            # Each tenant's own view: no key, or another tenant's, sees none of its work.
            return {
                t: metric(
                    httpx.get(url + "/metrics", headers={"authorization": f"Bearer key-{t}"}, timeout=10).text,
                    "rewardserve_tenant_queue_duration_seconds_count",
                    tenant=t,
                )
                for t in ("a", "b")
            }

        threads = [
            threading.Thread(target=caller, args=(key, 10 * k + i), daemon=True)
            for k, key in enumerate(("key-a", "key-b"))
            for i in range(8)
        ]

        def until(enough: Callable[[dict[str, float]], bool]) -> dict[str, float]:
            # Polled until enough was served; the bound only ends a stalled service's
            # test before pytest's own timeout does.
            give_up = time.monotonic() + 200
            while not enough(now := served()) and time.monotonic() < give_up:
                time.sleep(0.2)
            return now

        for thread in threads:
            thread.start()
        until(lambda now: min(now.values()) >= 32)  # both queues full: each served past its 16 items in flight
        start = served()
        end = until(lambda now: sum(now[t] - start[t] for t in now) >= 160)
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    window = {t: end[t] - start[t] for t in end}
    a, b = window["a"], window["b"]
    assert a + b >= 160, window  # the service went on serving
    assert b / (a + b) == pytest.approx(1 / 4, rel=0.1), window  # a's three to b's one
