"""Templates that come from requests (rubric criterion ``args`` and ``text``), rendered
with limits.

A request's template is code the client wrote, so it runs under budgets:

- *plain* templates, only field lookups such as ``{{ item.reference.answer }}``, cost
  what their output costs: they render in the serving process with an output budget
  checked chunk by chunk as Jinja yields it;
- every other template renders in a rule-pool worker (time and memory limits of the
  worker, models/rules/worker.py) in a sandbox that also checks, before computing
  them, the sizes of ``*``, ``**`` and ``+`` and the total length of ``range`` calls.

A template that asks for too much (output, numbers, ranges, recursion) is the
request's fault: ``TemplateLimitError``, a 422 naming the criterion. A field the item
does not have is that item's problem: ``ItemError``, the item is invalid.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from functools import cache
from typing import Any

from jinja2 import StrictUndefined, TemplateError, UndefinedError, nodes
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

from rewardserve.models.errors import ItemError

MAX_OUTPUT_CHARS = 100_000  # one rendered field
MAX_VALUE_CHARS = 4_000_000  # one string or list built by * or + while rendering
MAX_INT_BITS = 4096  # integers built by * and **
MAX_RANGE_STEPS = 100_000  # all range() calls of one render together


class TemplateLimitError(Exception):
    """The template asked for more than its budget (a 422 naming the criterion)."""


def has_template(value: Any) -> bool:
    """Whether a field holds Jinja anywhere (strings, recursively through lists and dicts)."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value or "{#" in value
    if isinstance(value, list):
        return any(has_template(v) for v in value)
    if isinstance(value, dict):
        return any(has_template(v) for v in value.values())
    return False


_PLAIN_NODES = (nodes.Template, nodes.Output, nodes.TemplateData, nodes.Name, nodes.Getattr, nodes.Getitem, nodes.Const)


# Bounded: the sources are the clients' own strings.
@functools.lru_cache(maxsize=512)
def is_plain(source: str) -> bool:
    """Only text and field lookups (``{{ a.b["c"] }}``): safe to render in process.
    Raises TemplateLimitError for a template that does not parse."""
    try:
        tree = _plain_environment().parse(source)
    except TemplateError as exc:
        raise TemplateLimitError(f"the template does not parse: {exc}") from exc
    for node in tree.find_all(nodes.Node):
        if not isinstance(node, _PLAIN_NODES):
            return False
        if isinstance(node, nodes.Getitem) and not isinstance(node.arg, nodes.Const):
            return False
    return True


def check_syntax(value: Any) -> None:
    """TemplateLimitError for any string in ``value`` that is not a valid template."""
    if isinstance(value, str):
        if has_template(value):
            is_plain(value)
    elif isinstance(value, list):
        for v in value:
            check_syntax(v)
    elif isinstance(value, dict):
        for v in value.values():
            check_syntax(v)


def all_plain(value: Any) -> bool:
    if isinstance(value, str):
        return not has_template(value) or is_plain(value)
    if isinstance(value, list):
        return all(all_plain(v) for v in value)
    if isinstance(value, dict):
        return all(all_plain(v) for v in value.values())
    return True


def render_field(value: Any, variables: dict[str, Any]) -> Any:
    """Render every template in ``value`` (strings, recursively through lists and
    dicts). Plain templates are rendered here; anything else must go through
    ``render_field_bounded`` in a pool worker."""
    if isinstance(value, str):
        if not has_template(value):
            return value
        if not is_plain(value):
            raise TemplateLimitError("this template needs the rule pool")  # a caller's bug
        return _render(_plain_environment(), value, variables)
    if isinstance(value, list):
        return [render_field(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: render_field(v, variables) for k, v in value.items()}
    return value


def render_field_bounded(value: Any, variables: dict[str, Any]) -> Any:
    """``render_field`` for any template, with the sandbox's budgets: run it where a
    runaway render costs only a pool worker."""
    if isinstance(value, str):
        if not has_template(value):
            return value
        budget = _RangeBudget(MAX_RANGE_STEPS)
        return _render(_bounded_environment(), value, {**variables, "range": budget.range})
    if isinstance(value, list):
        return [render_field_bounded(v, variables) for v in value]
    if isinstance(value, dict):
        return {k: render_field_bounded(v, variables) for k, v in value.items()}
    return value


def _render(env: ImmutableSandboxedEnvironment, source: str, variables: dict[str, Any]) -> str:
    try:
        template = env.from_string(source)
        parts, size = [], 0
        for chunk in template.generate(**variables):
            size += len(chunk)
            if size > MAX_OUTPUT_CHARS:
                raise TemplateLimitError(f"the template renders to over {MAX_OUTPUT_CHARS} characters")
            parts.append(chunk)
        return "".join(parts)
    except UndefinedError as exc:
        raise ItemError(f"template field {source[:60]!r}: {exc}") from exc
    except (TemplateLimitError, ItemError):
        raise
    except (SecurityError, OverflowError, RecursionError, MemoryError) as exc:
        raise TemplateLimitError(f"the template is over its limits: {type(exc).__name__}: {exc}") from exc
    except (TemplateError, ArithmeticError, ValueError, TypeError, LookupError, AttributeError) as exc:
        # Depends on this item's data (a number where text was expected, say).
        raise ItemError(f"template field {source[:60]!r}: {type(exc).__name__}: {exc}") from exc


@cache
def _plain_environment() -> ImmutableSandboxedEnvironment:
    return ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False)


class _RangeBudget:
    """``range`` for one render: every call's length counts against one budget."""

    def __init__(self, steps: int):
        self.left = steps

    def range(self, *args: int) -> range:
        r = range(*args)
        if len(r) > self.left:
            raise TemplateLimitError(f"the template's ranges run over {MAX_RANGE_STEPS} steps")
        self.left -= len(r)
        return r


def _bits(x: Any) -> float:
    return abs(x).bit_length() if isinstance(x, int) else 0


def _size(x: Any) -> int:
    return len(x) if isinstance(x, (str, list, tuple)) else 0


def _check_sizes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Widths and counts given to filters and methods (``center(10**9)``, ``'%*d'``)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_VALUE_CHARS:
            raise TemplateLimitError(f"a number given to a filter or method is over {MAX_VALUE_CHARS}")


def _bounded_filter(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)  # keeps jinja's pass_context / pass_environment marks
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _check_sizes(args, kwargs)
        out = fn(*args, **kwargs)
        if _size(out) > MAX_VALUE_CHARS:
            raise TemplateLimitError(f"the template builds a value of over {MAX_VALUE_CHARS} characters")
        return out

    return bounded


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, **options: Any):
        super().__init__(**options)
        self.filters = {name: _bounded_filter(fn) for name, fn in self.filters.items()}

    def call(
        __self,  # noqa: N805 (jinja's signature)
        __context: Context,
        __obj: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        _check_sizes(args, kwargs)
        return super().call(__context, __obj, *args, **kwargs)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
            if right * math.log2(abs(left)) > MAX_INT_BITS:
                raise TemplateLimitError(f"a power in the template is over {MAX_INT_BITS} bits")
        if operator == "*":
            if isinstance(left, int) and isinstance(right, int) and _bits(left) + _bits(right) > MAX_INT_BITS:
                raise TemplateLimitError(f"a product in the template is over {MAX_INT_BITS} bits")
            count = right if isinstance(right, int) else left if isinstance(left, int) else 0
            if max(_size(left), _size(right)) * max(count, 0) > MAX_VALUE_CHARS:
                raise TemplateLimitError(f"the template builds a value of over {MAX_VALUE_CHARS} characters")
        if operator == "+" and _size(left) + _size(right) > MAX_VALUE_CHARS:
            raise TemplateLimitError(f"the template builds a value of over {MAX_VALUE_CHARS} characters")
        if operator == "%" and isinstance(left, str):
            _check_sizes(right if isinstance(right, tuple) else (right,), {})
        return super().call_binop(context, operator, left, right)


@cache
def _bounded_environment() -> _BoundedEnvironment:
    return _BoundedEnvironment(undefined=StrictUndefined, autoescape=False)
