"""``AsyncRewardClient``: the asyncio twin of ``RewardClient``, same names, same behaviour."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Iterable, Mapping

import httpx

from rewardserve.client._shared import (
    RETRY_STATUSES,
    ClientConfig,
    as_items,
    merge_responses,
    plan_chunks,
)
from rewardserve.client.errors import APIConnectionError, APITimeoutError, status_error
from rewardserve.client.protocol import (
    Activation,
    Aggregation,
    CompareItem,
    CompareOptions,
    CompareRequest,
    CompareResponse,
    Criterion,
    Health,
    Item,
    ModelList,
    Normalize,
    RubricItem,
    RubricRequest,
    RubricResponse,
    ScoreRequest,
    ScoreResponse,
    StepOptions,
    StepsRequest,
    StepsResponse,
    Truncate,
    VerifyOptions,
    VerifyRequest,
    VerifyResponse,
)
from rewardserve.client.sync_client import DEFAULT_BASE_URL, score_options


class AsyncRewardClient:
    """See ``RewardClient``; every endpoint method is a coroutine here."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 300.0,
        max_retries: int = 3,
        chunk_size: int = 256,
        max_concurrency: int = 8,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
    ):
        self._config = ClientConfig(
            base_url=(base_url or os.environ.get("REWARDSERVE_BASE_URL") or DEFAULT_BASE_URL),
            api_key=api_key if api_key is not None else os.environ.get("REWARDSERVE_API_KEY"),
            timeout_s=timeout,
            max_retries=max_retries,
            chunk_size=chunk_size,
            max_concurrency=max_concurrency,
            headers=dict(headers or {}),
        )
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(
            limits=httpx.Limits(max_connections=max(max_concurrency, 10))
        )

    @property
    def config(self) -> ClientConfig:
        return self._config

    def with_options(self, **changes: Any) -> AsyncRewardClient:
        clone = object.__new__(type(self))
        clone._config = self._config.with_changes(**changes)
        clone._http, clone._owns_http = self._http, False
        return clone

    # ------------------------------------------------------------------ endpoints

    async def score(
        self,
        model: str,
        items: Iterable[Item | Mapping[str, Any]],
        *,
        activation: Activation | None = None,
        normalize: Normalize | None = None,
        truncate: Truncate | None = None,
    ) -> ScoreResponse:
        """Outcome reward per item (``POST /v1/score``)."""
        options = score_options(activation=activation, normalize=normalize, truncate=truncate)
        return await self._list_call(
            "/v1/score", ScoreResponse, as_items(items),
            lambda chunk: ScoreRequest(model=model, items=chunk, options=options),
        )

    async def score_steps(
        self, model: str, items: Iterable[Item | Mapping[str, Any]], **options: Any
    ) -> StepsResponse:
        """Process reward per step (``POST /v1/score/steps``); ``options`` are
        ``StepOptions`` fields: steps_from, separator, aggregate, threshold, shaping,
        truncate."""
        step_options = StepOptions(**options)
        return await self._list_call(
            "/v1/score/steps", StepsResponse, as_items(items),
            lambda chunk: StepsRequest(model=model, items=chunk, options=step_options),
        )

    async def verify(
        self, model: str, items: Iterable[Item | Mapping[str, Any]], **options: Any
    ) -> VerifyResponse:
        """A judge's verdict per item (``POST /v1/verify``); ``options`` are
        ``VerifyOptions`` fields: mode, template, variables, temperature, top_p,
        max_new_tokens, n, seed."""
        verify_options = VerifyOptions(**options)
        return await self._list_call(
            "/v1/verify", VerifyResponse, as_items(items),
            lambda chunk: VerifyRequest(model=model, items=chunk, options=verify_options),
        )

    async def rubric(
        self,
        items: Iterable[RubricItem | Mapping[str, Any]],
        *,
        criteria: list[Criterion | Mapping[str, Any]] | None = None,
        judge: str | None = None,
        aggregation: Aggregation | Mapping[str, Any] | None = None,
    ) -> RubricResponse:
        """Weighted criteria per item, rules and judge questions (``POST /v1/rubric``)."""
        base = RubricRequest.model_validate({
            "items": [{"response": ""}], "criteria": criteria, "judge": judge,
            **({"aggregation": aggregation} if aggregation is not None else {}),
        })
        return await self._list_call(
            "/v1/rubric", RubricResponse, as_items(items, RubricItem),
            lambda chunk: base.model_copy(update={"items": chunk}),
        )

    async def compare(
        self, model: str, items: Iterable[CompareItem | Mapping[str, Any]], **options: Any
    ) -> CompareResponse:
        """Preference between responses (``POST /v1/compare``)."""
        compare_options = CompareOptions(**options)
        return await self._list_call(
            "/v1/compare", CompareResponse, as_items(items, CompareItem),
            lambda chunk: CompareRequest(model=model, items=chunk, options=compare_options),
        )

    async def _list_call(self, path, response_cls, items, make_body):
        chunks = plan_chunks(items, self._config.chunk_size)
        gate = asyncio.Semaphore(self._config.max_concurrency)

        async def send(indices: list[int]):
            body = make_body([items[i] for i in indices])
            async with gate:
                response = await self._post(path, body)
            return response_cls.model_validate_json(response.content)

        responses = await asyncio.gather(*(send(c) for c in chunks))
        return merge_responses(len(items), chunks, list(responses))

    async def models(self) -> ModelList:
        return ModelList.model_validate_json((await self._request("GET", "/v1/models")).content)

    async def health(self) -> Health:
        return Health.model_validate_json((await self._request("GET", "/health")).content)

    async def ready(self) -> bool:
        try:
            response = await self._http.get(self._url("/ready"), timeout=self._config.timeout_s)
        except httpx.TransportError:
            return False
        return response.is_success

    # ------------------------------------------------------------------ transport

    def _url(self, path: str) -> str:
        return self._config.base_url.rstrip("/") + path

    async def _post(self, path: str, body) -> httpx.Response:
        return await self._request("POST", path, body.model_dump_json(exclude_unset=True).encode())

    async def _request(self, method: str, path: str, content: bytes | None = None) -> httpx.Response:
        config = self._config
        headers = config.request_headers()
        if content is not None:
            headers["content-type"] = "application/json"
        attempt = 0
        while True:
            retry_after = None
            try:
                response = await self._http.request(
                    method, self._url(path), content=content, headers=headers,
                    timeout=config.timeout_s,
                )
            except httpx.TimeoutException as exc:
                error: Exception = APITimeoutError(f"{method} {path} timed out: {exc}")
            except httpx.TransportError as exc:
                error = APIConnectionError(f"{method} {path} failed: {exc}")
            else:
                if response.is_success:
                    return response
                error = status_error(response)
                if response.status_code not in RETRY_STATUSES:
                    raise error
                retry_after = response.headers.get("retry-after")
            if attempt >= config.max_retries:
                raise error
            await asyncio.sleep(config.backoff_s(attempt, retry_after))
            attempt += 1

    async def close(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncRewardClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
