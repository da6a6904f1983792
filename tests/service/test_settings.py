"""Settings from environment, YAML and CLI flags."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError
from pydantic_settings import BaseSettings, EnvSettingsSource

from rewardserve.models.kinds import build_model
from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import (
    SETTINGS_GROUPS,
    FaultInjectionSettings,
    LimitSettings,
    RulePoolSettings,
    Settings,
    parse_model_arg,
)

SETTINGS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "settings.md"


def test_env_settings_and_comma_separated_keys(monkeypatch, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# keys\nk3\n\n")
    monkeypatch.setenv("REWARDSERVE_API_KEYS", "k1, k2")
    monkeypatch.setenv("REWARDSERVE_API_KEYS_FILE", str(keys))
    monkeypatch.setenv("REWARDSERVE_PORT", "9001")
    monkeypatch.setenv("REWARDSERVE_MAX_ITEMS_PER_REQUEST", "10")
    s = Settings()
    assert s.port == 9001 and s.max_items_per_request == 10
    assert s.accepted_keys() == ["k1", "k2", "k3"]


def test_yaml_models_then_builtin_rules(tmp_path, qwen3_rm):
    config = tmp_path / "models.yaml"
    config.write_text(
        f"models:\n  - name: rm\n    source: {qwen3_rm}\n    max_batch_tokens: 4096\n"
        "  - name: math\n    kind: rule\n    source: math_equiv\n    options: {timeout_s: 1}\n"
    )
    specs = Settings(config=config).model_specs()
    assert [s.name for s in specs] == ["rm", "math", "exact_match", "code"]  # yours replaces a built-in
    assert specs[0].max_batch_tokens == 4096 and specs[1].options == {"timeout_s": 1}
    assert [s.name for s in Settings(config=config, builtin_rules=False).model_specs()] == ["rm", "math"]


def test_bad_config_is_a_clear_error(tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text("models:\n  - name: a\n    source: x\n    colour: blue\n")
    with pytest.raises(ValueError, match="colour"):
        Settings(config=config).model_specs()
    config.write_text("models:\n  - {name: a, source: x}\n  - {name: a, source: y}\n")
    with pytest.raises(ValueError, match="unique"):
        Settings(config=config).model_specs()


def test_a_config_file_s_top_level_keys_are_models_and_tenants(tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text("model:\n  - {name: a, kind: rule, source: exact_match}\n")
    with pytest.raises(ValueError) as err:
        Settings(config=config).model_specs()
    (line,) = str(err.value).splitlines()
    assert str(config) in line and "unknown top-level key 'model'; did you mean 'models'?" in line
    config.write_text("models: []\nlimits: {}\n")
    with pytest.raises(
        ValueError, match="unknown top-level key 'limits'; a config file holds 'models:' and 'tenants:'"
    ):
        Settings(config=config).model_specs()
    config.write_text("models:\n")
    with pytest.raises(ValueError, match="'models:' must be a list of models .*, got nothing"):
        Settings(config=config).model_specs()
    config.write_text("tenants:\n  - {name: t, keys: [k]}\nmodels:\n  - {name: a, kind: rule, source: exact_match}\n")
    assert [s.name for s in Settings(config=config, builtin_rules=False).model_specs()] == ["a"]


def test_an_empty_config_file_says_it_needs_models(tmp_path):
    config = tmp_path / "models.yaml"
    for text in ("", "# nothing yet\n"):
        config.write_text(text)
        with pytest.raises(ValueError) as err:
            Settings(config=config).model_specs()
        assert str(err.value) == f"the config file {config} is empty: it needs a 'models:' list"


def test_a_misspelled_model_field_names_the_model_and_the_field_it_meant(tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text(
        "models:\n  - {name: ok, kind: rule, source: exact_match}\n  - {name: rm, source: x, max_token: 5}\n"
    )
    with pytest.raises(ValueError) as err:
        Settings(config=config).model_specs()
    (line,) = str(err.value).splitlines()
    assert line == f"{config}: model 'rm' (models[1]): unknown field 'max_token'; did you mean 'max_tokens'?"
    # A kind's option at the model's level says where it goes; a request's says so too.
    config.write_text("models:\n  - {name: rm, source: x, packing: false}\n")
    with pytest.raises(
        ValueError, match="model 'rm' .*unknown field 'packing'; a kind's own settings go under 'options:'"
    ):
        Settings(config=config).model_specs()
    config.write_text("models:\n  - {name: rm, source: x, normalize: group}\n")
    with pytest.raises(ValueError, match="unknown field 'normalize'; it is a request option"):
        Settings(config=config).model_specs()
    # No name: the entry's place; a wrong value and a nested shadow field are named too.
    config.write_text("models:\n  - {source: x}\n  - 3\n")
    with pytest.raises(ValueError, match=r"models\[0\]: name: Field required"):
        Settings(config=config).model_specs()
    config.write_text("models:\n  - {name: rm, source: x, shadow: {modle: b, fraction: 0.1}}\n")
    with pytest.raises(ValueError, match="unknown field 'shadow.modle'; did you mean 'model'?"):
        Settings(config=config).model_specs()


def test_a_bad_kind_on_the_command_line_names_the_kinds(tmp_path):
    with pytest.raises(ValueError) as err:
        parse_model_arg("rm=acme/rm-7b:outcom")
    (line,) = str(err.value).splitlines()
    assert "--model rm=acme/rm-7b:outcom: unknown kind 'outcom'; did you mean 'outcome'?" in line
    assert "kinds: " in line and "outcome, process, rule" in line and "no such directory" not in line
    with pytest.raises(ValueError, match="unknown kind 'regression'; kinds: .*outcome"):
        parse_model_arg("rm=/models/rm:regression")
    # A local path with a ':' in it that exists is a source, whatever follows the colon.
    odd = tmp_path / "run:latest"
    odd.mkdir()
    assert parse_model_arg(f"rm={odd}").source == str(odd) and parse_model_arg(f"rm={odd}").kind is None
    with pytest.raises(ValueError, match="--model bad name=x: model 'bad name' .*name: String should match"):
        parse_model_arg("bad name=x")


def test_model_arg_and_presets():
    spec = parse_model_arg("sky=Skywork/Skywork-Reward-V2-Qwen3-0.6B")
    assert spec.name == "sky" and spec.source.startswith("Skywork/")
    model = build_model(spec)  # picked by name, no download needed to know the recipe
    assert model.kind == "outcome" and model.preset_name == "skywork-reward-v2"
    assert model.options.strip_bos is True
    with pytest.raises(ValueError, match="--model takes SOURCE, NAME=SOURCE"):
        parse_model_arg("=no-name")
    with pytest.raises(ValueError, match="no such directory"):
        build_model(ModelSpec(name="x", source="/nonexistent/dir"))


def test_cli_rejects_a_bad_model_flag():
    proc = subprocess.run(
        [sys.executable, "-m", "rewardserve.cli", "serve", "--model", "oops"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # A bare source is a model named after it: one that is neither a directory nor a hub id.
    assert proc.returncode == 2
    assert "model 'oops': no such directory: oops (a local checkpoint directory or a hub id" in proc.stderr


def test_compile_off_reaches_every_kind_that_compiles(qwen3_rm):
    from rewardserve.models.kinds import build_checked
    from rewardserve.models.reward_model import ModelContext

    off = ModelContext(compile=False)
    outcome = build_checked(ModelSpec(name="rm", source=str(qwen3_rm)), off)
    assert outcome.options.compile_layers is False and outcome.options.compile_norms is False
    asked = build_checked(ModelSpec(name="rm", source=str(qwen3_rm), options={"compile_layers": True}), off)
    assert asked.options.compile_layers is True  # a model's own options win
    assert build_checked(ModelSpec(name="m", kind="rule", source="math_equiv"), off).kind == "rule"
    assert build_checked(ModelSpec(name="rm", source=str(qwen3_rm)), ModelContext()).options.compile_layers is True


def test_a_config_s_own_reward_function_is_imported_from_the_config_s_directory(tmp_path, monkeypatch):
    from rewardserve.models.kinds import build_checked
    from rewardserve.service.settings import load_model_file

    functions = tmp_path / "config"
    functions.mkdir()
    (functions / "cfg_rewards.py").write_text("def short(prompts, completions, **columns):\n    return [1.0]\n")
    config = functions / "models.yaml"
    config.write_text(
        "models:\n  - {name: short, kind: rule, source: 'cfg_rewards:short'}\n"
        "  - {name: elsewhere, kind: rule, source: 'cfg_rewards:short', options: {path: /nowhere}}\n"
    )
    monkeypatch.chdir(tmp_path)  # not where the function is
    short, elsewhere = load_model_file(config)
    assert short.options["path"] == str(functions.resolve()) and elsewhere.options["path"] == "/nowhere"
    build_checked(short)  # imports from the config's directory


def test_every_setting_belongs_to_exactly_one_group():
    assert Settings.__bases__ == (*SETTINGS_GROUPS, BaseSettings)  # each group inherited, nothing else
    owners: dict[str, list[str]] = {}
    for group in SETTINGS_GROUPS:
        for name in group.model_fields:
            owners.setdefault(name, []).append(group.__name__)
    assert {name: groups for name, groups in owners.items() if len(groups) > 1} == {}
    assert set(owners) == set(Settings.model_fields)  # Settings adds no field of its own
    for group in SETTINGS_GROUPS:  # the reference's heading, then its intro
        heading, _, intro = inspect.cleandoc(group.__doc__ or "").partition("\n\n")
        assert heading and "\n" not in heading and intro.strip(), group.__name__


def test_each_setting_is_read_from_its_flat_environment_variable(monkeypatch):
    for group in SETTINGS_GROUPS:
        for name in group.model_fields:
            monkeypatch.setenv(f"REWARDSERVE_{name.upper()}", f"from-env-{name}")
    source = EnvSettingsSource(Settings)
    read = {name: source.get_field_value(field, name)[0] for name, field in Settings.model_fields.items()}
    assert read == {name: f"from-env-{name}" for name in Settings.model_fields}


def test_settings_of_every_group_parse_their_environment_as_before(monkeypatch):
    env = {
        "REWARDSERVE_PORT": "9001",
        "REWARDSERVE_CORS_ORIGINS": "https://a.example, https://b.example",
        "REWARDSERVE_MODELS": '[{"name": "m", "kind": "rule", "source": "exact_match"}]',
        "REWARDSERVE_POLICY_TOKENIZERS": '{"policy": "/tokenizers/policy"}',
        "REWARDSERVE_API_KEYS": "k1,,k2 ",
        "REWARDSERVE_MAX_ITEMS_PER_REQUEST": "10",
        "REWARDSERVE_RULE_PRIORITY": "idle",
        "REWARDSERVE_CODE_CALL_TIMEOUT_S": "12.5",
        "REWARDSERVE_IMAGE_URL_ALLOWLIST": "images.example",
        "REWARDSERVE_ADMIN_KEYS": "admin",
        "REWARDSERVE_GC_FREEZE": "false",
        "REWARDSERVE_FAULT_LOAD_DELAY_S": "2",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    s = Settings()
    assert s.port == 9001 and s.cors_origins == ["https://a.example", "https://b.example"]
    assert [m.name for m in s.models] == ["m"] and s.policy_tokenizers == {"policy": "/tokenizers/policy"}
    assert s.api_keys == ["k1", "k2"] and s.max_items_per_request == 10
    assert s.rule_limits().priority == "idle" and s.image_policy().url_allowlist == ("images.example",)
    code = next(spec for spec in s.model_specs() if spec.name == "code")
    assert code.options["timeout_s"] == 12.5
    assert s.admin_keys == ["admin"] and s.gc_freeze is False and s.fault_load_delay_s == 2.0
    # A flag's value given as a keyword is split the same way and wins over the environment.
    assert Settings(api_keys="k3, k4").api_keys == ["k3", "k4"]
    monkeypatch.setenv("REWARDSERVE_MAX_ITEMS_PER_REQUEST", "0")
    with pytest.raises(ValidationError, match="max_items_per_request"):
        Settings()


def test_unknown_or_out_of_bounds_settings_are_refused():
    with pytest.raises(ValidationError, match="max_item_per_request.*\n.*Extra inputs are not permitted"):
        Settings(max_item_per_request=10)
    with pytest.raises(ValidationError, match="admin_port"):
        Settings(admin_port=70_000)
    with pytest.raises(ValidationError, match="rule_cpu_share"):
        RulePoolSettings(rule_cpu_share=2)
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        LimitSettings(rule_workers=3)  # a group alone holds only its own fields


def test_a_group_s_methods_read_only_its_own_fields():
    assert LimitSettings(max_connections=400).requests_per_tenant() == 100
    assert RulePoolSettings(rule_workers=3, rule_memory_mb=512).rule_limits().memory_mb == 512


def test_the_settings_reference_lists_every_group_but_fault_injection():
    page = SETTINGS_PAGE.read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `REWARDSERVE_([A-Z0-9_]+)` \|", page, re.M))
    for group in SETTINGS_GROUPS:
        names = {name.upper() for name in group.model_fields}
        if group is FaultInjectionSettings:
            assert names and not [name for name in names if name in page]
        else:
            assert names <= listed, group.__name__
    assert listed == {name.upper() for name in Settings.model_fields} - {
        name.upper() for name in FaultInjectionSettings.model_fields
    }
