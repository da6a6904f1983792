"""The admin API in process (service/ops/lifecycle.py, service/api/admin/routes.py): who may call
it, sleep at both levels and wake (scores bitwise the same after), a request meeting a
sleeping model (a typed 503, or waking it), a new version loaded beside the serving one,
and a load that fails leaving the old one serving."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.builders import build_sequence_classifier
from tests.harness import serve_in_process
from tests.service.ops.lifecycle_setup import ADMIN, ITEMS, SCORER, build_versions, keyed, scores_of, two_served


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return build_versions(tmp_path_factory.mktemp("versions"))


def settings(first, **spec) -> Settings:
    return keyed([ModelSpec(name="rm", source=str(first), version="v1", **spec)])


async def scores(http) -> tuple[list[float], str | None]:
    answer = await http.post("/v1/score", json={"model": "rm", "items": ITEMS}, headers=SCORER)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    return [r["score"] for r in body["results"]], body["model_version"]


async def test_only_admin_keys_reach_the_admin_api(checkpoints):
    first, _, _ = checkpoints
    async with serve_in_process(settings(first)) as (_, http):
        assert (await http.get("/v1/admin/models/rm")).status_code == 401
        refused = await http.get("/v1/admin/models/rm", headers=SCORER)
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "permission_denied"
        assert "admin key" in refused.json()["error"]["message"]
        assert (await http.get("/v1/admin/models/rm", headers={"authorization": "Bearer nope"})).status_code == 401
        state = (await http.get("/v1/admin/models/rm", headers=ADMIN)).json()
        assert state["state"] == "awake" and state["version"] == "v1" and state["memory_bytes"] > 0
        # An admin key does not score, and a missing model is named.
        assert (await http.post("/v1/score", json={"model": "rm", "items": ITEMS}, headers=ADMIN)).status_code == 401
        missing = await http.post("/v1/admin/models/nope/sleep", json={"level": 1}, headers=ADMIN)
        assert missing.status_code == 404 and "rm" in missing.json()["error"]["message"]
        bad = await http.post("/v1/admin/models/rm/sleep", json={"level": 3}, headers=ADMIN)
        assert bad.status_code == 422
    off = Settings(builtin_rules=False, compile=False, models=[ModelSpec(name="rm", source=str(first))])
    async with serve_in_process(off) as (_, http):
        closed = await http.get("/v1/admin/models/rm", headers=ADMIN)
        assert closed.status_code == 403 and "REWARDSERVE_ADMIN_KEYS" in closed.json()["error"]["message"]


async def test_sleep_and_wake_at_both_levels_give_the_same_scores(checkpoints):
    first, _, _ = checkpoints
    async with serve_in_process(settings(first)) as (_, http):
        before, version = await scores(http)
        assert version == "v1"
        for level in (1, 2):
            asleep = await http.post("/v1/admin/models/rm/sleep", json={"level": level}, headers=ADMIN)
            assert asleep.status_code == 200 and asleep.json()["state"] == "sleeping"
            assert asleep.json()["sleep_level"] == level
            assert (asleep.json()["memory_bytes"] == 0) == (level == 2)  # level 2 let the weights go
            freed = {1: "nothing freed: the weights are in host memory already", 2: "weights freed: loaded again"}
            assert asleep.json()["sleep_mode"].startswith(freed[level])  # on this CPU
            again = await http.post("/v1/admin/models/rm/sleep", json={"level": level}, headers=ADMIN)
            assert again.status_code == 200  # idempotent
            refused = await http.post("/v1/score", json={"model": "rm", "items": ITEMS}, headers=SCORER)
            assert refused.status_code == 503 and refused.json()["error"]["type"] == "model_asleep"
            assert refused.headers["retry-after"] == "1" and "wake_up" in refused.json()["error"]["message"]
            awake = await http.post("/v1/admin/models/rm/wake_up", headers=ADMIN)
            assert awake.status_code == 200 and awake.json()["state"] == "awake" and awake.json()["memory_bytes"] > 0
            assert awake.json()["sleep_mode"] is None
            after, _ = await scores(http)
            assert after == before  # bitwise: the same weights, float32
        metrics = (await http.get("/metrics")).text
        timed = 'rewardserve_model_lifecycle_duration_seconds_count{model="rm",operation="sleep",outcome="ok"}'
        assert timed in metrics
        assert 'rewardserve_requests_rejected_total{model="rm",reason="asleep"} 2.0' in metrics


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="no GPU here: level 1 moves nothing")
async def test_level_1_on_a_gpu_moves_the_weights_to_host_memory_and_back(checkpoints):
    """The GPU's memory as torch's allocator holds it, before a level-1 sleep, asleep and
    woken: the weights leave the GPU and come back, the scores bitwise the same."""
    import torch

    first, _, _ = checkpoints
    async with serve_in_process(settings(first, device="cuda")) as (_, http):
        before, _ = await scores(http)
        held = torch.cuda.memory_allocated()
        weights = (await http.get("/v1/admin/models/rm", headers=ADMIN)).json()["memory_bytes"]
        asleep = await http.post("/v1/admin/models/rm/sleep", json={"level": 1}, headers=ADMIN)
        assert asleep.json()["sleep_mode"].startswith("weights moved from cuda")
        assert torch.cuda.memory_allocated() <= held - 0.9 * weights
        awake = await http.post("/v1/admin/models/rm/wake_up", headers=ADMIN)
        assert awake.status_code == 200, awake.text
        assert torch.cuda.memory_allocated() >= held - 0.1 * weights
        after, _ = await scores(http)
        assert after == before


async def test_a_request_wakes_a_model_that_says_so(checkpoints):
    first, _, _ = checkpoints
    async with serve_in_process(settings(first, wake_on_request=True)) as (_, http):
        before, _ = await scores(http)
        await http.post("/v1/admin/models/rm/sleep", json={"level": 2}, headers=ADMIN)
        after, _ = await scores(http)  # woke it: no 503
        assert after == before
        assert (await http.get("/v1/admin/models/rm", headers=ADMIN)).json()["state"] == "awake"


async def test_a_new_version_serves_and_a_broken_one_leaves_the_old_serving(checkpoints):
    first, second, broken = checkpoints
    async with serve_in_process(settings(first)) as (_, http):
        old, _ = await scores(http)
        failed = await http.post(
            "/v1/admin/models/rm/load", json={"source": str(broken), "version": "v-broken"}, headers=ADMIN
        )
        assert failed.status_code == 422 and "v1' serves on" in failed.json()["error"]["message"]
        assert await scores(http) == (old, "v1")
        missing = await http.post(
            "/v1/admin/models/rm/load", json={"source": str(broken / "nowhere"), "version": "v9"}, headers=ADMIN
        )
        assert missing.status_code == 422 and missing.json()["error"]["param"] == "source"
        body = {"source": str(second), "version": "v2"}
        loaded = await http.post("/v1/admin/models/rm/load", json=body, headers=ADMIN)
        assert loaded.status_code == 200, loaded.text
        assert loaded.json()["version"] == "v2" and loaded.json()["source"] == str(second)
        new, version = await scores(http)
        assert version == "v2" and new != old
        back = await http.post("/v1/admin/models/rm/load", json={"source": str(first), "version": "v3"}, headers=ADMIN)
        assert back.status_code == 200
        assert await scores(http) == (old, "v3")  # the first weights again, bitwise
        rolled = await http.post("/v1/admin/models/rm/rollback", headers=ADMIN)
        assert rolled.status_code == 200 and rolled.json()["version"] == "v2"
        assert await scores(http) == (new, "v2")
        assert (await http.post("/v1/admin/models/rm/rollback", headers=ADMIN)).json()["version"] == "v1"
        nothing = await http.post("/v1/admin/models/rm/rollback", headers=ADMIN)
        assert nothing.status_code == 422 and "no earlier version" in nothing.json()["error"]["message"]
        metrics = (await http.get("/metrics")).text
        assert 'rewardserve_model_version_info{model="rm",version="v1"} 1.0' in metrics  # rolled back to it
        assert 'rewardserve_model_version_info{model="rm",version="v3"} 0.0' in metrics


async def test_the_shadow_candidate_is_promoted_to_serve_under_the_name(checkpoints):
    first, second, _ = checkpoints
    specs = [
        ModelSpec(name="rm", source=str(first), version="v1", shadow={"model": "next", "fraction": 1.0}),
        ModelSpec(name="next", source=str(second), version="cand-7"),
    ]
    setup = Settings(builtin_rules=False, api_keys=["score-key"], admin_keys=["admin-key"], compile=False, models=specs)
    async with serve_in_process(setup) as (_, http):
        candidate = await http.post("/v1/score", json={"model": "next", "items": ITEMS}, headers=SCORER)
        promoted = await http.post("/v1/admin/models/rm/promote", headers=ADMIN)
        assert promoted.status_code == 200 and promoted.json()["version"] == "cand-7"
        assert await scores(http) == ([r["score"] for r in candidate.json()["results"]], "cand-7")
        again = await http.post("/v1/admin/models/rm/promote", headers=ADMIN)
        assert again.status_code == 422 and "no shadow candidate" in again.json()["error"]["message"]
        back = await http.post("/v1/admin/models/rm/rollback", headers=ADMIN)
        assert back.status_code == 200 and back.json()["version"] == "v1"


async def test_a_canary_takes_its_share_of_requests_and_ends(checkpoints):
    first, second, broken = checkpoints
    async with serve_in_process(settings(first)) as (_, http):
        body = {"source": str(second), "version": "v2-canary", "percent": 25}
        started = await http.post("/v1/admin/models/rm/canary", json=body, headers=ADMIN)
        assert started.status_code == 200, started.text
        assert started.json()["canary_version"] == "v2-canary" and started.json()["canary_percent"] == 25
        versions = [(await scores(http))[1] for _ in range(200)]
        share = versions.count("v2-canary")
        # Within the 99% binomial interval of p = 0.25 over 200 requests (50 +- 15.8).
        assert 35 <= share <= 65 and set(versions) == {"v1", "v2-canary"}, share
        failed = await http.post(
            "/v1/admin/models/rm/canary", json={**body, "source": str(broken), "version": "bad"}, headers=ADMIN
        )
        assert failed.status_code == 422  # the broken one never takes a request; the old canary is gone too
        ended = await http.post("/v1/admin/models/rm/canary", json={"percent": 0}, headers=ADMIN)
        assert ended.status_code == 200 and ended.json()["canary_version"] is None
        assert {(await scores(http))[1] for _ in range(20)} == {"v1"}


@pytest.fixture(scope="module")
def flaky(checkpoints, tmp_path_factory) -> Path:
    """A checkpoint that passes its load probe and fails on real traffic: the embedding
    rows of every token the probe does not use are NaN, so other items score NaN."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    _, second, _ = checkpoints
    flaky = tmp_path_factory.mktemp("flaky") / "v2-flaky"
    shutil.copytree(second, flaky)
    tok = AutoTokenizer.from_pretrained(flaky)
    probe = [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]  # RewardModel.probe's item
    kept = set(tok(tok.apply_chat_template(probe, tokenize=False), add_special_tokens=True)["input_ids"])
    tensors = load_file(flaky / "model.safetensors")
    (key,) = [k for k in tensors if k.endswith("embed_tokens.weight")]
    rows = torch.tensor([i for i in range(tensors[key].shape[0]) if i not in kept])
    tensors[key][rows] = float("nan")
    save_file(tensors, flaky / "model.safetensors", metadata={"format": "pt"})
    return flaky


async def test_the_compat_routes_name_the_version_in_a_header(checkpoints):
    first, second, _ = checkpoints
    async with serve_in_process(settings(first)) as (_, http):
        answers = [
            await http.post("/classify", json={"model": "rm", "input": "2+2=4"}, headers=SCORER),
            await http.post("/get_reward?model=rm", json={"query": ["2+2=4"]}, headers=SCORER),
            await http.post("/v1/score", json={"model": "rm", "items": ITEMS}, headers=SCORER),
        ]
        assert [(a.status_code, a.headers.get("x-model-version")) for a in answers] == [(200, "v1")] * 3
        await http.post("/v1/admin/models/rm/load", json={"source": str(second), "version": "v2"}, headers=ADMIN)
        answer = await http.post("/classify", json={"model": "rm", "input": "2+2=4"}, headers=SCORER)
        assert answer.headers["x-model-version"] == "v2"


async def test_an_unhealthy_canary_gets_0_percent_by_itself(checkpoints, flaky):
    from rewardserve.service.ops.canary_watch import CANARY_REQUESTS

    first, _, _ = checkpoints
    async with serve_in_process(settings(first)) as (_, http):
        body = {"source": str(flaky), "version": "v2-flaky", "percent": 50}
        started = await http.post("/v1/admin/models/rm/canary", json=body, headers=ADMIN)
        assert started.status_code == 200 and started.json()["canary_version"] == "v2-flaky"  # it passed its probe
        versions, invalid = [], []
        for _ in range(50):
            answer = await http.post("/v1/score", json={"model": "rm", "items": ITEMS}, headers=SCORER)
            assert answer.status_code == 200, answer.text
            versions.append(answer.json()["model_version"])
            invalid += [r["error"] for r in answer.json()["results"] if not r["valid"]]
        state = (await http.get("/v1/admin/models/rm", headers=ADMIN)).json()
        assert state["canary_version"] is None and state["canary_percent"] is None
        assert "v2-flaky" in state["canary_stopped"] and "invalid" in state["canary_stopped"], state
        # Judged once it had CANARY_REQUESTS requests: those, at most, went wrong; none after.
        last = max(i for i, v in enumerate(versions) if v == "v2-flaky")
        assert sum(v == "v2-flaky" for v in versions) == CANARY_REQUESTS
        assert set(versions[last + 1 :]) == {"v1"} and len(versions) - last > 10
        assert invalid and all("non-finite" in e for e in invalid)
        metrics = (await http.get("/metrics")).text
        assert 'rewardserve_canary_stopped_total{model="rm"} 1.0' in metrics


async def test_new_weights_are_written_in_place_where_the_backend_can(checkpoints, flaky, tmp_path):
    first, second, _ = checkpoints
    # Linears left as torch's and nothing compiled: the weights are plain tensors to rewrite.
    settings = two_served(first, second, cpu_linear="torch", compile_layers=False)
    async with serve_in_process(settings) as (app, http):
        before = await scores_of(http, "rm")  # now in the score cache too
        held = (await http.get("/v1/admin/models/rm", headers=ADMIN)).json()["memory_bytes"]
        weights_only = tmp_path / "step-100"  # what a trainer writes: the config and weights, no tokenizer
        weights_only.mkdir()
        for name in ("config.json", "model.safetensors"):
            shutil.copy(second / name, weights_only)
        other = await scores_of(http, "other")

        answered: list[tuple[str, list[float]]] = []
        updating = True

        async def caller() -> None:  # scores on while the update runs, and once after
            while updating or not answered:
                answer = await http.post("/v1/score", json={"model": "rm", "items": ITEMS}, headers=SCORER)
                assert answer.status_code == 200, answer.text
                answered.append((answer.json()["model_version"], [r["score"] for r in answer.json()["results"]]))

        callers = [asyncio.ensure_future(caller()) for _ in range(4)]
        await asyncio.sleep(0.05)
        updated = await http.post(
            "/v1/admin/models/rm/weights", json={"path": str(weights_only), "version": "step-100"}, headers=ADMIN
        )
        updating = False
        assert updated.status_code == 200, updated.text
        state = updated.json()
        assert state["weights_update"] == "in place" and state["version"] == "step-100"
        assert state["memory_bytes"] == held  # the same tensors, rewritten
        await asyncio.gather(*callers)
        # Every answer scored by one version's weights alone, and says which.
        assert {version for version, _ in answered} == {"v1", "step-100"}
        for version, got in answered:
            assert got == pytest.approx(before if version == "v1" else other, abs=1e-4), version
        answer = await http.post("/v1/score", json={"model": "rm", "items": ITEMS}, headers=SCORER)
        assert answer.json()["model_version"] == "step-100"
        after = [r["score"] for r in answer.json()["results"]]
        assert after == pytest.approx(other, abs=1e-4)  # not the cached old ones
        assert after != pytest.approx(before, abs=1e-3)
        # A level-2 sleep drops the weights; waking reads the new ones, not the first source's.
        for call, body in (("sleep", {"level": 2}), ("wake_up", {})):
            answer = await http.post(f"/v1/admin/models/rm/{call}", json=body, headers=ADMIN)
            assert answer.status_code == 200, answer.text
        assert answer.json()["source"] == str(weights_only)
        assert await scores_of(http, "rm") == pytest.approx(after, abs=1e-5)

        for path, said in (
            (first.parent / "other-shape", "not this model's weights"),
            (flaky, "not finite"),
            (tmp_path, "not a checkpoint folder"),
        ):
            if said == "not this model's weights" and not path.exists():
                build_sequence_classifier(path, seed=3, hidden=48)
            refused = await http.post(
                "/v1/admin/models/rm/weights", json={"path": str(path), "version": "bad"}, headers=ADMIN
            )
            assert refused.status_code == 422 and said in refused.text, refused.text
            assert "'step-100' serves on" in refused.text
            assert await scores_of(http, "rm") == pytest.approx(after, abs=1e-6)


async def test_weights_are_loaded_beside_where_they_are_packed(checkpoints):
    first, second, _ = checkpoints
    async with serve_in_process(two_served(first, second)) as (_, http):
        updated = await http.post(
            "/v1/admin/models/rm/weights", json={"path": str(second), "version": "v2"}, headers=ADMIN
        )
        assert updated.status_code == 200, updated.text
        how = updated.json()["weights_update"]
        assert how.startswith("loaded beside") and "oneDNN" in how, how
        assert await scores_of(http, "rm") == pytest.approx(await scores_of(http, "other"), abs=1e-4)


async def test_weights_torn_while_written_are_read_back_from_the_last_source(checkpoints, monkeypatch):
    """The files change between the check and the write (a trainer saving over them): what
    was written is undone from the model's own source, and it serves on as it was."""
    from rewardserve.models.checkpoints import CheckpointWeights

    first, second, _ = checkpoints
    reads = []
    tensors = CheckpointWeights.tensors

    def torn(self):
        reads.append(self.files)
        for count, pair in enumerate(tensors(self)):
            if len(reads) == 2 and count == 3:  # the write, three tensors in
                raise ValueError("the file ends early")
            yield pair

    monkeypatch.setattr(CheckpointWeights, "tensors", torn)
    # No score cache: the scores after are read from the weights, not remembered.
    settings = two_served(first, second, cpu_linear="torch", compile_layers=False, score_cache_size=0)
    async with serve_in_process(settings) as (_, http):
        before = await scores_of(http, "rm")
        answer = await http.post(
            "/v1/admin/models/rm/weights", json={"path": str(second), "version": "v2"}, headers=ADMIN
        )
        assert answer.status_code == 422 and "read back from" in answer.text, answer.text
        assert len(reads) == 3  # checked, written (torn), read back
        state = (await http.get("/v1/admin/models/rm", headers=ADMIN)).json()
        assert state["version"] == "v1" and state["state"] == "awake"
        assert await scores_of(http, "rm") == pytest.approx(before, abs=1e-5)


@pytest.mark.parametrize("options", [{}, {"cpu_linear": "torch", "compile_layers": False}])
async def test_a_checkpoint_saved_over_while_it_serves_changes_nothing(checkpoints, tmp_path, options):
    """A trainer saving into the folder a model was loaded from (save_pretrained truncates
    and rewrites model.safetensors): the served weights are the process's own, not a map
    of the file, so its scores stay and nothing dies of SIGBUS."""
    first, second, _ = checkpoints
    served = tmp_path / "latest"
    shutil.copytree(first, served)
    spec = ModelSpec(name="rm", source=str(served), options={"score_cache_size": 0, **options})
    async with serve_in_process(Settings(builtin_rules=False, compile=False, models=[spec])) as (_, http):
        before = await scores_of(http, "rm")
        with open(served / "model.safetensors", "wb") as f:  # truncated: shorter than any map of it
            f.flush()
            assert await scores_of(http, "rm") == pytest.approx(before, abs=1e-6)
            f.write((second / "model.safetensors").read_bytes())
        assert await scores_of(http, "rm") == pytest.approx(before, abs=1e-6)


async def test_weights_asleep_sources_gone_and_casts_that_overflow(checkpoints, tmp_path):
    """Weights given while asleep at level 2 wait for the wake; a level-2 sleep whose
    source is gone is refused (a 422, awake as it was); a float64 value that a float32
    cast makes infinite is not finite."""
    import torch
    from safetensors.torch import load_file, save_file

    first, second, _ = checkpoints
    settings = two_served(first, second, cpu_linear="torch", compile_layers=False, score_cache_size=0)
    async with serve_in_process(settings) as (_, http):
        other = await scores_of(http, "other")
        asleep = await http.post("/v1/admin/models/rm/sleep", json={"level": 2}, headers=ADMIN)
        assert asleep.status_code == 200
        pushed = await http.post(
            "/v1/admin/models/rm/weights", json={"path": str(second), "version": "v2"}, headers=ADMIN
        )
        assert pushed.status_code == 200, pushed.text
        state = pushed.json()
        assert state["state"] == "sleeping" and state["memory_bytes"] == 0 and state["version"] == "v2"
        assert state["weights_update"].startswith("on wake")
        assert (await http.post("/v1/admin/models/rm/wake_up", headers=ADMIN)).status_code == 200
        assert await scores_of(http, "rm") == pytest.approx(other, abs=1e-4)

        huge = tmp_path / "huge"
        shutil.copytree(second, huge)
        tensors = {k: v.to(torch.float64) for k, v in load_file(huge / "model.safetensors").items()}
        tensors["score.weight"][0, 0] = 1e300
        save_file(tensors, huge / "model.safetensors")
        refused = await http.post(
            "/v1/admin/models/rm/weights", json={"path": str(huge), "version": "x"}, headers=ADMIN
        )
        assert refused.status_code == 422 and "not finite" in refused.text, refused.text

        shutil.rmtree(huge)  # what rm now reads from, were it pushed there
        gone = tmp_path / "gone"
        shutil.copytree(second, gone)
        assert (
            await http.post("/v1/admin/models/rm/weights", json={"path": str(gone), "version": "v3"}, headers=ADMIN)
        ).status_code == 200
        shutil.rmtree(gone)
        refused = await http.post("/v1/admin/models/rm/sleep", json={"level": 2}, headers=ADMIN)
        assert refused.status_code == 422 and "cannot sleep at level 2" in refused.text, refused.text
        state = (await http.get("/v1/admin/models/rm", headers=ADMIN)).json()
        assert state["state"] == "awake" and await scores_of(http, "rm") == pytest.approx(other, abs=1e-4)


async def test_an_ensemble_reads_its_member_whole_while_new_weights_are_written(checkpoints):
    """A request through an ensemble holds the member it reads, as one on the member does:
    each answer's member scores are one version's, never a batch run under a write."""
    first, second, _ = checkpoints
    settings = two_served(first, second, cpu_linear="torch", compile_layers=False, score_cache_size=0)
    settings.models.append(ModelSpec(name="mix", kind="ensemble", source="ensemble", options={"members": ["rm"]}))
    many = [
        {"prompt": f"Question {i}: what is {i}+{i}?", "response": f"It is {2 * i}. " * (1 + i % 5)} for i in range(24)
    ]

    async def member_scores() -> list[float]:
        answer = await http.post("/v1/score", json={"model": "mix", "items": many}, headers=SCORER)
        assert answer.status_code == 200, answer.text
        return [r["components"]["rm"] for r in answer.json()["results"]]

    async with serve_in_process(settings) as (_, http):
        before = await member_scores()
        answered: list[list[float]] = []
        writes = 0

        async def caller() -> None:
            while writes < 6:
                answered.append(await member_scores())

        callers = [asyncio.ensure_future(caller()) for _ in range(3)]
        for writes in range(1, 7):  # back and forth, while the callers score through the ensemble
            await asyncio.sleep(0.02)
            path, version = (second, f"v2-{writes}") if writes % 2 else (first, f"v1-{writes}")
            updated = await http.post(
                "/v1/admin/models/rm/weights", json={"path": str(path), "version": version}, headers=ADMIN
            )
            assert updated.status_code == 200 and updated.json()["weights_update"] == "in place", updated.text
        await asyncio.gather(*callers)
        answer = await http.post("/v1/score", json={"model": "other", "items": many}, headers=SCORER)
        other = [r["score"] for r in answer.json()["results"]]
        assert other != pytest.approx(before, abs=1e-3)
        assert len(answered) >= 6
        for got in answered:
            assert got == pytest.approx(before, abs=1e-4) or got == pytest.approx(other, abs=1e-4), got


async def test_a_load_of_another_model_or_a_used_version_is_refused_unless_forced(checkpoints, tmp_path):
    """The next version of a 1-label outcome model is not a 2-label classifier, nor a
    PRM (another architecture, its preset's kind process), nor a version string the
    model has served: each a 422 naming the difference, the old version serving on."""
    from rewardserve.models.demo.tiny import build_qwen2_prm

    first, second, _ = checkpoints
    two_labels = build_sequence_classifier(tmp_path / "two", num_labels=2)
    prm = build_qwen2_prm(tmp_path / "prm")
    async with serve_in_process(settings(first)) as (_, http):
        old, _ = await scores(http)

        async def load(body: dict) -> dict:
            answer = await http.post("/v1/admin/models/rm/load", json=body, headers=ADMIN)
            assert answer.status_code == 422, answer.text
            return answer.json()["error"]

        error = await load({"source": str(two_labels), "version": "v2"})
        assert error["param"] == "source" and "2 label(s) (serving: 1)" in error["message"], error
        assert "force: true" in error["message"]
        error = await load({"source": str(prm), "version": "v2"})
        assert "architecture ['Qwen2ForProcessRewardModel']" in error["message"], error
        assert "kind process by its preset (serving: outcome)" in error["message"], error
        error = await load({"source": str(second), "version": "v1"})
        assert error["param"] == "version" and "already served version 'v1'" in error["message"], error
        assert await scores(http) == (old, "v1")

        loaded = await http.post(
            "/v1/admin/models/rm/load", json={"source": str(second), "version": "v2"}, headers=ADMIN
        )
        assert loaded.status_code == 200, loaded.text
        # v1 is not served any more, but was: a checkpoint under it again would be confused with it.
        error = await load({"source": str(first), "version": "v1"})
        assert "already served version 'v1'" in error["message"] and "v1, v2" in error["message"], error
        forced = {"source": str(two_labels), "version": "v3", "force": True}
        answer = await http.post("/v1/admin/models/rm/load", json=forced, headers=ADMIN)
        assert answer.status_code == 200 and answer.json()["version"] == "v3", answer.text
