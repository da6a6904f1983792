"""Bearer-key authentication (checked by service/http/admission.py before the body is read)."""

from __future__ import annotations

import hmac


class AuthError(Exception):
    """The request carries no accepted key (401)."""


def check_bearer(header: str | None, keys: list[str]) -> None:
    """Raise AuthError unless ``header`` is ``Bearer <one of keys>``. No keys: auth is off.

    Every key is compared, in constant time, so timing tells nothing about which key
    (or how much of one) matched. A key in the query string is not looked at.
    """
    if not keys:
        return
    if not header:
        raise AuthError("missing 'Authorization: Bearer <key>' header")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError("the Authorization header must be 'Bearer <key>'")
    given = token.strip().encode()
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(given, key.encode())
    if not matched:
        raise AuthError("invalid API key")


def has_valid_key(header: str | None, keys: list[str]) -> bool:
    try:
        check_bearer(header, keys)
    except AuthError:
        return False
    return True


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, if it is one."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None
