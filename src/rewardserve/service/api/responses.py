"""What every route family answers with: the error bodies the schema lists, a JSON
body, and a scoring answer with its timing headers."""

from __future__ import annotations

from typing import Any

from fastapi.responses import Response
from pydantic import BaseModel

from rewardserve.protocol import ErrorBody
from rewardserve.service.api._usecase import Executed

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (401, 404, 413, 422, 429, 500, 503, 504)
}


def json_response(
    body: BaseModel, status: int = 200, headers: dict[str, str] | None = None, *, exclude_none: bool = False
) -> Response:
    content = body.model_dump_json(exclude_none=exclude_none)
    return Response(content, status_code=status, headers=headers, media_type="application/json")


def answer(body: BaseModel, done: Executed[Any]) -> Response:
    """A scoring route's answer: its body, and the timing every scoring route sends."""
    return json_response(body, headers=done.timing_headers())
