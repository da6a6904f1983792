"""The registry runs every torch-on-CPU model's load, probe and batches on one thread
(OpenMP's teams per calling thread slow a CPU forward down: engine/registry.py)."""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict

from rewardserve.models.kinds.outcome import OutcomeModel
from rewardserve.models.kinds.process import ProcessModel
from rewardserve.models.kinds.rule import RuleModel
from rewardserve.models.reward_model import RewardModel
from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.harness import serve_in_process


def record_threads(monkeypatch, classes) -> dict:
    """{(model name, step): thread names}: where each model's load, probe and run ran."""
    seen: dict = defaultdict(set)
    for cls in classes:
        for step in ("load", "probe", "run"):
            original = getattr(cls, step)

            def wrapper(self, *args, _original=original, _step=step, **kwargs):
                seen[(self.name, _step)].add(threading.current_thread().name)
                return _original(self, *args, **kwargs)

            monkeypatch.setattr(cls, step, wrapper)
    return seen


async def test_cpu_models_share_one_compute_thread(monkeypatch, qwen3_rm, qwen2_prm):
    seen = record_threads(monkeypatch, (OutcomeModel, ProcessModel, RuleModel))
    settings = Settings(
        models=[
            ModelSpec(name="rm", source=str(qwen3_rm)),
            ModelSpec(name="prm", source=str(qwen2_prm)),
            ModelSpec(name="exact", kind="rule", source="exact_match"),
        ],
        builtin_rules=False,
    )
    async with serve_in_process(settings) as (app, http):
        models = {s.model.name: s.model for s in app.state.svc.registry}
        assert models["rm"].torch_on_cpu and models["prm"].torch_on_cpu
        assert not models["exact"].torch_on_cpu
        item = {"prompt": "What is 2+2?", "response": "4", "reference": "4"}
        responses = await asyncio.gather(
            http.post("/v1/score", json={"model": "rm", "items": [item] * 3}),
            http.post("/v1/score/steps", json={"model": "prm", "items": [{"prompt": "2+2?", "steps": ["2+2", "4"]}]}),
            http.post("/v1/score", json={"model": "exact", "items": [item]}),
        )
        assert [r.status_code for r in responses] == [200, 200, 200], [r.text for r in responses]
    torch_threads = set().union(*(seen[(name, step)] for name in ("rm", "prm") for step in ("load", "probe", "run")))
    assert len(torch_threads) == 1, seen
    (compute,) = torch_threads
    assert compute.startswith("rs-cpu")
    # A rule model's items are rule-pool calls: nothing of it runs on the compute thread.
    assert not seen[("exact", "run")]


def test_torch_on_cpu_follows_backend_and_device():
    def model(**spec) -> RewardModel:
        return OutcomeModel(ModelSpec(name="m", source="unused", **spec))

    assert model().torch_on_cpu  # no GPU here: auto is the CPU
    assert model(device="cpu", backend="transformers").torch_on_cpu
    assert not model(backend="vllm").torch_on_cpu  # its engine computes in a process of its own


async def test_a_request_holding_a_model_holds_it_again_while_a_write_waits():
    """A part of a request's plan on the model the request holds already is held at once
    (waiting for the write would wait for itself); another request waits for the write.
    The hold gives the model object to plan with."""
    import contextvars

    from prometheus_client import CollectorRegistry

    from rewardserve.engine.metrics import EngineMetrics
    from rewardserve.engine.registry import ModelRegistry
    from rewardserve.models.kinds import build_checked

    registry = ModelRegistry(
        [ModelSpec(name="rm", kind="rule", source="exact_match")], EngineMetrics(CollectorRegistry()), build_checked
    )
    (served,) = registry
    entered: list[str] = []

    async def other_request() -> None:
        async with registry.hold(served):
            entered.append("other")

    async with registry.hold(served) as model:
        assert model is served.model
        served.resumed.clear()  # a write began: it waits for this request
        async with asyncio.timeout(5), registry.hold(served):
            entered.append("again")
            assert served.in_flight == 2
        other = asyncio.get_running_loop().create_task(other_request(), context=contextvars.Context())
        await asyncio.sleep(0.05)
        assert entered == ["again"] and not other.done()
    assert served.idle.is_set()
    served.resumed.set()  # the write is done
    await asyncio.wait_for(other, 5)
    assert entered == ["again", "other"] and served.in_flight == 0


async def test_a_sleeping_model_without_a_waker_is_refused_with_its_type():
    """Asleep and not woken on a request: model_asleep with a retry time (the service
    answers it 503 with retry-after); the refusal is counted."""
    import pytest
    from prometheus_client import CollectorRegistry

    from rewardserve.engine.metrics import EngineMetrics
    from rewardserve.engine.registry import ModelRegistry
    from rewardserve.models.errors import ModelAsleep
    from rewardserve.models.kinds import build_checked

    metrics = EngineMetrics(CollectorRegistry())
    registry = ModelRegistry([ModelSpec(name="rm", kind="rule", source="exact_match")], metrics, build_checked)
    (served,) = registry
    served.state, served.sleep_level = "sleeping", 1
    with pytest.raises(ModelAsleep) as refused:
        async with registry.hold(served):
            pass
    assert refused.value.type == "model_asleep" and refused.value.retry_after_s == 1
    assert metrics.rejected.labels("rm", "asleep")._value.get() == 1
    assert served.in_flight == 0
