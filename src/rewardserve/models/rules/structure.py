"""Structure rules: JSON schema, required tags (think / answer format), tool calls, and
the DAPO overlong length penalty."""

from __future__ import annotations

import json
import re
from typing import Any

from rewardserve.models.rules import RuleError, Scored, rule

_FENCED = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


# Characters the search for a balanced {...} / [...] may read in failed attempts: each
# opening bracket starts a parse that can run to the end of the text, so "[" * 900
# before 400,000 characters of "1," would cost 900 passes.
MAX_JSON_SEARCH_CHARS = 2_000_000


def extract_json(text: str) -> Any:
    """The JSON value in a response: the whole text, a fenced ```json block, or the
    first balanced {...} / [...]. Raises ValueError when there is none, RuleError when
    the search would read more than MAX_JSON_SEARCH_CHARS."""
    candidates = [text.strip()] + [m.group(1).strip() for m in _FENCED.finditer(text)]
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except (ValueError, RecursionError):
            pass
    decoder = json.JSONDecoder()
    spent = 0
    for start, char in enumerate(text):
        if char in "{[":
            try:
                return decoder.raw_decode(text, start)[0]
            except json.JSONDecodeError as exc:
                spent += exc.pos - start + 1
            except (ValueError, RecursionError):
                spent += len(text) - start
            if spent > MAX_JSON_SEARCH_CHARS:
                raise RuleError(
                    f"the response has too many unclosed JSON brackets to search (over "
                    f"{MAX_JSON_SEARCH_CHARS} characters read)"
                )
    raise ValueError("no JSON value found")


@rule("json_schema")
def json_schema(response: str, reference: Any = None, *, schema: dict[str, Any] | None = None, **_: Any) -> float:
    """1.0 when the response holds JSON valid against ``schema`` (or the reference)."""
    import jsonschema  # type: ignore[import-untyped]  # no stubs installed (types-jsonschema)

    schema = schema if schema is not None else reference
    if not isinstance(schema, dict):
        raise RuleError("json_schema needs a 'schema' object (or the reference as schema)")
    from referencing import Registry
    from referencing.exceptions import Unresolvable

    try:
        validator_class = jsonschema.validators.validator_for(schema)
        validator_class.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise RuleError(f"invalid JSON schema: {exc.message}") from exc
    try:
        value = extract_json(response)
    except RuleError:
        raise
    except ValueError:
        return 0.0
    # An empty registry: a $ref resolves inside the schema (and to the bundled
    # meta-schemas) or not at all. Without one, jsonschema falls back to fetching the URL,
    # which would let a request make this worker GET any address, loopback included.
    try:
        return float(validator_class(schema, registry=Registry()).is_valid(value))
    except Unresolvable as exc:
        raise RuleError(
            f"json_schema: the $ref {str(exc.ref)[:200]!r} is not inside the schema; "
            "references outside it are never fetched"
        ) from None


@rule("think_format")
def think_format(
    response: str,
    reference: Any = None,
    *,
    tags: list[str] | None = None,
    strict: bool = True,
    **_: Any,
) -> float:
    """1.0 when each tag (default ``think`` then ``answer``: ``<think>...</think>
    <answer>...</answer>``) appears exactly once, as ``<tag>...</tag>``, in that order;
    ``strict``: nothing but whitespace around them (open-r1's format reward). A 0 says
    what was missing."""
    tags = tags or ["think", "answer"]
    if not all(isinstance(t, str) and re.fullmatch(r"[A-Za-z_][\w.-]*", t) for t in tags):
        raise RuleError("think_format: tags must be plain tag names")
    wanted = "".join(f"<{t}>...</{t}>" for t in tags)
    for tag in tags:
        opened, closed = response.count(f"<{tag}>"), response.count(f"</{tag}>")
        if opened != 1 or closed != 1:
            found = f"found {opened} and {closed}"
            return Scored(0.0, f"<{tag}> and </{tag}> must each appear once ({found}); wants {wanted}")
    gap = r"\s*" if strict else r".*?"
    pattern = gap + gap.join(rf"<{t}>.*?</{t}>" for t in tags) + gap
    if re.fullmatch(pattern, response, re.DOTALL) is None:
        outside = " with only whitespace around them (strict)" if strict else ""
        return Scored(0.0, f"the tags are not in the order {wanted}{outside}")
    return 1.0


def _calls(value: Any) -> list[dict[str, Any]]:
    calls = value if isinstance(value, list) else [value]
    out = []
    for call in calls:
        if isinstance(call, dict) and "function" in call and isinstance(call["function"], dict):
            call = call["function"]
        if not isinstance(call, dict) or "name" not in call:
            raise ValueError("a tool call needs a 'name'")
        args = call.get("arguments", {})
        if isinstance(args, str):
            args = json.loads(args) if args.strip() else {}
        out.append({"name": call["name"], "arguments": args})
    return out


def response_tool_calls(response: str) -> list[dict[str, Any]]:
    """Tool calls in a response: ``<tool_call>{...}</tool_call>`` blocks (Hermes / Qwen
    style, which is how the service renders an item's own tool_calls), else JSON."""
    blocks = _TOOL_CALL.findall(response)
    if blocks:
        return [c for block in blocks for c in _calls(json.loads(block))]
    return _calls(extract_json(response))


@rule("tool_call_match")
def tool_call_match(response: str, reference: Any, *, arguments: str = "exact", **_: Any) -> float:
    """Agreement of the response's tool calls with the reference call(s), in order: the
    share of reference calls whose name matches and whose arguments match — ``exact``
    (equal), ``subset`` (every reference argument present and equal), or ``partial``
    (credit for the share of reference arguments matched)."""
    if reference is None:
        raise RuleError("tool_call_match needs the reference call(s)")
    try:
        expected = _calls(reference)
    except (ValueError, TypeError) as exc:
        raise RuleError(f"tool_call_match: bad reference call: {exc}") from exc
    if arguments not in ("exact", "subset", "partial"):
        raise RuleError(f"tool_call_match: unknown arguments mode {arguments!r}")
    try:
        got = response_tool_calls(response)
    except RuleError:
        raise
    except (ValueError, TypeError):
        return 0.0
    total = 0.0
    for want, have in zip(expected, got):
        if want["name"] != have["name"]:
            continue
        w, h = want["arguments"], have["arguments"]
        if arguments == "exact":
            total += float(w == h)
        else:
            matched = sum(1 for k, v in w.items() if k in h and h[k] == v)
            share = matched / len(w) if w else 1.0
            total += share if arguments == "partial" else float(share == 1.0)
    return total / len(expected)


@rule("length_penalty")
def length_penalty(
    response: str,
    reference: Any = None,
    *,
    max_length: int,
    cache: int,
    unit: str = "chars",
    **_: Any,
) -> float:
    """DAPO's soft overlong penalty: 0 up to max_length - cache, then falling linearly to
    -1 at max_length, and -1 beyond. Length in ``chars`` or ``words``."""
    if unit not in ("chars", "words"):
        raise RuleError(f"length_penalty: unknown unit {unit!r}")
    if not 0 < cache <= max_length:
        raise RuleError("length_penalty needs 0 < cache <= max_length")
    length = len(response) if unit == "chars" else len(response.split())
    safe = max_length - cache
    if length <= safe:
        return 0.0
    if length <= max_length:
        return (safe - length) / cache
    return -1.0
