"""SandboxFusion's ``POST /run_code`` and ``GET /v1/ping``, so that verl's sandbox_fusion
reward (and anything else written against SandboxFusion) can point its URL here.

``/run_code`` runs ``code`` once on ``stdin`` as one item of the ``code`` model (the
built-in, or ``?model=NAME``): the same sandbox, tenant charge, limits and timing as
``/v1/score``. Its answer has SandboxFusion's shape and, as SandboxFusion answers, HTTP
200 whatever became of the run: ``Success`` for exit 0, ``Failed`` for another exit or a
time limit, ``SandboxError`` where the sandbox itself failed or the language is not one
this service runs. ``run_timeout`` is the per-test wall clock (at most 60 s);
``memory_limit_MB`` the address space (-1: the model's default). ``files`` (base64) are
written in the run's working directory first, ``fetch_files`` read back after it
(regular files; a path with ``..``, a leading ``/`` or an empty part is a SandboxError,
and no link is followed on the way). Python has no compile
step here: a syntax error is a run that exits 1, as ``python file.py`` does. C++
(``cpp``) is compiled once with the system's g++; a compile error is ``compile_result``.
"""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse, Response

from rewardserve.client.protocol import (
    CodeOptions,
    CommandRunResult,
    Item,
    ItemResult,
    RunCodeRequest,
    RunCodeResponse,
    ScoreOptions,
)
from rewardserve.service import application
from rewardserve.service.body import BoundedRoute
from rewardserve.service.context import RequestContext
from rewardserve.service.errors import InvalidRequest
from rewardserve.service.routes import ERROR_RESPONSES, answer, json_response

router = APIRouter(route_class=BoundedRoute, responses=ERROR_RESPONSES)

MEMORY_MB = (32, 65536)  # what options.code.memory_mb takes; the model caps it further
# SandboxFusion's language names this service runs.
# (The code model's own names for them are the same.)
LANGUAGES = ("python", "cpp")
COMPILED = frozenset({"cpp"})


@router.get("/v1/ping", response_class=PlainTextResponse)
async def ping() -> str:
    return "pong"


@router.post("/run_code", response_model=RunCodeResponse, response_model_exclude_none=False)
async def run_code(body: RunCodeRequest, request: Request, model: str = Query(default="code")) -> Response:
    language = body.language
    if language not in LANGUAGES:
        known = ", ".join(LANGUAGES)
        return json_response(
            RunCodeResponse(
                status="SandboxError", message=f"unsupported language {body.language!r}; this service runs {known}"
            )
        )
    if body.memory_limit_MB > 0 and not MEMORY_MB[0] <= body.memory_limit_MB <= MEMORY_MB[1]:
        raise InvalidRequest(
            f"memory_limit_MB must be -1 (the default) or {MEMORY_MB[0]}..{MEMORY_MB[1]}", param="memory_limit_MB"
        )
    options = CodeOptions(
        language=language,
        timeout_s=body.run_timeout,
        memory_mb=body.memory_limit_MB if body.memory_limit_MB > 0 else None,
        outputs=True,
        extract=False,
        binary=False,
    )
    tests = {"inputs": [body.stdin or ""], "outputs": [None], "files": body.files, "fetch_files": body.fetch_files}
    item = Item(response=body.code, reference=tests)
    done = await application.score(RequestContext.of(request), model, [item], ScoreOptions(code=options))
    return answer(ran(done.results[0], compiled=language in COMPILED), done)


def ran(result: ItemResult, compiled: bool = False) -> RunCodeResponse:
    """One code item's result in SandboxFusion's words."""
    if not result.valid or not result.tests:
        return RunCodeResponse(status="SandboxError", message=result.error or "the sandbox gave no result")
    test = result.tests[0]
    if test.verdict == "CE" and compiled:  # the compiler's error; the program never ran
        failed = CommandRunResult(status="Finished", execution_time=0.0, return_code=1, stdout="", stderr=test.detail)
        return RunCodeResponse(status="Failed", compile_result=failed)
    if test.verdict == "CE":  # Python's own: the interpreter prints it and exits 1
        run = CommandRunResult(status="Finished", execution_time=0.0, return_code=1, stdout="", stderr=test.detail)
        return RunCodeResponse(status="Failed", run_result=run)
    if test.verdict == "TLE":
        run = CommandRunResult(
            status="TimeLimitExceeded", execution_time=test.time_s, stdout=test.stdout, stderr=test.stderr
        )
        return RunCodeResponse(status="Failed", run_result=run)
    code = test.exit_code if test.exit_code is not None else -(test.signal or 9)
    run = CommandRunResult(
        status="Finished", execution_time=test.time_s, return_code=code, stdout=test.stdout, stderr=test.stderr
    )
    return RunCodeResponse(status="Success" if code == 0 else "Failed", run_result=run, files=test.files or {})
