"""What the sync and async clients share: retry timing, chunk planning, merging."""

from __future__ import annotations

import email.utils
import os
import random
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import httpx
from pydantic import BaseModel, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError
from typing_extensions import Self

from rewardserve.client._checks import in_sent_order, parsed, with_distinct_ids
from rewardserve.client.errors import APIConnectionError, APIResponseValidationError, APITimeoutError, status_error
from rewardserve.protocol import (
    CompareItem,
    CompareOptions,
    CompareRequest,
    CompareResponse,
    Item,
    RubricItem,
    RubricRequest,
    RubricResponse,
    ScoreOptions,
    ScoreRequest,
    ScoreResponse,
    StepOptions,
    StepsRequest,
    StepsResponse,
    TurnOptions,
    TurnsRequest,
    TurnsResponse,
    Usage,
    VerifyOptions,
    VerifyRequest,
    VerifyResponse,
)
from rewardserve.protocol.errors import unknown_field_message

if TYPE_CHECKING:
    from rewardserve.client._replicas import CallPlan, Replicas

DEFAULT_BASE_URL = "http://127.0.0.1:8000"


class ListResponse(Protocol):
    """What every list endpoint answers: results in item order and usage."""

    @property
    def results(self) -> Sequence[Any]: ...

    @property
    def usage(self) -> Usage: ...

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self: ...


R = TypeVar("R", bound=ListResponse)
M = TypeVar("M", bound=BaseModel)

RETRY_STATUSES = frozenset({429, 502, 503})
# The OpenAI SDK's habit: base_url=".../v1". Here the routes carry their /v1 themselves.
TRAILING_V1 = "the base URL ends in /v1: give the service's root (http://host:8000); the client adds /v1 itself"


@dataclass(frozen=True)
class ClientConfig:
    base_url: str  # one URL, or several separated by commas
    api_key: str | None = None
    timeout_s: float = 300.0  # one HTTP attempt, all of it (connect, send, headers, body)
    deadline_s: float | None = None  # the whole call, retries included
    failover_cooldown_s: float = 5.0
    max_retries: int = 3
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    max_retry_after_s: float = 60.0
    chunk_size: int = 256
    max_concurrency: int = 8
    headers: Mapping[str, str] = field(default_factory=dict)
    max_response_bytes: int = 64 * 1024 * 1024  # one response's body, decoded

    def with_changes(self, **changes: Any) -> ClientConfig:
        return replace(self, **changes)

    def request_headers(self) -> dict[str, str]:
        headers = {"user-agent": "rewardserve-client", **self.headers}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        return headers

    def backoff_s(self, attempt: int, retry_after: str | None) -> float:
        """Seconds to wait before retry ``attempt`` (0-based): the server's retry-after
        when it sent one, else exponential backoff with jitter."""
        hinted = parse_retry_after(retry_after)
        if hinted is not None:
            return min(hinted, self.max_retry_after_s)
        base = min(self.initial_backoff_s * 2.0**attempt, self.max_backoff_s)
        return base * (1 - 0.25 * random.random())


def parse_retry_after(value: str | None) -> float | None:
    """``retry-after`` as seconds: a number, or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def as_items(items: Iterable[Any], item_class: type[M]) -> list[M]:
    def one(item: Any) -> M:
        if isinstance(item, item_class):
            return item
        if isinstance(item, Item):  # an Item where a RubricItem is wanted, say
            item = item.model_dump(exclude_unset=True)
        try:
            return item_class.model_validate(item)
        except ValidationError as exc:
            raise explained(exc, item_class) from None

    return [one(i) for i in items]


def explained(exc: ValidationError, model: type[BaseModel]) -> ValidationError:
    """``exc`` with each unknown field of ``model`` told as the service tells it: the
    nearest known name and the model's fields (pydantic says only 'Extra inputs are not
    permitted'). The same error type, so callers catching it still do."""
    errors = exc.errors()
    if not any(e["type"] == "extra_forbidden" and len(e["loc"]) == 1 for e in errors):
        return exc
    known = [f.alias or name for name, f in model.model_fields.items()]
    details: list[InitErrorDetails] = []
    for e in errors:
        message = e["msg"]
        if e["type"] == "extra_forbidden" and len(e["loc"]) == 1:
            message = unknown_field_message(str(e["loc"][0]), known, model.__name__)
        custom = PydanticCustomError(e["type"], "{message}", {"message": message})
        details.append({"type": custom, "loc": e["loc"], "input": e["input"]})
    return ValidationError.from_exception_data(exc.title, details)


def plan_chunks(items: Sequence[Any], chunk_size: int) -> list[list[int]]:
    """Indices of each request to send. A group (same group_id) never spans two
    requests, so group normalisation sees whole groups; order is restored on merge."""
    groups: dict[object, list[int]] = {}
    for index, item in enumerate(items):
        group = item.group_id if isinstance(item, Item) else None
        key = group if group is not None else ("", index)
        groups.setdefault(key, []).append(index)
    chunks: list[list[int]] = []
    current: list[int] = []
    for members in groups.values():
        if current and len(current) + len(members) > chunk_size:
            chunks.append(current)
            current = []
        current.extend(members)
    if current:
        chunks.append(current)
    return chunks


# How many times the chunks a swapped-out version scored are sent again (a load or a
# weights call during a chunked call; a canary's share may keep them mixed).
VERSION_ROUNDS = 2


def versions_differ(responses: Sequence[ListResponse], finished: Sequence[int]) -> list[int]:
    """The chunks to send again so that one version scores the whole call: those not
    scored by the version that answered last (``finished``: chunk indices in the order
    their answers came). None when every chunk names the same version."""
    versions = [getattr(r, "model_version", None) for r in responses]
    if len(set(versions)) <= 1:
        return []
    latest = versions[finished[-1]]
    return [i for i, version in enumerate(versions) if version != latest]


def merge_responses(n_items: int, chunks: list[list[int]], responses: list[R]) -> R:
    """One response with every chunk's results back at their items' places. Chunks that
    different versions scored (a canary's share) leave its ``model_version`` None, with a
    warning naming them: ``model_version`` is the version that scored every result."""
    results: list[Any] = [None] * n_items
    usage = Usage()
    for indices, response in zip(chunks, responses):
        if len(response.results) != len(indices):
            raise APIResponseValidationError("the service returned a different number of results than items")
        for index, result in zip(indices, response.results):
            results[index] = result
        usage = Usage(
            items=usage.items + response.usage.items,
            prompt_tokens=usage.prompt_tokens + response.usage.prompt_tokens,
            cached_tokens=usage.cached_tokens + response.usage.cached_tokens,
        )
    merged: dict[str, Any] = {"results": results, "usage": usage}
    versions = sorted({str(getattr(r, "model_version", None)) for r in responses})
    if len(versions) > 1:
        merged["model_version"] = None
        said = getattr(responses[0], "warnings", None)  # the responses that carry warnings
        if isinstance(said, list):
            warning = f"this call's chunks were scored by versions {', '.join(versions)} (a canary's share)"
            merged["warnings"] = [*said, warning]
    return responses[0].model_copy(update=merged)


# --------------------------------------------------------------------------- the twins' common half


@dataclass(frozen=True)
class ListCall(Generic[R]):
    """One list endpoint call: where, what comes back, the items, and how a chunk of
    them becomes a request body."""

    path: str
    response_cls: type[R]
    items: Sequence[BaseModel]
    make_body: Callable[[list[Any]], BaseModel]

    def request(self, indices: list[int]) -> tuple[bytes, list[str], list[Any]]:
        """The body of the chunk of ``indices`` (each item with an id of its own), the ids
        sent and the ids the caller gave."""
        items, sent, given = with_distinct_ids([self.items[i] for i in indices])
        return self.make_body(items).model_dump_json(exclude_unset=True).encode(), sent, given

    def answer(self, content: bytes, sent: list[str], given: list[Any]) -> R:
        """The chunk's response, its results matched to the items by id (checks.py)."""
        what = f"POST {self.path}"
        response: R = parsed(self.response_cls, content, what)  # type: ignore[type-var]
        return response.model_copy(update={"results": in_sent_order(response.results, sent, given, what)})


Given = Iterable[Any]  # items as models or plain mappings


def score_call(model: str, items: Given, options: dict[str, Any]) -> ListCall[ScoreResponse]:
    score_options = ScoreOptions(**options)
    return ListCall(
        "/v1/score",
        ScoreResponse,
        as_items(items, Item),
        lambda chunk: ScoreRequest(model=model, items=chunk, options=score_options),
    )


def steps_call(model: str, items: Given, options: dict[str, Any]) -> ListCall[StepsResponse]:
    step_options = StepOptions(**options)
    return ListCall(
        "/v1/score/steps",
        StepsResponse,
        as_items(items, Item),
        lambda chunk: StepsRequest(model=model, items=chunk, options=step_options),
    )


def turns_call(items: Given, options: dict[str, Any]) -> ListCall[TurnsResponse]:
    turn_options = TurnOptions(**options)
    return ListCall(
        "/v1/score/turns",
        TurnsResponse,
        as_items(items, Item),
        lambda chunk: TurnsRequest(items=chunk, options=turn_options),
    )


def verify_call(model: str, items: Given, options: dict[str, Any]) -> ListCall[VerifyResponse]:
    verify_options = VerifyOptions(**options)
    if verify_options.mode == "generate" and verify_options.n > 1 and verify_options.temperature == 0:
        warnings.warn(
            f"n={verify_options.n} at temperature 0: greedy decoding gives one sample, not "
            f"{verify_options.n}; set a temperature to average several",
            stacklevel=3,
        )
    return ListCall(
        "/v1/verify",
        VerifyResponse,
        as_items(items, Item),
        lambda chunk: VerifyRequest(model=model, items=chunk, options=verify_options),
    )


def rubric_call(
    items: Given, criteria: Any, judge: str | None, aggregation: Any, escalate: Any = None
) -> ListCall[RubricResponse]:
    base = RubricRequest.model_validate(
        {
            "items": [{"response": ""}],
            "criteria": criteria,
            "judge": judge,
            **({"aggregation": aggregation} if aggregation is not None else {}),
            **({"escalate": escalate} if escalate is not None else {}),
        }
    )
    return ListCall(
        "/v1/rubric",
        RubricResponse,
        as_items(items, RubricItem),
        lambda chunk: base.model_copy(update={"items": chunk}),
    )


def compare_call(model: str, items: Given, options: dict[str, Any]) -> ListCall[CompareResponse]:
    compare_options = CompareOptions(**options)
    return ListCall(
        "/v1/compare",
        CompareResponse,
        as_items(items, CompareItem),
        lambda chunk: CompareRequest(model=model, items=chunk, options=compare_options),
    )


def attempt_error(
    response: httpx.Response | None, exc: Exception | None, what: str
) -> tuple[Exception | None, bool, str | None]:
    """What one attempt came to: (error, retryable, retry-after). ``(None, ...)`` when the
    response is a success. ``what``: the method and the attempt's whole URL."""
    if isinstance(exc, httpx.TimeoutException):
        return APITimeoutError(f"{what} timed out: {exc or type(exc).__name__}"), True, None
    if exc is not None or response is None:
        hint = f" ({TRAILING_V1})" if "/v1/v1/" in what else ""
        return APIConnectionError(f"{what} failed: {exc or type(exc).__name__}{hint}"), True, None
    if response.is_success:
        return None, False, None
    if response.status_code == 404 and "/v1/v1/" in response.request.url.path:
        return status_error(response, hint=TRAILING_V1), False, None
    retryable = response.status_code in RETRY_STATUSES or (response.status_code == 500 and not from_service(response))
    return status_error(response), retryable, response.headers.get("retry-after")


def from_service(response: httpx.Response) -> bool:
    """Whether an error response is the service's own (``{"error": {...}}``). A 500
    without that body came from something in front of it (Ray Serve's proxy when a
    replica dies mid-request, a load balancer): another attempt may reach a live replica.
    The service's own 500 is a bug that another attempt would only repeat."""
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("error"), dict)


def check_url_scheme(url: str) -> None:
    """Refuse a URL that httpx cannot send to, before any retry: without a scheme
    every attempt fails the same way, and retrying only delays the message."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https") or not rest:
        raise ValueError(f"base URL {url!r} needs http:// or https:// before the host, e.g. http://{rest or url}")


class BaseClient:
    """Configuration, cloning and URLs; the sync and async clients add the I/O."""

    _http: Any  # httpx.Client or httpx.AsyncClient: the twin decides

    def __init__(
        self,
        base_url: str | list[str] | tuple[str, ...] | None,
        *,
        api_key: str | None,
        timeout: float,
        max_retries: int,
        chunk_size: int,
        max_concurrency: int,
        headers: Mapping[str, str] | None,
        http_client: Any,
        make_http: Callable[..., Any],
        deadline: float | None = None,
        max_response_bytes: int = 64 * 1024 * 1024,
    ):
        if isinstance(base_url, (list, tuple)):
            base_url = ",".join(base_url)
        self._config = ClientConfig(
            base_url=base_url or os.environ.get("REWARDSERVE_BASE_URL") or DEFAULT_BASE_URL,
            deadline_s=deadline,
            api_key=api_key if api_key is not None else os.environ.get("REWARDSERVE_API_KEY"),
            timeout_s=timeout,
            max_retries=max_retries,
            chunk_size=chunk_size,
            max_concurrency=max_concurrency,
            headers=dict(headers or {}),
            max_response_bytes=max_response_bytes,
        )
        self._owns_http = http_client is None
        self._http = http_client or make_http(limits=httpx.Limits(max_connections=max(max_concurrency, 10)))
        self._replicas = self._make_replicas()

    @property
    def base_url(self) -> str:
        """The service URL(s) this client calls, comma-separated."""
        return self._config.base_url

    def _make_replicas(self) -> Replicas:
        from rewardserve.client._replicas import Replicas, split_urls

        urls = split_urls(self._config.base_url)
        for url in urls:
            check_url_scheme(url)
        return Replicas(urls, self._config.failover_cooldown_s)

    @property
    def config(self) -> ClientConfig:
        return self._config

    def with_options(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float | None = None,
        deadline: float | None = None,
        max_retries: int | None = None,
        chunk_size: int | None = None,
        max_concurrency: int | None = None,
        headers: Mapping[str, str] | None = None,
        max_response_bytes: int | None = None,
        initial_backoff_s: float | None = None,
        max_backoff_s: float | None = None,
        max_retry_after_s: float | None = None,
        failover_cooldown_s: float | None = None,
    ) -> Self:
        """A client with some settings changed (the constructor's keywords, and the retry
        timing), sharing this one's connection pool (and replica health, unless
        ``base_url`` changes)."""
        given = {
            "base_url": base_url,
            "api_key": api_key,
            "timeout_s": timeout,
            "deadline_s": deadline,
            "max_retries": max_retries,
            "chunk_size": chunk_size,
            "max_concurrency": max_concurrency,
            "headers": dict(headers) if headers is not None else None,
            "max_response_bytes": max_response_bytes,
            "initial_backoff_s": initial_backoff_s,
            "max_backoff_s": max_backoff_s,
            "max_retry_after_s": max_retry_after_s,
            "failover_cooldown_s": failover_cooldown_s,
        }
        clone = object.__new__(type(self))
        clone._config = self._config.with_changes(**{k: v for k, v in given.items() if v is not None})
        clone._http, clone._owns_http = self._http, False
        same = clone._config.base_url == self._config.base_url
        clone._replicas = self._replicas if same else clone._make_replicas()
        return clone

    def _plan(self, method: str, path: str) -> CallPlan:
        from rewardserve.client._replicas import CallPlan

        return CallPlan(self._config, self._replicas, method, path)

    def _headers(self, has_body: bool) -> dict[str, str]:
        headers = self._config.request_headers()
        if has_body:
            headers["content-type"] = "application/json"
        return headers
