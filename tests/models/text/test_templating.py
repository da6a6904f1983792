"""Request templates: plain lookups render here, everything else only under budgets."""

from __future__ import annotations

import pytest

from rewardserve.models.errors import ItemError
from rewardserve.models.text.templating import (
    MAX_OUTPUT_CHARS,
    TemplateLimitError,
    all_plain,
    check_syntax,
    is_plain,
    render_field,
    render_field_bounded,
)

VARIABLES = {"item": {"reference": {"answer": "42", "list": [1, 2]}, "response": "r" * 1000}, "response": "r"}


@pytest.mark.parametrize(
    ("source", "plain"),
    [
        ("{{ item.reference.answer }}", True),
        ("{{ item['reference']['list'][0] }} and text", True),
        ("{{ item.reference.answer | upper }}", False),
        ("{{ item.reference.answer * 2 }}", False),
        ("{% for x in item.reference.list %}{{ x }}{% endfor %}", False),
        ("{{ item[key] }}", False),
    ],
)
def test_plain_means_only_field_lookups(source, plain):
    assert is_plain(source) is plain


def test_plain_templates_render_in_process_with_an_output_budget():
    assert render_field({"a": ["{{ item.reference.answer }}!", 3]}, VARIABLES) == {"a": ["42!", 3]}
    many = "{{ item.response }}" * (MAX_OUTPUT_CHARS // 1000 + 1)
    assert all_plain(many)
    with pytest.raises(TemplateLimitError, match="renders to over"):
        render_field(many, VARIABLES)
    with pytest.raises(ItemError, match="no attribute|undefined"):
        render_field("{{ item.metadata.x }}", VARIABLES)
    with pytest.raises(TemplateLimitError):
        render_field("{{ 1 + 1 }}", VARIABLES)  # not plain: the pool's business


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("{{ 'x' * 1000000000 }}", "characters"),
        ("{{ item.response * 100000 }}", "characters"),
        ("{{ 10 ** 1000000 }}", "bits"),
        ("{{ (2 ** 4000) * (2 ** 4000) }}", "bits"),
        ("{% for i in range(100000) %}{% for j in range(100) %}{% endfor %}{% endfor %}", "steps"),
        ("{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}", "RecursionError"),
        ("{{ range(10) | list * 1000000 }}", "characters"),
    ],
)
def test_bounded_rendering_refuses_what_would_run_away(source, match):
    with pytest.raises(TemplateLimitError, match=match):
        render_field_bounded(source, VARIABLES)


def test_bounded_rendering_still_renders():
    source = "{% for x in item.reference.list %}{{ x * 2 }},{% endfor %}{{ item.reference.answer | int + 1 }}"
    assert render_field_bounded(source, VARIABLES) == "2,4,43"
    with pytest.raises(ItemError):
        render_field_bounded("{{ item.nope.deeper }}", VARIABLES)


def test_syntax_errors_are_the_request_s():
    with pytest.raises(TemplateLimitError, match="does not parse"):
        check_syntax({"a": ["fine", "{{ broken"]})
    check_syntax({"a": "{{ fine }}", "b": 3})
