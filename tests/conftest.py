from __future__ import annotations

import os

# Nothing here may reach a hub; keep transformers quiet in test output.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Services started inside this process would freeze the tests' objects out of the garbage
# collector's reach; processes started by tests/harness.py freeze as the service does.
os.environ.setdefault("REWARDSERVE_GC_FREEZE", "false")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

from tests.builders import build_sequence_classifier  # noqa: E402

# hypothesis profiles, chosen by HYPOTHESIS_PROFILE. "repeatable" (`make test`, and the
# default) derandomizes: the draws follow from the test alone, so the same tree passes or
# fails alike on any machine, and no example database (a failure some earlier run saved
# here) changes that. "fuzz" (`make fuzz`) explores: many more examples, a new seed each
# run. Every failure fuzzing finds becomes an explicit @example on its test, so that the
# repeatable run keeps checking it. No deadline and no too_slow check in either: a
# loaded machine would decide them.
_UNTIMED = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow], "print_blob": True}
settings.register_profile("repeatable", derandomize=True, database=None, max_examples=60, **_UNTIMED)
settings.register_profile("fuzz", derandomize=False, max_examples=1500, **_UNTIMED)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

ADVERSARIAL = Path(__file__).parent / "adversarial"


def pytest_collection_modifyitems(items):
    # Every attack is watched against a latency bound and a rule time limit; the rule
    # workers are niced below everything, so a test process beside them starves them.
    for item in items:
        if ADVERSARIAL in item.path.parents:
            item.add_marker(pytest.mark.alone)
    # The longest first (`--dist loadfile` hands files out in the order of their first
    # test): the workers take the rest as they free up and finish together, rather than
    # one running a long test at the end while the other waits.
    items.sort(key=lambda item: -_seconds(item))


def _seconds(item: pytest.Item) -> float:
    marker = item.get_closest_marker("long")
    return float(marker.args[0]) if marker else 0.0


@pytest.fixture(scope="session")
def qwen3_rm(tmp_path_factory) -> Path:
    """A tiny Qwen3ForSequenceClassification reward model on disk."""
    return build_sequence_classifier(tmp_path_factory.mktemp("qwen3_rm"), "qwen3")


@pytest.fixture(scope="session")
def llama_rm(tmp_path_factory) -> Path:
    """A tiny LlamaForSequenceClassification reward model (template writes BOS too)."""
    return build_sequence_classifier(tmp_path_factory.mktemp("llama_rm"), "llama", seed=1)


@pytest.fixture(scope="session")
def qwen3_multihead_rm(tmp_path_factory) -> Path:
    return build_sequence_classifier(tmp_path_factory.mktemp("qwen3_mh"), "qwen3", num_labels=3, seed=2)


@pytest.fixture(scope="session")
def qwen2_prm(tmp_path_factory) -> Path:
    from tests.builders import build_qwen2_prm

    return build_qwen2_prm(tmp_path_factory.mktemp("qwen2_prm"))


@pytest.fixture(scope="session")
def shepherd_prm(tmp_path_factory) -> Path:
    from tests.builders import build_math_shepherd

    return build_math_shepherd(tmp_path_factory.mktemp("shepherd"))


@pytest.fixture(scope="session")
def skywork_prm(tmp_path_factory) -> Path:
    from tests.builders import build_skywork_prm

    return build_skywork_prm(tmp_path_factory.mktemp("skywork_prm"))


@pytest.fixture(scope="session")
def rlhflow_prm(tmp_path_factory) -> Path:
    from tests.builders import build_rlhflow_prm

    return build_rlhflow_prm(tmp_path_factory.mktemp("rlhflow_prm"))


@pytest.fixture(scope="session")
def judge_lm(tmp_path_factory) -> Path:
    from tests.builders import build_causal_lm

    return build_causal_lm(tmp_path_factory.mktemp("judge_lm"), seed=3)


@pytest.fixture(scope="session")
def yes_sayer(tmp_path_factory) -> Path:
    from tests.builders import build_yes_sayer

    return build_yes_sayer(tmp_path_factory.mktemp("yes_sayer"))


@pytest.fixture(scope="session")
def vl_value(tmp_path_factory) -> Path:
    from tests.builders import build_qwen2_vl

    return build_qwen2_vl(tmp_path_factory.mktemp("vl_value"), head="value_head")


@pytest.fixture(scope="session")
def vl_mlp(tmp_path_factory) -> Path:
    from tests.builders import build_qwen2_vl

    return build_qwen2_vl(tmp_path_factory.mktemp("vl_mlp"), head="mlp", seed=1)


@pytest.fixture(scope="session")
def vl_judge(tmp_path_factory) -> Path:
    from tests.builders import build_qwen2_vl

    return build_qwen2_vl(tmp_path_factory.mktemp("vl_judge"), head="none", seed=2)


@pytest.fixture(scope="session")
def clip_model(tmp_path_factory) -> Path:
    from tests.builders import build_clip

    return build_clip(tmp_path_factory.mktemp("clip"))


@pytest.fixture(scope="session")
def live_service(tmp_path_factory, qwen3_rm, qwen2_prm):
    """One real `rewardserve serve` process for the tests that need a uvicorn service
    but nothing of their own: `qwen` (an outcome model), `lazy` (the same, waiting 2 s
    for company), `prm`, and the built-in rules. Yields its URL."""
    from tests.harness import serve_subprocess

    root = tmp_path_factory.mktemp("live_service")
    config = root / "models.yaml"
    config.write_text(
        f"models:\n"
        f"  - name: qwen\n    source: {qwen3_rm}\n"
        f"  - name: lazy\n    source: {qwen3_rm}\n    max_wait_ms: 2000\n    max_batch_tokens: 100000\n"
        f"  - name: prm\n    source: {qwen2_prm}\n"
    )
    # Rule calls' limit well above their time on a loaded machine (a second test run
    # beside this one): a timed-out math call would be an invalid item, not a flake.
    env = {"REWARDSERVE_RULE_TIMEOUT_S": "30"}
    with serve_subprocess("--config", str(config), env=env, log_path=root / "server.log") as url:
        yield url
