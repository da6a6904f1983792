"""The peers' own operations that are not scoring: vLLM's /tokenize, and which model a
peer's request means when it names none.
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool

from rewardserve.models.errors import InvalidRequest
from rewardserve.models.text.tokenize import Tokenized
from rewardserve.protocol import (
    Message,
)
from rewardserve.service.api._usecase import (
    by_name_or_source,
)
from rewardserve.service.context import RequestContext
from rewardserve.service.settings import BUILTIN_RULES


async def tokenize(
    ctx: RequestContext,
    model: str | None,
    prompt: str | None,
    messages: list[Message] | None,
    *,
    add_special_tokens: bool,
    add_generation_prompt: bool,
    continue_final_message: bool,
    token_strs: bool,
) -> Tokenized:
    """vLLM's /tokenize with the served model's own tokenizer: the model named (or
    served from ``model`` as its source; with none named, the one model with a
    tokenizer). Client work, no forward: not charged as items, but tokenized in a
    worker thread behind the tenant-fair gate, as a plan is."""
    registry = ctx.svc.registry
    if model:
        name = by_name_or_source(ctx, model)
    else:
        names = [s.model.name for s in registry if s.model.text_tokenizer is not None]
        if len(names) != 1:
            raise InvalidRequest("name the model: 'model' is required here", param="model")
        name = names[0]
    served = registry.get(name)
    ctx.name_model(name)
    async with ctx.svc.engine.gate.slot(ctx.tenant):
        done: Tokenized = await run_in_threadpool(
            lambda: served.model.tokenize(
                prompt,
                messages,
                add_special_tokens=add_special_tokens,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message,
                token_strs=token_strs,
            )
        )
    return done


def default_model(ctx: RequestContext, named: str | None) -> str:
    """The model a peer's request means: the one it names, else the settings' default,
    else the one model served besides the built-in rules; 422 otherwise."""
    if named:
        return named
    svc = ctx.svc
    if svc.settings.default_model:
        return svc.settings.default_model
    builtin = {s.name for s in BUILTIN_RULES}
    mine = [s.model.name for s in svc.registry if s.model.name not in builtin]
    if len(mine) == 1:
        return mine[0]
    raise InvalidRequest("name the model: ?model=NAME (or set REWARDSERVE_DEFAULT_MODEL)", param="model")


def model_named(ctx: RequestContext, named: str | None) -> str:
    """A served model's name, or the name of the one served from ``named`` as its source."""
    return default_model(ctx, by_name_or_source(ctx, named) if named else None)


def takes_text(ctx: RequestContext, name: str) -> bool:
    """Whether the model scores text as it is (a reward model over a chat template's
    output), rather than a prompt and a completion (a rule)."""
    return "text" in ctx.svc.registry.get(name).model.inputs
