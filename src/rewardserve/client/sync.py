"""``RewardClient``: the blocking client. ``AsyncRewardClient`` is its twin."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from rewardserve.client._core import (
    VERSION_ROUNDS,
    BaseClient,
    ListCall,
    R,
    compare_call,
    merge_responses,
    plan_chunks,
    rubric_call,
    score_call,
    steps_call,
    turns_call,
    verify_call,
    versions_differ,
)
from rewardserve.client._transport import attempt_deadline, bounded_client, read_capped
from rewardserve.client.admin import Admin
from rewardserve.protocol import (
    Aggregation,
    CompareItem,
    CompareResponse,
    Criterion,
    Escalation,
    Health,
    Item,
    ModelList,
    RubricItem,
    RubricResponse,
    ScoreResponse,
    StepsResponse,
    TurnsResponse,
    VerifyResponse,
)


class RewardClient(BaseClient):
    """Scores items on a rewardserve service.

    Long item lists are split into chunks of ``chunk_size`` (groups kept whole) sent
    ``max_concurrency`` at a time; results come back in the order given. Connection
    errors, timeouts, 429 and 502/503 are retried with exponential backoff and jitter,
    waiting what ``retry-after`` asks when the service says. ``base_url`` may name
    several replicas (a list, or comma-separated): calls are spread over them and a
    replica that fails is skipped for a while. ``deadline`` bounds a whole call. ``base_url`` and
    ``api_key`` default to ``REWARDSERVE_BASE_URL`` and ``REWARDSERVE_API_KEY``.
    """

    _http: httpx.Client

    def __init__(
        self,
        base_url: str | list[str] | tuple[str, ...] | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 300.0,
        max_retries: int = 3,
        chunk_size: int = 256,
        max_concurrency: int = 8,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.Client | None = None,
        deadline: float | None = None,
        max_response_bytes: int = 64 * 1024 * 1024,
    ):
        super().__init__(
            base_url,
            api_key=api_key,
            timeout=timeout,
            max_retries=max_retries,
            chunk_size=chunk_size,
            max_concurrency=max_concurrency,
            headers=headers,
            http_client=http_client,
            make_http=bounded_client,
            deadline=deadline,
            max_response_bytes=max_response_bytes,
        )

    # ------------------------------------------------------------------ endpoints

    def score(self, model: str, items: Iterable[Item | Mapping[str, Any]], **options: Any) -> ScoreResponse:
        """Outcome reward per item (``POST /v1/score``); ``options`` are ScoreOptions'
        fields (``normalize="group"``, ``truncate="left"``, a CLIP model's ``goal``, ...)."""
        return self._list_call(score_call(model, items, options))

    def score_steps(self, model: str, items: Iterable[Item | Mapping[str, Any]], **options: Any) -> StepsResponse:
        """Process reward per step (``POST /v1/score/steps``); ``options`` are StepOptions
        fields: steps_from, separator, aggregate, threshold, shaping, gamma, truncate."""
        return self._list_call(steps_call(model, items, options))

    def score_turns(self, items: Iterable[Item | Mapping[str, Any]], **options: Any) -> TurnsResponse:
        """A reward per assistant turn from its tool calls matched to the reference's
        (``POST /v1/score/turns``); ``options`` are TurnOptions fields: assignment
        (hard, soft), unmatched, reg."""
        return self._list_call(turns_call(items, options))

    def verify(self, model: str, items: Iterable[Item | Mapping[str, Any]], **options: Any) -> VerifyResponse:
        """A judge's verdict per item (``POST /v1/verify``); ``options`` are VerifyOptions
        fields: mode, template, variables, temperature, top_p, max_new_tokens, n, seed."""
        return self._list_call(verify_call(model, items, options))

    def rubric(
        self,
        items: Iterable[RubricItem | Item | Mapping[str, Any]],
        *,
        criteria: Sequence[Criterion | Mapping[str, Any]] | None = None,
        judge: str | None = None,
        aggregation: Aggregation | Mapping[str, Any] | None = None,
        escalate: Escalation | Mapping[str, Any] | None = None,
    ) -> RubricResponse:
        """Weighted criteria per item: rules, judge questions, served models (``POST /v1/rubric``);
        ``response.components()`` gives each criterion's scores by name."""
        return self._list_call(rubric_call(items, criteria, judge, aggregation, escalate))

    def compare(self, model: str, items: Iterable[CompareItem | Mapping[str, Any]], **options: Any) -> CompareResponse:
        """Preference between responses (``POST /v1/compare``)."""
        return self._list_call(compare_call(model, items, options))

    @property
    def admin(self) -> Admin:
        """The admin API (sleep, wake, load a version): the client's key must be an admin key."""
        return Admin(self)

    def models(self) -> ModelList:
        return ModelList.model_validate_json(self._request("GET", "/v1/models").content)

    def health(self) -> Health:
        return Health.model_validate_json(self._request("GET", "/health").content)

    def ready(self) -> bool:
        """True when the service has every model loaded (no retries)."""
        try:
            return self._http.get(self._replicas.pick() + "/ready", timeout=self._config.timeout_s).is_success
        except httpx.TransportError:
            return False

    # ------------------------------------------------------------------ transport

    def _list_call(self, call: ListCall[R]) -> R:
        chunks = plan_chunks(call.items, self._config.chunk_size)

        finished: list[int] = []

        def send(at: int) -> R:
            body, sent, given = call.request(chunks[at])
            answer = call.answer(self._request("POST", call.path, body).content, sent, given)
            finished.append(at)
            return answer

        if len(chunks) == 1:
            return merge_responses(len(call.items), chunks, [send(0)])
        with ThreadPoolExecutor(min(self._config.max_concurrency, len(chunks))) as pool:
            responses = list(pool.map(send, range(len(chunks))))
            for _ in range(VERSION_ROUNDS):  # a new version served mid-call: its chunks again
                again = versions_differ(responses, finished)
                if not again:
                    break
                for at, response in zip(again, pool.map(send, again)):
                    responses[at] = response
        return merge_responses(len(call.items), chunks, responses)

    def _request(self, method: str, path: str, content: bytes | None = None) -> httpx.Response:
        plan, headers = self._plan(method, path), self._headers(content is not None)
        while True:
            base = self._replicas.pick()
            response = exc = None
            limit = plan.timeout()
            try:
                with (
                    attempt_deadline(limit),
                    self._http.stream(
                        method, base + path, content=content, headers=plan.headers(headers), timeout=limit
                    ) as streamed,
                ):
                    response = read_capped(streamed, self._config.max_response_bytes)
            except httpx.RequestError as caught:  # a transport failure or a body that does not decode
                exc = caught
            delay = plan.after(base, response, exc)
            if delay is None:
                assert response is not None  # no delay: the response is the answer
                return response
            time.sleep(delay)

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> RewardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
