"""Request bodies parsed under limits, off the event loop.

A 32 MiB body can hold two million tiny items or ten million empty lists; building
those as Python objects (and then as pydantic models) costs seconds and gigabytes. So a
body is checked before it is parsed, and parsed and validated in a worker thread:

1. the number of JSON values: over ``max_json_values`` is a 413. While the body
   arrives only its quotes are counted (one pass per chunk on the event loop), and the
   body is refused unread as soon as its strings alone pass the limit; the whole body's
   brackets and commas are counted in the worker thread (string contents excluded, by a
   second look, when that quick upper bound is over the limit);
2. ``json.loads`` with integers of at most ``MAX_INT_DIGITS`` digits and no
   NaN / Infinity (422 naming the problem, not "not valid JSON");
3. the top-level list (``items``, ``query``, ``input``) counted before any model is
   built: over ``max_items_per_request`` is a 413 naming it;
4. strings that hold an unpaired UTF-16 surrogate (``"\\ud800"``, which JSON allows and
   UTF-8 cannot carry) are a 422 naming the field, found only when the raw body has
   such an escape at all;
5. the route's body model validated in the thread; FastAPI then receives the model
   itself and does not validate it again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope

from rewardserve.service.errors import BodyError
from rewardserve.service.http.admission import scope_of

MAX_INT_DIGITS = 1000
LISTS = ("items", "query", "input")  # the list a request's limit counts, by route
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class QuoteCount:
    """Kept while a body arrives, on the event loop: one pass over each chunk (its quotes),
    so a big body costs the loop little. The escaped quotes are counted only once the
    quotes say the strings may be over the limit."""

    def __init__(self) -> None:
        self.quotes = 0
        self._escaped = 0
        self._looked = 0  # chunks whose escaped quotes are counted

    def add(self, chunk: bytes) -> None:
        self.quotes += chunk.count(b'"')

    def may_be_over(self, limit: int) -> bool:
        return self.quotes // 2 > limit

    def strings(self, chunks: list[bytes]) -> int:
        """Strings in ``chunks`` (all those added), at least: each quote pair not escaped."""
        for i in range(self._looked, len(chunks)):
            self._escaped += chunks[i].count(b'\\"')
            if i and chunks[i - 1].endswith(b"\\") and chunks[i].startswith(b'"'):
                self._escaped += 1  # an escape split across two chunks
        self._looked = len(chunks)
        return (self.quotes - self._escaped) // 2


def structure_outside_strings(body: bytes) -> int:
    """Commas and opening brackets outside strings, plus one: the exact bound."""
    total, inside = 1, False
    for part in body.split(b'"'):
        if not inside:
            total += part.count(b",") + part.count(b"{") + part.count(b"[")
        elif (len(part) - len(part.rstrip(b"\\"))) % 2 == 1:
            continue  # the quote after this part is escaped: still inside the string
        inside = not inside
    return total


def count_values(body: bytes, limit: int) -> int:
    """How many JSON values (and object members) the body holds, at most: exact outside
    strings. Cheap when the quick bound is under ``limit``."""
    structure = 1 + body.count(b",") + body.count(b"{") + body.count(b"[")
    if structure <= limit:
        return structure
    strings = (body.count(b'"') - body.count(b'\\"')) // 2
    if strings > limit:  # each string is a value (or a key): no need to look closer
        return strings
    return structure_outside_strings(body)


def _bounded_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS:
        raise BodyError(422, f"a number in the body has {len(text)} digits, over the limit of {MAX_INT_DIGITS}")
    return int(text)


def _no_constant(name: str) -> float:
    raise BodyError(422, f"{name} is not a JSON number")


def _surrogate_path(value: Any) -> str | None:
    """The path of the first string holding an unpaired surrogate, or None."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return path or "body"
        elif isinstance(node, dict):
            for key, child in node.items():
                stack.append((key, path or "body"))
                stack.append((child, f"{path}.{key}" if path else str(key)))
        elif isinstance(node, list):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(node))
    return None


def too_many_values(values: int, limit: int, unread: bool = False) -> BodyError:
    # A body refused before it has all arrived: the connection is not kept (the rest of
    # the upload would have to be read and thrown away first).
    return BodyError(
        413,
        f"the body holds about {values} JSON values, over the limit of {limit}",
        headers={"connection": "close"} if unread else None,
    )


def parse_body(body: bytes, *, max_values: int, max_items: int) -> Any:
    """The parsed JSON of a request body, or BodyError (413 / 422)."""
    values = count_values(body, max_values)
    if values > max_values:
        raise too_many_values(values, max_values)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(422, f"the body is not UTF-8: {exc.reason} at byte {exc.start}") from exc
    try:
        value = json.loads(text, parse_int=_bounded_int, parse_constant=_no_constant)
    except RecursionError as exc:
        raise BodyError(422, "the body is nested too deeply") from exc
    except json.JSONDecodeError as exc:
        raise BodyError(422, f"the body is not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})") from exc
    if isinstance(value, dict):
        for name in LISTS:
            listed = value.get(name)
            if isinstance(listed, list) and len(listed) > max_items:
                raise BodyError(
                    413,
                    f"{len(listed)} entries in '{name}' is over the limit of {max_items} per "
                    "request; split the list (the client does this for you)",
                    param=name,
                )
    if _SURROGATE_ESCAPE.search(body):
        path = _surrogate_path(value)
        if path is not None:
            raise BodyError(
                422, f"{path}: the text holds an unpaired UTF-16 surrogate, which is not valid Unicode", param=path
            )
    return value


class BoundedRoute(APIRoute):
    """A route whose JSON body goes through ``parse_body`` and its model's validation
    in a worker thread."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        model = self._body_model()
        if model is None:
            return handler

        async def bounded(request: Request) -> Response:
            bounded_request = _BoundedRequest(request.scope, request.receive, model)
            # Parsed here, before FastAPI's handler: a refusal leaves as the RequestError
            # it is (FastAPI would turn any error while it parses a body into a bare 400).
            content_type = request.headers.get("content-type", "application/json")
            if await bounded_request.body():
                if "json" not in content_type:
                    raise BodyError(
                        422,
                        f"the body must be JSON sent with the header Content-Type: application/json "
                        f"(this one came as {content_type[:80]!r})",
                        param="content-type",
                    )
                await bounded_request.json()
            return await handler(bounded_request)

        return bounded

    def _body_model(self) -> type[BaseModel] | None:
        params = self.dependant.body_params
        if len(params) != 1:
            return None
        annotation = getattr(params[0].field_info, "annotation", None)
        return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


class _BoundedRequest(Request):
    def __init__(self, scope: Scope, receive: Receive, model: type[BaseModel]):
        super().__init__(scope, receive)
        self._model = model
        self._counted = QuoteCount()

    async def body(self) -> bytes:
        """The body, counted chunk by chunk; refused as soon as its strings alone are
        over the value limit."""
        if not hasattr(self, "_body"):
            limit = self.app.state.svc.settings.max_json_values
            chunks = []
            async for chunk in self.stream():
                self._counted.add(chunk)
                chunks.append(chunk)
                if self._counted.may_be_over(limit) and (strings := self._counted.strings(chunks)) > limit:
                    raise too_many_values(strings, limit, unread=True)
            self._body = b"".join(chunks)
        return self._body

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            svc = self.app.state.svc
            settings = svc.settings
            async with svc.engine.gate.slot(scope_of(self).tenant):
                self._json = await run_in_threadpool(
                    self._parse, body, settings.max_json_values, settings.max_items_per_request
                )
        return self._json

    def _parse(self, body: bytes, max_values: int, max_items: int) -> Any:
        value = parse_body(body, max_values=max_values, max_items=max_items)
        try:
            return self._model.model_validate(value)
        except ValidationError as exc:
            # Reported from here, in this thread: FastAPI would validate the body again on
            # the event loop, and its errors would carry the (possibly huge) input.
            errors = exc.errors(include_url=False, include_input=False, include_context=False)
            raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors]) from None
