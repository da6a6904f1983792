"""Template attacks: a request's Jinja renders under budgets, and asking too much is a
422 naming the criterion, never a 500, a frozen server or gigabytes of memory."""

from __future__ import annotations

import pytest

ITEM = {"response": r"\boxed{42}", "reference": {"answer": "42"}}


@pytest.mark.parametrize(
    "template",
    [
        "{{ 'x' * 1000000000 }}",
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "{{ range(10**9) | list | length }}",
        "{{ 10**1000000 }}",
        "{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}",
        "{% set ns = namespace(a='xx') %}{% for i in range(40) %}{% set ns.a = ns.a ~ ns.a %}{% endfor %}{{ ns.a }}",
        "{{ 'a' | center(1000000000) }}",
        "{% for c in item.response * 1000000 %}{% endfor %}",
    ],
)
def test_runaway_templates_are_422s_naming_the_criterion(attacked, template):
    criteria = [{"name": "e", "fn": "exact_match", "args": {"extract": template}}]
    with attacked.watch():
        response = attacked.post("/v1/rubric", {"items": [ITEM], "criteria": criteria})
    assert response.status_code == 422, response.text[:300]
    assert response.json()["error"]["param"] == "criteria[0].args"


def test_a_long_loop_over_the_response_dies_with_its_worker(attacked):
    """No budget sees a loop that yields nothing; the pool's time limit does."""
    text = "{% for a in item.response %}{% for b in item.response %}{% endfor %}{% endfor %}x"
    item = {"response": "y" * 30_000, "reference": "x"}
    with attacked.watch():
        response = attacked.post(
            "/v1/rubric",
            {
                "items": [item],
                "criteria": [{"name": "e", "fn": "exact_match", "args": {"extract": "none", "case_sensitive": text}}],
            },
        )
    assert response.status_code == 200
    (result,) = response.json()["results"]
    assert result["valid"] is False and "timed out" in result["criteria"][0]["error"]


def test_data_is_never_rendered_and_bad_syntax_is_a_422(attacked):
    criteria = [{"name": "e", "fn": "exact_match", "args": {"extract": "boxed"}}]
    items = [{**ITEM, "reference": "{{ never rendered }}"}]
    assert attacked.post("/v1/rubric", {"items": items, "criteria": criteria}).status_code == 200
    bad_syntax = [{"name": "e", "fn": "exact_match", "args": {"extract": "{{ oops"}}]
    response = attacked.post("/v1/rubric", {"items": [ITEM], "criteria": bad_syntax})
    assert response.status_code == 422 and response.json()["error"]["param"] == "criteria[0].args"


def test_constant_formula_parts_and_repeated_choices_are_422s(attacked):
    formula = {
        "items": [ITEM],
        "criteria": [{"name": "e", "fn": "exact_match"}],
        "aggregation": {"mode": "formula", "formula": "e * 9 ** 9 ** 9"},
    }
    response = attacked.post("/v1/rubric", formula)
    assert response.status_code == 422 and response.json()["error"]["param"] == "aggregation.formula"
    choices = {
        "items": [ITEM],
        "judge": "judge",
        "criteria": [
            {"name": "e", "fn": "exact_match"},
            {"name": "q", "text": "How good?", "choices": ["good", "good", "bad"]},
        ],
    }
    response = attacked.post("/v1/rubric", choices)
    assert response.status_code == 422 and response.json()["error"]["param"] == "criteria[1].choices"
