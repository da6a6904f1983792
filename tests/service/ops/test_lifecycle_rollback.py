"""``POST .../rollback`` (service/ops/lifecycle.py): each call serves again what the last load
or weights call replaced, the way it came; under the model's lock, so two at once undo
two versions; refused when the folder it would read has been saved over since."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from rewardserve.service.settings import Settings
from tests.harness import serve_in_process
from tests.service.ops.lifecycle_setup import ADMIN, IN_PLACE, build_versions, scores_of
from tests.service.ops.lifecycle_setup import two_served as serving_both


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    first, second, _ = build_versions(tmp_path_factory.mktemp("rollback"))
    return first, second


def two_served(first, second, **options) -> Settings:
    return serving_both(first, second, score_cache_size=0, **options)  # the scores after are the weights'


async def admin(http, call: str, expect: int = 200, **body) -> dict:
    answer = await http.post(f"/v1/admin/models/rm/{call}", json=body, headers=ADMIN)
    assert answer.status_code == expect, answer.text
    return answer.json()


async def test_rollback_undoes_weights_written_in_place_and_loads_alike(checkpoints):
    first, second = checkpoints
    async with serve_in_process(two_served(first, second, **IN_PLACE)) as (_, http):
        v1, other = await scores_of(http, "rm"), await scores_of(http, "other")
        await admin(http, "load", source=str(second), version="v2")
        written = await admin(http, "weights", path=str(first), version="v3")
        assert written["weights_update"] == "in place"
        assert await scores_of(http, "rm") == pytest.approx(v1, abs=1e-4)

        back = await admin(http, "rollback")  # v3 -> v2: written back in place
        assert back["version"] == "v2" and back["weights_update"] == "in place" and back["source"] == str(second)
        assert await scores_of(http, "rm") == pytest.approx(other, abs=1e-4)
        back = await admin(http, "rollback")  # v2 -> v1: loaded beside
        assert back["version"] == "v1"
        assert await scores_of(http, "rm") == pytest.approx(v1, abs=1e-4)
        nothing = await admin(http, "rollback", expect=422)
        assert "no earlier version" in nothing["error"]["message"]


async def test_weights_given_asleep_and_loaded_beside_roll_back_one_by_one(checkpoints):
    """Packed linears (weights load beside), weights given at level-2 sleep: each rollback
    undoes one call, and the history ends."""
    first, second = checkpoints
    async with serve_in_process(two_served(first, second)) as (_, http):
        v1, other = await scores_of(http, "rm"), await scores_of(http, "other")
        await admin(http, "load", source=str(second), version="v2")
        await admin(http, "sleep", level=2)
        assert (await admin(http, "weights", path=str(first), version="v3"))["weights_update"].startswith("on wake")
        await admin(http, "wake_up")
        assert (await admin(http, "rollback"))["version"] == "v2"
        assert await scores_of(http, "rm") == pytest.approx(other, abs=1e-4)
        assert (await admin(http, "rollback"))["version"] == "v1"
        assert await scores_of(http, "rm") == pytest.approx(v1, abs=1e-4)
        await admin(http, "rollback", expect=422)


async def test_two_rollbacks_at_once_undo_two_versions(checkpoints):
    first, second = checkpoints
    async with serve_in_process(two_served(first, second)) as (_, http):
        await admin(http, "load", source=str(second), version="v2")
        await admin(http, "load", source=str(first), version="v3")
        states = await asyncio.gather(admin(http, "rollback"), admin(http, "rollback"))
        assert sorted(s["version"] for s in states) == ["v1", "v2"]
        state = (await http.get("/v1/admin/models/rm", headers=ADMIN)).json()
        assert state["version"] == "v1"
        await admin(http, "rollback", expect=422)


async def test_a_folder_saved_over_since_is_not_rolled_back_to(checkpoints, tmp_path):
    """A trainer saving every step into one folder: rolling back to the first step would read
    the second step's weights under the first step's version. Refused, serving on."""
    first, second = checkpoints
    latest = tmp_path / "latest"
    shutil.copytree(first, latest)
    async with serve_in_process(two_served(first, second, **IN_PLACE)) as (_, http):
        await admin(http, "weights", path=str(latest), version="step-1")
        step1 = await scores_of(http, "rm")
        for name in ("config.json", "model.safetensors"):  # the trainer saves step 2 over it
            (latest / name).write_bytes((second / name).read_bytes())
        await admin(http, "weights", path=str(latest), version="step-2")
        refused = await admin(http, "rollback", expect=422)
        assert "has changed since version 'step-1'" in refused["error"]["message"]
        assert "'step-2' serves on" in refused["error"]["message"]
        assert await scores_of(http, "rm") == pytest.approx(await scores_of(http, "other"), abs=1e-4)
        assert step1 != pytest.approx(await scores_of(http, "rm"), abs=1e-3)
