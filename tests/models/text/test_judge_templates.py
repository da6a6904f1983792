"""Judge templates and verdict parsers."""

from __future__ import annotations

import pytest

from rewardserve.models.errors import ItemError
from rewardserve.models.text.judge_templates import (
    JudgeTemplate,
    ParseError,
    builtin_templates,
    item_variables,
    load_templates,
)
from rewardserve.protocol import Item


@pytest.mark.parametrize(
    ("parser", "text", "score", "verdict"),
    [
        ("yes_no", "Let me check... the response is right. Yes", 1.0, "yes"),
        ("yes_no", "Answer: No.", 0.0, "no"),
        ("yes_no", "yes at first, but on reflection: NO", 0.0, "no"),
        ("prometheus_absolute", "Feedback: solid but terse. [RESULT] 4", 0.75, "4"),
        ("prometheus_absolute", "Feedback: bad [RESULT] (1)", 0.0, "1"),
        ("prometheus_relative", "Feedback: B misses the point. [RESULT] A", 1.0, "A"),
        ("prometheus_relative", "Feedback: ... [RESULT] B", 0.0, "B"),
        ("support_label", "Label: partial_support", 0.5, "partial_support"),
        ("support_label", "not_support", 0.0, "not_support"),
        ("support_label", "support", 1.0, "support"),
    ],
)
def test_parsers_read_their_formats(parser, text, score, verdict):
    template = builtin_templates()[
        {
            "yes_no": "yes_no",
            "prometheus_absolute": "prometheus_absolute",
            "prometheus_relative": "prometheus_relative",
            "support_label": "nugget_support",
        }[parser]
    ]
    got = template.parse(text)
    assert got.score == score and got.verdict == verdict


@pytest.mark.parametrize(
    ("name", "garbage"),
    [
        ("yes_no", "maybe? it depends"),
        ("prometheus_absolute", "Feedback: fine [RESULT] 7"),
        ("prometheus_absolute", "a score of 4"),
        ("prometheus_relative", "[RESULT] C"),
        ("nugget_support", "supported, I think"),
        ("listwise_principle", '{"scores": {"1": 5}, "best-to-worst": ["1", "2"]}'),
        ("listwise_principle", "the first is best"),
    ],
)
def test_garbage_is_a_parse_error(name, garbage):
    with pytest.raises(ParseError):
        builtin_templates()[name].parse(garbage)


def test_listwise_json():
    verdict = builtin_templates()["listwise_principle"].parse(
        'Here: {"scores": {"1": 2, "2": 5, "3": 3}, "best-to-worst": ["2", "3", "1"]}'
    )
    assert verdict.scores == [0.25, 1.0, 0.5] and verdict.score == 0.25


def test_templates_render_item_fields_in_a_sandbox():
    item = Item(prompt="What is 2+2?", response="4", reference={"answer": "4", "unit": None})
    variables = item_variables(item, {"rubric": "be exact"})
    assert variables["question"] == "What is 2+2?" and variables["reference"] == '{"answer": "4", "unit": null}'
    template = JudgeTemplate.from_dict(
        "t",
        {
            "messages": [{"role": "user", "content": "{{ item.reference.answer }} / {{ rubric }}"}],
            "parser": "yes_no",
        },
    )
    assert template.render(variables)[0].content == "4 / be exact"
    missing = JudgeTemplate.from_dict(
        "m", {"messages": [{"role": "user", "content": "{{ nope }}"}], "parser": "yes_no"}
    )
    with pytest.raises(ItemError, match="nope"):
        missing.render(variables)
    escape = JudgeTemplate.from_dict(
        "e",
        {
            "messages": [{"role": "user", "content": "{{ ''.__class__.__mro__[1].__subclasses__() }}"}],
            "parser": "yes_no",
        },
    )
    with pytest.raises(ItemError):
        escape.render(variables)


def test_custom_templates_are_checked_when_loaded():
    custom = {
        "mine": {
            "messages": [{"role": "user", "content": "{{ response }}?"}],
            "parser": "yes_no",
            "choices": [["Y"], ["N"]],
            "values": [1.0, 0.0],
        }
    }
    assert "mine" in load_templates(custom)
    with pytest.raises(ValueError, match="parser"):
        load_templates({"bad": {"messages": [], "parser": "astrology"}})
    with pytest.raises(ValueError, match="unknown keys"):
        load_templates({"bad": {"messages": [], "parser": "yes_no", "colour": "red"}})
