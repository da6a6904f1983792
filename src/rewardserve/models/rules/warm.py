"""Imported by the rule pools' fork server (worker.PRELOAD): the rule libraries
loaded and their first-call set-up done once, so every worker forked from it starts
warm (math-verify's first parse alone builds its grammar)."""

from rewardserve.models.rules import get_rule, rule_names
from rewardserve.models.text import templating

rule_names()
templating.render_field_bounded("{{ 1 }}", {})
get_rule("math_equiv").warm()
