"""The admin API from a client (``client.admin``): a served model's state, sleep, wake and
a new version, for a trainer that shares the GPU with its reward model or pushes a new
checkpoint. The client's key must be an admin key (the service's REWARDSERVE_ADMIN_KEYS).
``AsyncAdmin`` is the twin of ``Admin``; each call answers when the service is done."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal
from urllib.parse import quote

from rewardserve.client.protocol import AdminModelState, CanaryRequest, LoadRequest, SleepRequest

if TYPE_CHECKING:
    from rewardserve.client.async_client import AsyncRewardClient
    from rewardserve.client.sync_client import RewardClient


def _path(name: str, action: str = "") -> str:
    return f"/v1/admin/models/{quote(name, safe='')}" + (f"/{action}" if action else "")


class Admin:
    def __init__(self, client: RewardClient):
        self._client = client

    def state(self, model: str) -> AdminModelState:
        """State (awake, sleeping, loading, draining), version, requests in flight, memory."""
        return AdminModelState.model_validate_json(self._client._request("GET", _path(model)).content)

    def sleep(self, model: str, level: Literal[1, 2] = 1) -> AdminModelState:
        """Level 1 stops serving; level 2 also frees the weights (reloaded on wake)."""
        body = SleepRequest(level=level).model_dump_json().encode()
        return AdminModelState.model_validate_json(self._client._request("POST", _path(model, "sleep"), body).content)

    def wake_up(self, model: str) -> AdminModelState:
        answer = self._client._request("POST", _path(model, "wake_up"), b"{}")
        return AdminModelState.model_validate_json(answer.content)

    def load(self, model: str, source: str, version: str) -> AdminModelState:
        """A new version from ``source``, swapped in when it has loaded; a failure keeps the
        old one serving (APIStatusError, 422)."""
        body = LoadRequest(source=source, version=version).model_dump_json().encode()
        return AdminModelState.model_validate_json(self._client._request("POST", _path(model, "load"), body).content)

    def rollback(self, model: str) -> AdminModelState:
        """The version the last load replaced, loaded again."""
        answer = self._client._request("POST", _path(model, "rollback"), b"{}")
        return AdminModelState.model_validate_json(answer.content)

    def canary(self, model: str, percent: float, source: str = "", version: str = "canary") -> AdminModelState:
        """``percent`` of the model's requests to the version at ``source``; 0 ends it."""
        body = CanaryRequest(source=source, version=version, percent=percent).model_dump_json().encode()
        return AdminModelState.model_validate_json(self._client._request("POST", _path(model, "canary"), body).content)

    def promote(self, model: str) -> AdminModelState:
        """The model's shadow candidate serves under its name."""
        answer = self._client._request("POST", _path(model, "promote"), b"{}")
        return AdminModelState.model_validate_json(answer.content)


class AsyncAdmin:
    def __init__(self, client: AsyncRewardClient):
        self._client = client

    async def state(self, model: str) -> AdminModelState:
        return AdminModelState.model_validate_json((await self._client._request("GET", _path(model))).content)

    async def sleep(self, model: str, level: Literal[1, 2] = 1) -> AdminModelState:
        body = SleepRequest(level=level).model_dump_json().encode()
        answer = await self._client._request("POST", _path(model, "sleep"), body)
        return AdminModelState.model_validate_json(answer.content)

    async def wake_up(self, model: str) -> AdminModelState:
        answer = await self._client._request("POST", _path(model, "wake_up"), b"{}")
        return AdminModelState.model_validate_json(answer.content)

    async def load(self, model: str, source: str, version: str) -> AdminModelState:
        body = LoadRequest(source=source, version=version).model_dump_json().encode()
        answer = await self._client._request("POST", _path(model, "load"), body)
        return AdminModelState.model_validate_json(answer.content)

    async def rollback(self, model: str) -> AdminModelState:
        answer = await self._client._request("POST", _path(model, "rollback"), b"{}")
        return AdminModelState.model_validate_json(answer.content)

    async def promote(self, model: str) -> AdminModelState:
        answer = await self._client._request("POST", _path(model, "promote"), b"{}")
        return AdminModelState.model_validate_json(answer.content)

    async def canary(self, model: str, percent: float, source: str = "", version: str = "canary") -> AdminModelState:
        body = CanaryRequest(source=source, version=version, percent=percent).model_dump_json().encode()
        answer = await self._client._request("POST", _path(model, "canary"), body)
        return AdminModelState.model_validate_json(answer.content)
