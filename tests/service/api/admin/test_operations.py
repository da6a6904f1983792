"""Admin calls made with ``?async=true`` (service/api/admin_operations.py): a 202 at once, the
model serving on; each call polled by its id, a later call on the same model hiding
nothing; and a call still running at shutdown cancelled and awaited."""

from __future__ import annotations

import asyncio

import pytest

from rewardserve.client import AsyncRewardClient
from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.harness import serve_in_process
from tests.service.ops.lifecycle_setup import ADMIN, ITEMS, SCORER, build_versions, keyed


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return build_versions(tmp_path_factory.mktemp("operations"))


def slow_loads(first, delay_s: float) -> Settings:
    return keyed([ModelSpec(name="rm", source=str(first), version="v1")], fault_load_delay_s=delay_s)


async def version_scoring(http) -> str:
    answer = await http.post("/v1/score", json={"model": "rm", "items": ITEMS}, headers=SCORER)
    assert answer.status_code == 200, answer.text
    return answer.json()["model_version"]


async def test_async_calls_answer_202_and_each_is_polled_by_its_id(checkpoints):
    first, second, broken = checkpoints
    async with serve_in_process(slow_loads(first, 1.0)) as (_, http):
        load = {"source": str(second), "version": "v2"}
        accepted = await http.post("/v1/admin/models/rm/load?async=true", json=load, headers=ADMIN)
        assert accepted.status_code == 202, accepted.text
        operation = accepted.json()["operation"]
        assert operation["operation"] == "load" and operation["status"] == "running" and operation["model"] == "rm"
        assert await version_scoring(http) == "v1"  # serving on while it loads
        # A second call on the same model while the first runs: it waits its turn, and the
        # model's state shows the latest; the first is still found by its id.
        admin = AsyncRewardClient("http://rewardserve", api_key="admin-key", http_client=http).admin
        broken_load = await admin.load("rm", str(broken), "v3-broken", wait=False)
        assert broken_load.operation is not None and broken_load.operation.id != operation["id"]
        done = await admin.settled("rm", timeout_s=120, poll_s=0.1, operation=operation["id"])
        assert done.operation is not None and done.operation.id == operation["id"]
        assert done.operation.status == "succeeded" and done.operation.seconds >= 1.0
        failed = await admin.settled("rm", timeout_s=120, poll_s=0.1, operation=broken_load.operation)
        assert failed.operation is not None and failed.operation.status == "failed"
        assert "did not load" in (failed.operation.error or "") and failed.version == "v2"
        first_again = await admin.operation(operation["id"])  # not hidden by the later call
        assert first_again.status == "succeeded" and first_again.operation == "load"
        assert (await admin.state("rm")).operation.id == broken_load.operation.id  # the latest
        assert await version_scoring(http) == "v2"

        unknown = await http.get("/v1/admin/operations/nope", headers=ADMIN)
        assert unknown.status_code == 404 and "nope" in unknown.text
        tenant = await http.get(f"/v1/admin/operations/{operation['id']}", headers=SCORER)
        assert tenant.status_code == 403
        unknown = await http.post("/v1/admin/models/nope/sleep?async=true", json={"level": 1}, headers=ADMIN)
        assert unknown.status_code == 404
        tenant = await http.post("/v1/admin/models/rm/sleep?async=true", json={"level": 1}, headers=SCORER)
        assert tenant.status_code == 403


async def test_a_call_still_running_at_shutdown_is_cancelled_and_awaited(checkpoints):
    first, second, _ = checkpoints
    async with serve_in_process(slow_loads(first, 2.0)) as (app, http):
        operations = app.state.svc.lifecycle.operations
        load = {"source": str(second), "version": "v2"}
        accepted = await http.post("/v1/admin/models/rm/load?async=true", json=load, headers=ADMIN)
        operation_id = accepted.json()["operation"]["id"]
    # The lifespan has ended: the load was cancelled and its task has ended, not left running.
    record = operations.get(operation_id)
    assert record.status == "cancelled" and "shut down" in (record.error or "")
    assert not operations._tasks


async def test_a_shutdown_waits_for_a_weights_write_before_the_model_closes(checkpoints, monkeypatch):
    """A thread cannot be cancelled: the shutdown waits for a write in flight to end, then
    closes the model, never under it."""
    import time

    from rewardserve.service.ops import weights, weights_update

    first, second, _ = checkpoints
    events: list[str] = []
    write = weights_update.write_or_read_back

    def slow_write(model, weights):
        time.sleep(1.0)
        done = write(model, weights)
        events.append("written")
        return done

    monkeypatch.setattr(weights, "write_or_read_back", slow_write)  # where the weights call writes
    spec = ModelSpec(name="rm", source=str(first), options={"cpu_linear": "torch", "compile_layers": False})
    settings = slow_loads(first, 0.0).model_copy(update={"models": [spec]})
    async with serve_in_process(settings) as (app, http):
        operations = app.state.svc.lifecycle.operations
        close = type(app.state.svc.registry).close

        async def closing(registry):
            events.append("closed")
            await close(registry)

        monkeypatch.setattr(type(app.state.svc.registry), "close", closing)
        body = {"path": str(second), "version": "v2"}
        accepted = await http.post("/v1/admin/models/rm/weights?async=true", json=body, headers=ADMIN)
        operation_id = accepted.json()["operation"]["id"]
        await asyncio.sleep(0.3)  # the write is under way
    assert events == ["written", "closed"]
    assert operations.get(operation_id).status == "cancelled"
