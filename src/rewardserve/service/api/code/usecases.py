"""The code use cases: SandboxFusion's /submit (its /run_code scores as /v1/score does)."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool

from rewardserve.models.rules.code.sandbox_fusion import sandbox_fusion_code
from rewardserve.protocol import (
    Item,
    ItemResult,
    ScoreOptions,
)
from rewardserve.service.api._usecase import (
    Executed,
)
from rewardserve.service.api.scoring.usecases import score
from rewardserve.service.context import RequestContext


async def submit(
    ctx: RequestContext, model: str, completion: str, language: str, tests: dict[str, Any], options: ScoreOptions
) -> tuple[str, Executed[ItemResult]]:
    """SandboxFusion's /submit: the code its extraction takes from the completion, scored
    as one item of a code model; (that code, the scoring)."""
    code = await run_in_threadpool(sandbox_fusion_code, completion, language)
    return code, await score(ctx, model, [Item(response=code, reference=tests)], options)
