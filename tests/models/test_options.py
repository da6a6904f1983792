"""Typed per-kind options: checked when the model is built, a typo named with the
closest valid key, at start of the service and of the CLI."""

from __future__ import annotations

import pytest

from rewardserve.models.errors import StartupError
from rewardserve.models.kinds import build_model
from rewardserve.models.kinds.outcome import OutcomeOptions
from rewardserve.models.options import OptionsError
from rewardserve.models.spec import ModelSpec
from rewardserve.service.app import create_app
from rewardserve.service.settings import Settings


def test_a_misspelled_option_names_the_model_the_key_and_the_closest_one():
    with pytest.raises(OptionsError) as err:
        build_model(ModelSpec(name="rm", kind="outcome", source="/nowhere", options={"packng": False}))
    message = str(err.value)
    assert "'rm'" in message and "'packng'" in message and "did you mean 'packing'?" in message


def test_a_key_with_no_close_match_lists_the_kind_s_options():
    with pytest.raises(OptionsError, match=r"unknown option 'zzz'; options of kind rule: .*fn, args, timeout_s"):
        build_model(ModelSpec(name="r", kind="rule", source="math_equiv", options={"zzz": 1}))


def test_a_request_option_in_a_model_s_options_says_to_send_it_with_the_request():
    # Not "did you mean 'attention'?": activation is chosen per request (ScoreOptions).
    with pytest.raises(OptionsError) as err:
        build_model(ModelSpec(name="rm", kind="outcome", source="/nowhere", options={"activation": "sigmoid"}))
    (line,) = str(err.value).splitlines()
    assert line == (
        "model 'rm' (kind outcome): 'activation' is a request option (send it in the request's options), "
        "not a model option of kind outcome"
    )
    assert "attention" not in line
    with pytest.raises(OptionsError, match="'normalize' is a request option"):
        build_model(ModelSpec(name="r", kind="rule", source="math_equiv", options={"normalize": "group"}))
    # Where the kind does take it (a process model's step activation), it is a model option.
    model = build_model(
        ModelSpec(
            name="prm", kind="process", source="/nowhere", options={"format": "classifier_tags", "activation": "none"}
        )
    )
    assert model.options.activation == "none"


def test_a_wrong_value_is_named_too():
    with pytest.raises(OptionsError, match="'input'"):
        build_model(ModelSpec(name="rm", kind="outcome", source="/nowhere", options={"input": "triple"}))
    with pytest.raises(OptionsError, match="'format'"):
        build_model(ModelSpec(name="prm", kind="process", source="/nowhere"))  # no preset sets it


def test_preset_options_and_the_user_s_merge_into_the_typed_options():
    model = build_model(
        ModelSpec(name="sky", source="Skywork/Skywork-Reward-V2-Qwen3-0.6B", options={"packing": False})
    )
    assert isinstance(model.options, OutcomeOptions)
    assert model.options.strip_bos is True and model.options.packing is False
    assert model.options.backend().packing is False


def test_the_service_does_not_start_with_a_typo(qwen3_rm):
    settings = Settings(models=[ModelSpec(name="rm", kind="outcome", source=str(qwen3_rm), options={"packng": False})])
    with pytest.raises(StartupError, match="did you mean 'packing'"):
        create_app(settings)


def test_the_options_page_lists_every_option_of_every_kind():
    from pathlib import Path

    from rewardserve.models.options_reference import BEGIN, END, reference

    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "options.md").read_text()
    missing = [line for line in reference().splitlines() if line not in (BEGIN, END) and line not in page]
    assert not missing, f"docs/reference/options.md is stale (python docs/generate_reference.py): {missing[:3]}"
