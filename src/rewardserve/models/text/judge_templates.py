"""Judge templates: prompts rendered from an item, the choices a verdict can take, and
the parsers that read a generated verdict.

Templates are Jinja, rendered in a sandbox with strict undefined values: a template can
read ``{{ item.reference.answer }}`` but cannot reach Python, and a missing field is a
clear error for that item.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, cast

import yaml
from jinja2 import StrictUndefined, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from rewardserve.models.errors import ItemError
from rewardserve.protocol import Item, Message, Role

_TEMPLATES_FILE = Path(__file__).parent.parent / "presets" / "judge_templates.yaml"


@cache
def _jinja() -> ImmutableSandboxedEnvironment:
    return ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False)


@dataclass(frozen=True)
class Verdict:
    score: float
    verdict: str
    scores: list[float] | None = None


class ParseError(ValueError):
    """No verdict in the judge's text: the sample is invalid, never guessed."""


@dataclass
class JudgeTemplate:
    name: str
    messages: list[dict[str, str]]
    parser: str
    prefill: str = ""
    logprob_prefill: str | None = None
    choices: list[list[str]] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    description: str = ""

    @classmethod
    def from_dict(cls, name: str, data: dict[str, Any]) -> JudgeTemplate:
        known = {"messages", "parser", "prefill", "logprob_prefill", "choices", "values", "description"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"template {name!r}: unknown keys {sorted(unknown)}")
        template = cls(name=name, **data)
        if template.parser not in PARSERS:
            raise ValueError(f"template {name!r}: unknown parser {template.parser!r}")
        if len(template.values) != len(template.choices):
            raise ValueError(f"template {name!r}: one value per choice")
        for message in template.messages:
            _jinja().from_string(message["content"])  # syntax errors now, not per request
        return template

    def render(self, variables: dict[str, Any]) -> list[Message]:
        try:
            return [
                # Message checks the role (a template's own) against Role.
                Message(role=cast(Role, m["role"]), content=_jinja().from_string(m["content"]).render(**variables))
                for m in self.messages
            ]
        except TemplateError as exc:
            raise ItemError(f"template {self.name!r}: {exc}") from exc

    def parse(self, text: str) -> Verdict:
        return PARSERS[self.parser](text)


def builtin_templates() -> dict[str, JudgeTemplate]:
    with open(_TEMPLATES_FILE, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    return {name: JudgeTemplate.from_dict(name, spec) for name, spec in data.items()}


def load_templates(custom: dict[str, Any] | None) -> dict[str, JudgeTemplate]:
    """The built-in templates plus a config's own (which may replace them by name)."""
    templates = builtin_templates()
    for name, spec in (custom or {}).items():
        templates[name] = JudgeTemplate.from_dict(name, spec)
    return templates


def item_variables(item: Item, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a template can read: question (the user turns), response, reference, the
    whole item, and the request's own variables."""
    turns = item.conversation()
    question = "\n".join(m.text() for m in turns[:-1] if m.role == "user")
    reference = item.reference
    variables = {
        "question": question,
        "response": item.response_text(),
        "item": item.model_dump(exclude_none=True),
        "metadata": item.metadata or {},
    }
    if reference is not None:
        variables["reference"] = reference if isinstance(reference, str) else json.dumps(reference)
    variables.update(extra or {})
    return variables


# --------------------------------------------------------------------------- parsers


def _last(pattern: str, text: str, flags: int = re.IGNORECASE) -> str:
    matches = re.findall(pattern, text, flags)
    if not matches:
        raise ParseError("no verdict found")
    last: str = matches[-1]  # the patterns have at most one group: each match is a str
    return last


def parse_yes_no(text: str) -> Verdict:
    word = _last(r"\b(yes|no)\b", text).lower()
    return Verdict(1.0 if word == "yes" else 0.0, word)


def parse_prometheus_absolute(text: str) -> Verdict:
    grade = int(_last(r"\[RESULT\]\s*\(?\s*([1-5])\b", text, 0))
    return Verdict((grade - 1) / 4.0, str(grade))


def parse_prometheus_relative(text: str) -> Verdict:
    choice = _last(r"\[RESULT\]\s*\(?\s*(A|B)\b", text, 0)
    return Verdict(1.0 if choice == "A" else 0.0, choice)


def parse_support_label(text: str) -> Verdict:
    label = _last(r"\b(partial_support|not_support|support)\b", text).lower()
    return Verdict({"support": 1.0, "partial_support": 0.5, "not_support": 0.0}[label], label)


def parse_listwise_json(text: str) -> Verdict:
    """``{"scores": {"1": 5, ...}, "best-to-worst": ["1", ...]}``: per-response scores on
    1-5, normalised to 0..1, in response order; ``score`` is the first response's."""
    from rewardserve.models.rules.structure import extract_json

    try:
        value = extract_json(text)
        raw = {str(k): float(v) for k, v in value["scores"].items()}
        order = [str(x) for x in value["best-to-worst"]]
        keys = sorted(raw, key=lambda k: int(k))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ParseError(f"no listwise JSON verdict: {exc}") from exc
    if sorted(order, key=int) != keys or keys != [str(i) for i in range(1, len(keys) + 1)]:
        raise ParseError("the ranking does not name each response exactly once")
    scores = [min(max((raw[k] - 1) / 4.0, 0.0), 1.0) for k in keys]
    return Verdict(scores[0], json.dumps({"best-to-worst": order}), scores)


PARSERS = {
    "yes_no": parse_yes_no,
    "prometheus_absolute": parse_prometheus_absolute,
    "prometheus_relative": parse_prometheus_relative,
    "support_label": parse_support_label,
    "listwise_json": parse_listwise_json,
}
