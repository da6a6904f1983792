"""Bearer-key authentication for every route but /health, /ready and /metrics."""

from __future__ import annotations

import hmac

from fastapi import Request

from rewardserve.service.errors import Unauthorized


def check_bearer(header: str | None, keys: list[str]) -> None:
    """Raise 401 unless ``header`` is ``Bearer <one of keys>``. No keys: auth is off.

    Every key is compared, in constant time, so timing tells nothing about which key
    (or how much of one) matched. A key in the query string is not looked at.
    """
    if not keys:
        return
    if not header:
        raise Unauthorized("missing 'Authorization: Bearer <key>' header")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("the Authorization header must be 'Bearer <key>'")
    given = token.strip().encode()
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(given, key.encode())
    if not matched:
        raise Unauthorized("invalid API key")


async def require_api_key(request: Request) -> None:
    check_bearer(request.headers.get("authorization"), request.app.state.svc.api_keys)
