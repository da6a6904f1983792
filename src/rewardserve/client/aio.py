"""``AsyncRewardClient``: the asyncio twin of ``RewardClient``, same names, same behaviour."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
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
from rewardserve.client._transport import aread_capped, attempt_deadline, bounded_async_client
from rewardserve.client.admin import AsyncAdmin
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


class AsyncRewardClient(BaseClient):
    """See ``RewardClient``; every endpoint method is a coroutine here."""

    _http: httpx.AsyncClient

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
        http_client: httpx.AsyncClient | None = None,
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
            make_http=bounded_async_client,
            deadline=deadline,
            max_response_bytes=max_response_bytes,
        )

    # ------------------------------------------------------------------ endpoints

    async def score(self, model: str, items: Iterable[Item | Mapping[str, Any]], **options: Any) -> ScoreResponse:
        """Outcome reward per item (``POST /v1/score``); ``options`` are ScoreOptions'
        fields (``normalize="group"``, ``truncate="left"``, a CLIP model's ``goal``, ...)."""
        return await self._list_call(score_call(model, items, options))

    async def score_steps(self, model: str, items: Iterable[Item | Mapping[str, Any]], **options: Any) -> StepsResponse:
        """Process reward per step (``POST /v1/score/steps``)."""
        return await self._list_call(steps_call(model, items, options))

    async def score_turns(self, items: Iterable[Item | Mapping[str, Any]], **options: Any) -> TurnsResponse:
        """A reward per assistant turn from its tool calls (``POST /v1/score/turns``)."""
        return await self._list_call(turns_call(items, options))

    async def verify(self, model: str, items: Iterable[Item | Mapping[str, Any]], **options: Any) -> VerifyResponse:
        """A judge's verdict per item (``POST /v1/verify``)."""
        return await self._list_call(verify_call(model, items, options))

    async def rubric(
        self,
        items: Iterable[RubricItem | Item | Mapping[str, Any]],
        *,
        criteria: Sequence[Criterion | Mapping[str, Any]] | None = None,
        judge: str | None = None,
        aggregation: Aggregation | Mapping[str, Any] | None = None,
        escalate: Escalation | Mapping[str, Any] | None = None,
    ) -> RubricResponse:
        """Weighted criteria per item (``POST /v1/rubric``); see ``RewardClient.rubric``."""
        return await self._list_call(rubric_call(items, criteria, judge, aggregation, escalate))

    async def compare(
        self, model: str, items: Iterable[CompareItem | Mapping[str, Any]], **options: Any
    ) -> CompareResponse:
        """Preference between responses (``POST /v1/compare``)."""
        return await self._list_call(compare_call(model, items, options))

    @property
    def admin(self) -> AsyncAdmin:
        """The admin API (sleep, wake, load a version): the client's key must be an admin key."""
        return AsyncAdmin(self)

    async def models(self) -> ModelList:
        return ModelList.model_validate_json((await self._request("GET", "/v1/models")).content)

    async def health(self) -> Health:
        return Health.model_validate_json((await self._request("GET", "/health")).content)

    async def ready(self) -> bool:
        try:
            response = await self._http.get(self._replicas.pick() + "/ready", timeout=self._config.timeout_s)
        except httpx.TransportError:
            return False
        return response.is_success

    # ------------------------------------------------------------------ transport

    async def _list_call(self, call: ListCall[R]) -> R:
        chunks = plan_chunks(call.items, self._config.chunk_size)
        gate = asyncio.Semaphore(self._config.max_concurrency)

        finished: list[int] = []

        async def send(at: int) -> R:
            body, sent, given = call.request(chunks[at])
            async with gate:
                response = await self._request("POST", call.path, body)
            finished.append(at)
            return call.answer(response.content, sent, given)

        responses = list(await asyncio.gather(*(send(at) for at in range(len(chunks)))))
        for _ in range(VERSION_ROUNDS):  # a new version served mid-call: its chunks again
            again = versions_differ(responses, finished)
            if not again:
                break
            for at, response in zip(again, await asyncio.gather(*(send(at) for at in again))):
                responses[at] = response
        return merge_responses(len(call.items), chunks, responses)

    async def _request(self, method: str, path: str, content: bytes | None = None) -> httpx.Response:
        plan, headers = self._plan(method, path), self._headers(content is not None)
        while True:
            base = self._replicas.pick()
            response = exc = None
            limit = plan.timeout()
            try:
                # The deadline bounds every socket operation of the attempt; wait_for bounds
                # the attempt too where the caller lent its own httpx client.
                with attempt_deadline(limit):
                    response = await asyncio.wait_for(
                        self._attempt(method, base + path, content, plan.headers(headers), limit), limit + 1.0
                    )
            except (httpx.RequestError, asyncio.TimeoutError) as caught:  # transport, decoding, or time
                exc = (
                    caught
                    if isinstance(caught, httpx.RequestError)
                    else httpx.ReadTimeout(f"no answer within {limit:g}s")
                )
            delay = plan.after(base, response, exc)
            if delay is None:
                assert response is not None  # no delay: the response is the answer
                return response
            await asyncio.sleep(delay)

    async def _attempt(
        self, method: str, url: str, content: bytes | None, headers: dict[str, str], limit: float
    ) -> httpx.Response:
        async with self._http.stream(method, url, content=content, headers=headers, timeout=limit) as streamed:
            return await aread_capped(streamed, self._config.max_response_bytes)

    async def close(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncRewardClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
