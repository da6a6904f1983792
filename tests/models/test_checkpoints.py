"""Where weights come from: a hub id pinned to a revision loads that snapshot from a real
Hugging Face cache layout (offline), and a config's tokenizer and chat template replace
the checkpoint's own; scores checked against the reference recipe on the same files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rewardserve.models.checkpoints import checkpoint_problem, pinned_source
from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.builders import build_sequence_classifier, reference_outcome_scores
from tests.harness import serve_in_process

PLAIN_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"


def hub_cache(root: Path, repo: str, snapshots: dict[str, Path], refs: dict[str, str]) -> Path:
    """``root`` laid out as huggingface_hub lays out its cache: a snapshot folder per
    commit, and refs naming commits."""
    repo_dir = root / ("models--" + repo.replace("/", "--"))
    for commit, files in snapshots.items():
        shutil.copytree(files, repo_dir / "snapshots" / commit)
    (repo_dir / "refs").mkdir(parents=True)
    for ref, commit in refs.items():
        (repo_dir / "refs" / ref).write_text(commit)
    return root


@pytest.fixture
def cached_hub(tmp_path, monkeypatch):
    """acme/rm in an offline hub cache: main at one commit, tag v2 at another, each a
    different random model."""
    from huggingface_hub import constants

    first = build_sequence_classifier(tmp_path / "first", "qwen3", seed=0)
    second = build_sequence_classifier(tmp_path / "second", "qwen3", seed=5)
    commits = {"a" * 40: first, "b" * 40: second}
    cache = hub_cache(tmp_path / "cache", "acme/rm", commits, {"main": "a" * 40, "v2": "b" * 40})
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return first, second


def test_a_revision_names_one_snapshot_of_the_cache(cached_hub, tmp_path):
    assert checkpoint_problem("acme/rm", "v2") is None
    assert Path(pinned_source("acme/rm", "v2")).name == "b" * 40
    assert Path(pinned_source("acme/rm", "a" * 40)).name == "a" * 40
    assert pinned_source("acme/rm", None) == "acme/rm"
    missing = checkpoint_problem("acme/rm", "v3")
    assert missing is not None and "at revision v3" in missing and "--revision v3" in missing
    local = checkpoint_problem(str(tmp_path / "first"), "v2")
    assert local is not None and "has no revisions" in local
    # At start-up too, before anything loads.
    from rewardserve.models.kinds import build_checked

    with pytest.raises(ValueError, match="model 'rm': .* has no revisions"):
        build_checked(ModelSpec(name="rm", source=str(tmp_path / "first"), kind="outcome", revision="v2"))
    with pytest.raises(ValueError, match="model 'rm': acme/rm at revision v3 is not in the local"):
        build_checked(ModelSpec(name="rm", source="acme/rm", kind="outcome", revision="v3"))


async def test_the_pinned_revision_with_another_chat_template_scores_as_the_reference(cached_hub, tmp_path):
    _first, second = cached_hub
    # The reference: the v2 snapshot's files with the plain template in the tokenizer.
    reference_dir = tmp_path / "reference"
    shutil.copytree(second, reference_dir)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(reference_dir)
    tokenizer.chat_template = PLAIN_TEMPLATE
    tokenizer.save_pretrained(reference_dir)
    template_file = tmp_path / "plain.jinja"
    template_file.write_text(PLAIN_TEMPLATE)

    conversation = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}]
    (expected,) = reference_outcome_scores(reference_dir, [conversation])
    (checkpoint_own,) = reference_outcome_scores(second, [conversation])
    assert abs(expected[0] - checkpoint_own[0]) > 1e-3  # the template changes the score

    specs = [
        ModelSpec(name="pinned", source="acme/rm", kind="outcome", revision="v2", chat_template=str(template_file)),
        ModelSpec(name="tokenizer", source=str(second), kind="outcome", tokenizer=str(reference_dir)),
        ModelSpec(name="latest", source="acme/rm", kind="outcome"),
    ]
    settings = Settings(models=specs, builtin_rules=False, compile=False)
    item = {"prompt": "What is 2+2?", "response": "4"}
    async with serve_in_process(settings) as (_app, http):
        cards = {card["id"]: card for card in (await http.get("/v1/models")).json()["data"]}
        assert (cards["pinned"]["source"], cards["pinned"]["revision"]) == ("acme/rm", "v2")
        assert cards["latest"]["revision"] is None
        for name in ("pinned", "tokenizer"):
            scored = (await http.post("/v1/score", json={"model": name, "items": [item]})).json()
            assert scored["results"][0]["score"] == pytest.approx(expected[0], abs=1e-4), name
            assert scored["revision"] == ("v2" if name == "pinned" else None)
        latest = (await http.post("/v1/score", json={"model": "latest", "items": [item]})).json()
        (main_score,) = reference_outcome_scores(_first, [conversation])
        assert latest["results"][0]["score"] == pytest.approx(main_score[0], abs=1e-4)


def test_trust_remote_code_is_off_unless_asked_and_logged_when_on(qwen3_rm, caplog):
    import logging

    from rewardserve.models.kinds import build_model

    assert ModelSpec(name="m", source=str(qwen3_rm)).trust_remote_code is False
    for trusted in (False, True):
        model = build_model(ModelSpec(name="m", kind="outcome", source=str(qwen3_rm), trust_remote_code=trusted))
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            model.pin_revision()
        assert ("trust_remote_code is on" in caplog.text) is trusted


def test_a_wrong_relative_path_names_the_directory_it_was_looked_up_in(tmp_path, monkeypatch):
    """demo/skywork has a hub id's shape; beside a demo/ folder it is a path, and a wrong
    one is a missing directory under the working directory, not a hub problem."""
    (tmp_path / "demo" / "prm").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the hub is never asked
    problem = checkpoint_problem("demo/skywork")
    assert problem == (
        "no such directory: demo/skywork (a local checkpoint directory or a hub id owner/name; "
        f"looked up in {tmp_path})"
    )
    problem = checkpoint_problem("./demo/skywork")
    assert problem is not None and f"looked up in {tmp_path})" in problem
    # An owner/name with no such folder here may be a hub id: the hub's problem, saying
    # where it was not found as a directory either.
    problem = checkpoint_problem("acme/no-such-model")
    assert problem is not None and problem.startswith(
        f"acme/no-such-model is not in the local Hugging Face cache (nor a directory in {tmp_path})"
    )
    assert "looked up in" not in (checkpoint_problem(str(tmp_path / "demo" / "skywork")) or "")
