"""docs/reference/: the committed pages are what docs/generate_reference.py writes from
the code, and they name every setting, error type, metric and operation the service has."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "docs" / "generate_reference.py"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_reference", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    return _load_generator()


@pytest.fixture(scope="module")
def app(generator: ModuleType) -> Any:
    return generator._reference_app()


@pytest.fixture(scope="module")
def pages(generator: ModuleType) -> dict[str, str]:
    return generator.pages()


def _committed(name: str) -> str:
    path = ROOT / "docs" / "reference" / name
    return path.read_text(encoding="utf-8") if path.exists() else ""


def test_the_committed_pages_are_what_the_generator_writes(generator: ModuleType, pages: dict[str, str]) -> None:
    assert set(pages) == {"settings.md", "options.md", "limits.md", "errors.md", "metrics.md", "http-api.md"}
    stale = [name for name, text in pages.items() if _committed(name) != text]
    assert not stale, f"docs/reference/{', '.join(stale)} out of date with the code: run `{generator.COMMAND}`"


def test_the_settings_page_names_every_setting_with_what_it_does(generator: ModuleType, pages: dict[str, str]) -> None:
    from rewardserve.service.settings import Settings

    rows = {
        match.group(1): line
        for line in pages["settings.md"].splitlines()
        if (match := re.match(r"\| `REWARDSERVE_([A-Z0-9_]+)` \|", line))
    }
    # Every setting but the service's own test knobs (tests/service/test_settings.py checks which).
    documented = {name.upper() for group in generator.documented_setting_groups() for name in group.model_fields}
    assert set(rows) == documented
    undescribed = [
        name for name, field in Settings.model_fields.items() if not generator.setting_description(name, field)
    ]
    assert not undescribed, f"settings without a description (Field(description=...)): {undescribed}"
    stale_notes = set(generator.SETTING_NOTES) - set(Settings.model_fields)
    assert not stale_notes, f"SETTING_NOTES describe what is not a setting: {sorted(stale_notes)}"


def test_the_errors_page_names_every_error_type_with_its_status(generator: ModuleType, pages: dict[str, str]) -> None:
    from rewardserve.protocol import ERROR_STATUS

    page = pages["errors.md"]
    for kind, status in ERROR_STATUS.items():
        assert f"| `{kind}` | {status} |" in page, kind
    assert set(generator.ERROR_MEANINGS) == set(ERROR_STATUS), "every error type needs a meaning, and no other"


def test_the_errors_page_names_every_type_the_service_errors_raise(pages: dict[str, str]) -> None:
    from rewardserve.engine import errors as engine_errors
    from rewardserve.models import errors as domain_errors

    raised = {
        cls.error_type
        for module in (domain_errors, engine_errors)
        for cls in vars(module).values()
        if isinstance(cls, type) and issubclass(cls, domain_errors.RequestError)
    }
    assert raised and all(f"`{kind}`" in pages["errors.md"] for kind in raised)


def test_the_metrics_page_names_every_metric_the_service_exposes(app: Any, pages: dict[str, str]) -> None:
    from prometheus_client import generate_latest

    exposed = set(re.findall(r"^# TYPE (\S+) ", generate_latest(app.state.svc.metrics.registry).decode(), re.M))
    assert len(exposed) > 10
    page = pages["metrics.md"]
    missing = [name for name in exposed if f"`{name}`" not in page and f"`{name}_total`" not in page]
    assert not missing, missing


def test_the_http_page_names_every_operation(app: Any, pages: dict[str, str]) -> None:
    schema = app.openapi()
    for path, operations in schema["paths"].items():
        for method in operations:
            assert f"## `{method.upper()} {path}`" in pages["http-api.md"]
    for name in schema["components"]["schemas"]:
        assert f"### {name}\n" in pages["http-api.md"]


def test_the_options_page_holds_every_entry_key_kind_and_preset(generator: ModuleType, pages: dict[str, str]) -> None:
    from rewardserve.models.options_reference import kind_names
    from rewardserve.models.presets import all_presets
    from rewardserve.models.spec import ModelSpec

    page = pages["options.md"]
    for kind in kind_names():
        assert f"**`kind: {kind}`**" in page
    for preset in all_presets():
        assert f"| `{preset['name']}` |" in page
    undescribed = [k for k, f in ModelSpec.model_fields.items() if not generator.model_entry_description(k, f)]
    assert not undescribed, f"model entry keys without a description (Field(description=...)): {undescribed}"
    assert not set(generator.MODEL_ENTRY_NOTES) - set(ModelSpec.model_fields)
    for key in ModelSpec.model_fields:
        assert f"| `{key}` |" in page


def test_the_limits_page_shows_each_cap_at_its_value_in_the_code(generator: ModuleType, pages: dict[str, str]) -> None:
    for module, name, value, _ in generator.constant_limits():
        assert f"`{module.removeprefix('rewardserve.')}.{name}` | `{generator._number(value)}` |" in pages["limits.md"]


def test_the_generator_ignores_this_environments_settings(
    generator: ModuleType, pages: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REWARDSERVE_DOCS", "false")
    monkeypatch.setenv("REWARDSERVE_BUILTIN_RULES", "false")
    assert generator.http_page(generator._reference_app()) == pages["http-api.md"]
