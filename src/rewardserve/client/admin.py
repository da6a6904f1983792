"""The admin API from a client (``client.admin``): a served model's state, sleep, wake and
a new version, for a trainer that shares the GPU with its reward model or pushes a new
checkpoint. The client's key must be an admin key (the service's REWARDSERVE_ADMIN_KEYS).
``AsyncAdmin`` is the twin of ``Admin``; each call answers when the service is done, or,
with ``wait=False``, at once (202): ``settled`` then polls until the call's
``operation`` is no longer running (by its id, when given: a later async call on the
same model does not hide it)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Literal
from urllib.parse import quote

from rewardserve.protocol import (
    AdminModelState,
    AdminOperation,
    CanaryRequest,
    LoadRequest,
    SleepRequest,
    WeightsRequest,
)

if TYPE_CHECKING:
    from rewardserve.client.aio import AsyncRewardClient
    from rewardserve.client.sync import RewardClient


def _path(name: str, action: str = "", wait: bool = True) -> str:
    path = f"/v1/admin/models/{quote(name, safe='')}" + (f"/{action}" if action else "")
    return path if wait else path + "?async=true"


def _operation_path(operation: str | AdminOperation) -> str:
    operation_id = operation if isinstance(operation, str) else operation.id
    return f"/v1/admin/operations/{quote(operation_id, safe='')}"


def _running(state: AdminModelState) -> bool:
    return state.operation is not None and state.operation.status == "running"


def _still_running(what: object, timeout_s: float) -> TimeoutError:
    return TimeoutError(f"{what!r} still running after {timeout_s:g}s")


class Admin:
    def __init__(self, client: RewardClient):
        self._client = client

    def state(self, model: str) -> AdminModelState:
        """State (awake, sleeping, loading, draining), version, requests in flight, memory."""
        return AdminModelState.model_validate_json(self._client._request("GET", _path(model)).content)

    def sleep(self, model: str, level: Literal[1, 2] = 1, wait: bool = True) -> AdminModelState:
        """Level 1 stops serving; level 2 also frees the weights (reloaded on wake)."""
        body = SleepRequest(level=level).model_dump_json().encode()
        return AdminModelState.model_validate_json(
            self._client._request("POST", _path(model, "sleep", wait), body).content
        )

    def wake_up(self, model: str, wait: bool = True) -> AdminModelState:
        answer = self._client._request("POST", _path(model, "wake_up", wait), b"{}")
        return AdminModelState.model_validate_json(answer.content)

    def load(self, model: str, source: str, version: str, wait: bool = True, force: bool = False) -> AdminModelState:
        """A new version from ``source``, swapped in when it has loaded; a failure keeps the
        old one serving (APIStatusError, 422), as does a checkpoint of another architecture,
        label count or kind unless ``force``, and a version the model has served."""
        body = LoadRequest(source=source, version=version, force=force).model_dump_json().encode()
        return AdminModelState.model_validate_json(
            self._client._request("POST", _path(model, "load", wait), body).content
        )

    def weights(self, model: str, path: str, version: str, wait: bool = True) -> AdminModelState:
        """The weights a trainer wrote at ``path`` serve as ``version``: written into the
        serving model's own where its backend can (``weights_update`` says how)."""
        body = WeightsRequest(path=path, version=version).model_dump_json().encode()
        answer = self._client._request("POST", _path(model, "weights", wait), body)
        return AdminModelState.model_validate_json(answer.content)

    def rollback(self, model: str, wait: bool = True) -> AdminModelState:
        """The version the last load replaced, loaded again."""
        answer = self._client._request("POST", _path(model, "rollback", wait), b"{}")
        return AdminModelState.model_validate_json(answer.content)

    def canary(
        self, model: str, percent: float, source: str = "", version: str = "canary", wait: bool = True
    ) -> AdminModelState:
        """``percent`` of the model's requests to the version at ``source``; 0 ends it."""
        body = CanaryRequest(source=source, version=version, percent=percent).model_dump_json().encode()
        return AdminModelState.model_validate_json(
            self._client._request("POST", _path(model, "canary", wait), body).content
        )

    def promote(self, model: str, wait: bool = True) -> AdminModelState:
        """The model's shadow candidate serves under its name."""
        answer = self._client._request("POST", _path(model, "promote", wait), b"{}")
        return AdminModelState.model_validate_json(answer.content)

    def settled(
        self, model: str, timeout_s: float = 600.0, poll_s: float = 0.5, operation: str | AdminOperation | None = None
    ) -> AdminModelState:
        """The state once the call is done (its ``operation.status`` succeeded, failed or
        cancelled): ``operation`` (an id, or the record a ``wait=False`` call's state
        carries), else the model's latest. TimeoutError past ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        if operation is not None:
            record = self.operation(operation)
            while record.status == "running":
                if time.monotonic() > deadline:
                    raise _still_running(record, timeout_s)
                time.sleep(poll_s)
                record = self.operation(record.id)
            return self.state(model).model_copy(update={"operation": record})
        state = self.state(model)
        while _running(state):
            if time.monotonic() > deadline:
                raise _still_running(state.operation, timeout_s)
            time.sleep(poll_s)
            state = self.state(model)
        return state

    def operation(self, operation: str | AdminOperation) -> AdminOperation:
        """How a ``wait=False`` call is going, by its id."""
        return AdminOperation.model_validate_json(self._client._request("GET", _operation_path(operation)).content)


class AsyncAdmin:
    def __init__(self, client: AsyncRewardClient):
        self._client = client

    async def state(self, model: str) -> AdminModelState:
        return AdminModelState.model_validate_json((await self._client._request("GET", _path(model))).content)

    async def sleep(self, model: str, level: Literal[1, 2] = 1, wait: bool = True) -> AdminModelState:
        body = SleepRequest(level=level).model_dump_json().encode()
        answer = await self._client._request("POST", _path(model, "sleep", wait), body)
        return AdminModelState.model_validate_json(answer.content)

    async def wake_up(self, model: str, wait: bool = True) -> AdminModelState:
        answer = await self._client._request("POST", _path(model, "wake_up", wait), b"{}")
        return AdminModelState.model_validate_json(answer.content)

    async def load(
        self, model: str, source: str, version: str, wait: bool = True, force: bool = False
    ) -> AdminModelState:
        body = LoadRequest(source=source, version=version, force=force).model_dump_json().encode()
        answer = await self._client._request("POST", _path(model, "load", wait), body)
        return AdminModelState.model_validate_json(answer.content)

    async def weights(self, model: str, path: str, version: str, wait: bool = True) -> AdminModelState:
        body = WeightsRequest(path=path, version=version).model_dump_json().encode()
        answer = await self._client._request("POST", _path(model, "weights", wait), body)
        return AdminModelState.model_validate_json(answer.content)

    async def rollback(self, model: str, wait: bool = True) -> AdminModelState:
        answer = await self._client._request("POST", _path(model, "rollback", wait), b"{}")
        return AdminModelState.model_validate_json(answer.content)

    async def promote(self, model: str, wait: bool = True) -> AdminModelState:
        answer = await self._client._request("POST", _path(model, "promote", wait), b"{}")
        return AdminModelState.model_validate_json(answer.content)

    async def canary(
        self, model: str, percent: float, source: str = "", version: str = "canary", wait: bool = True
    ) -> AdminModelState:
        body = CanaryRequest(source=source, version=version, percent=percent).model_dump_json().encode()
        answer = await self._client._request("POST", _path(model, "canary", wait), body)
        return AdminModelState.model_validate_json(answer.content)

    async def settled(
        self, model: str, timeout_s: float = 600.0, poll_s: float = 0.5, operation: str | AdminOperation | None = None
    ) -> AdminModelState:
        deadline = time.monotonic() + timeout_s
        if operation is not None:
            record = await self.operation(operation)
            while record.status == "running":
                if time.monotonic() > deadline:
                    raise _still_running(record, timeout_s)
                await asyncio.sleep(poll_s)
                record = await self.operation(record.id)
            return (await self.state(model)).model_copy(update={"operation": record})
        state = await self.state(model)
        while _running(state):
            if time.monotonic() > deadline:
                raise _still_running(state.operation, timeout_s)
            await asyncio.sleep(poll_s)
            state = await self.state(model)
        return state

    async def operation(self, operation: str | AdminOperation) -> AdminOperation:
        answer = await self._client._request("GET", _operation_path(operation))
        return AdminOperation.model_validate_json(answer.content)
