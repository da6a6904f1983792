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
step here: a syntax error is a run that exits 1, as ``python file.py`` does, and so is
node's (``nodejs``). C++ (``cpp``, g++), Java (``java``: ``public class Main``), Go
(``go``) and Rust (``rust``) are compiled once per distinct program; a compile error is
``compile_result``.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool

from rewardserve.protocol import (
    CodeOptions,
    CommandRunResult,
    EvalResult,
    EvalTestCase,
    Item,
    ItemResult,
    RunCodeRequest,
    RunCodeResponse,
    ScoreOptions,
    SubmitRequest,
    TestVerdict,
)
from rewardserve.service.api._usecase import Executed
from rewardserve.service.api.code import usecases
from rewardserve.service.api.responses import ERROR_RESPONSES, answer, json_response
from rewardserve.service.api.scoring import usecases as scoring
from rewardserve.service.deps import Ctx
from rewardserve.service.errors import InvalidRequest
from rewardserve.service.http.body import BoundedRoute

router = APIRouter(route_class=BoundedRoute, responses=ERROR_RESPONSES)

MEMORY_MB = (32, 65536)  # what options.code.memory_mb takes; the model caps it further
# SandboxFusion's language names this service runs, and the code model's name for each
# (models/rules/code/formats.py LANGUAGES: the one list of the languages it runs).
SANDBOX_FUSION_LANGUAGES = {
    "python": "python",
    "cpp": "cpp",
    "java": "java",
    "nodejs": "javascript",
    "go": "go",
    "rust": "rust",
}
# Those compiled before they run: a compile error is compile_result (node's syntax error,
# as Python's, is a run's).
COMPILED = frozenset({"cpp", "java", "go", "rust"})
# SandboxFusion's compile_languages, whose /submit time limit defaults to 10 s, not 20.
SHORT_DEFAULT_TIMEOUT = frozenset({"cpp", "java", "go"})
STDIO_DATASETS = ("code_contests",)  # SandboxFusion's own CommonOJDataset datasets


@router.get("/v1/ping", response_class=PlainTextResponse, summary="SandboxFusion ping")
async def ping() -> str:
    """SandboxFusion's health check: answers `pong` while the service runs, so SandboxFusion clients (verl's
    sandbox_fusion reward) find the sandbox up."""
    return "pong"


@router.post(
    "/run_code",
    response_model=RunCodeResponse,
    response_model_exclude_none=False,
    summary="SandboxFusion /run_code: run a program",
)
async def run_code(body: RunCodeRequest, ctx: Ctx, model: str = Query(default="code")) -> Response:
    """SandboxFusion's /run_code: runs one program with its stdin in the code model's sandbox (`?model=`, default
    `code`) and answers its compile and run results, always with HTTP 200 and a status (Success, Failed,
    SandboxError), as SandboxFusion does."""
    language = body.language
    if language not in SANDBOX_FUSION_LANGUAGES:
        known = ", ".join(SANDBOX_FUSION_LANGUAGES)
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
        language=SANDBOX_FUSION_LANGUAGES[language],
        timeout_s=body.run_timeout,
        memory_mb=body.memory_limit_MB if body.memory_limit_MB > 0 else None,
        outputs=True,
        extract=False,
        binary=False,
    )
    tests = {"inputs": [body.stdin or ""], "outputs": [None], "files": body.files, "fetch_files": body.fetch_files}
    item = Item(response=body.code, reference=tests)
    done = await scoring.score(ctx, model, [item], ScoreOptions(code=options))
    # Off the event loop: its output may be megabytes (at most the code model's 16 MiB).
    return await run_in_threadpool(lambda: answer(ran(done.results[0], compiled=language in COMPILED), done))


def ran(result: ItemResult, compiled: bool = False) -> RunCodeResponse:
    """One code item's (first) run in SandboxFusion's words."""
    if not result.valid or not result.tests:
        return RunCodeResponse(status="SandboxError", message=result.error or "the sandbox gave no result")
    return ran_test(result.tests[0], compiled)


def ran_test(test: TestVerdict, compiled: bool) -> RunCodeResponse:
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


@router.post("/submit", response_model=EvalResult, summary="SandboxFusion /submit: test a completion")
async def submit(body: SubmitRequest, ctx: Ctx, model: str = Query(default="code")) -> Response:
    """SandboxFusion's /submit for stdin/stdout datasets: extracts the completion's code, runs it on the row's tests
    (given in `config.provided_data`) in the code model's sandbox, and answers whether every test passed with each
    test's run."""
    config = body.config
    if config.dataset_type != "CommonOJDataset" and body.dataset not in STDIO_DATASETS:
        raise InvalidRequest(
            f"dataset {body.dataset!r}: this service judges stdin/stdout rows given in config.provided_data "
            "(config.dataset_type CommonOJDataset)",
            param="config.dataset_type",
        )
    if config.custom_extract_logic is not None:
        raise InvalidRequest("custom_extract_logic (Python to run in the server) is not run here", param="config")
    language = config.language
    if language not in SANDBOX_FUSION_LANGUAGES:
        known = ", ".join(SANDBOX_FUSION_LANGUAGES)
        raise InvalidRequest(f"config.language {language!r}: this service runs {known}", param="config.language")
    # Off the event loop: the row may be megabytes of JSON text and thousands of cases.
    cases = await run_in_threadpool(stdio_cases, config.provided_data)
    every_case = bool(config.extra.get("run_all_cases"))
    options = CodeOptions(
        language=SANDBOX_FUSION_LANGUAGES[language],
        compare="sandbox_fusion",
        binary=not every_case,  # SandboxFusion stops at the first failure unless asked for every case
        timeout_s=config.run_timeout or (10.0 if language in SHORT_DEFAULT_TIMEOUT else 20.0),
        outputs=True,
        extract=False,
    )
    tests = {
        "inputs": [case["input"]["stdin"] for case in cases],
        "outputs": [case["output"]["stdout"] for case in cases],
    }
    code, done = await usecases.submit(ctx, model, body.completion, language, tests, ScoreOptions(code=options))
    # Off the event loop: each case's output (the code model shows at most 16 MiB of
    # them all) and the row's cases, echoed, may be megabytes of JSON.
    return await run_in_threadpool(judged_answer, body, cases, code, done, language in COMPILED)


def judged_answer(
    body: SubmitRequest, cases: list[dict[str, dict[str, str]]], code: str, done: Executed[ItemResult], compiled: bool
) -> Response:
    """/submit's answer: each case passed or not, with its run."""
    config = body.config
    result = done.results[0]
    full = bool(config.extra.get("return_full_case"))
    judged = [
        EvalTestCase(
            passed=test.verdict == "AC",
            exec_info=ran_test(test, compiled),
            test_info=case if full or test.verdict != "AC" else shortened(case),
        )
        for case, test in zip(cases, result.tests or [])
    ]
    if not result.valid or not result.tests:
        judged = [EvalTestCase(passed=False, exec_info=ran(result), test_info=cases[0])]
    accepted = result.valid and len(judged) == len(cases) and all(case.passed for case in judged)
    return answer(EvalResult(id=body.id, accepted=accepted, extracted_code=code, tests=judged), done)


def stdio_cases(rows: Any) -> list[dict[str, dict[str, str]]]:
    """The row's ``test``: SandboxFusion's ``GeneralStdioTest`` list (or its JSON text)."""
    if not isinstance(rows, dict) or "test" not in rows:
        raise InvalidRequest('config.provided_data must be one row with its tests: {"test": [...]}', param="config")
    cases = rows["test"]
    if isinstance(cases, str):
        try:
            cases = json.loads(cases)
        except ValueError:
            raise InvalidRequest("config.provided_data.test is text that is not JSON", param="config") from None
    if not isinstance(cases, list) or not cases or not all(_is_stdio_case(case) for case in cases):
        raise InvalidRequest(
            "config.provided_data.test must be a non-empty list of "
            '{"input": {"stdin": text}, "output": {"stdout": text}}',
            param="config",
        )
    return cases


def _is_stdio_case(case: Any) -> bool:
    return (
        isinstance(case, dict)
        and isinstance(case.get("input"), dict)
        and isinstance(case.get("output"), dict)
        and isinstance(case["input"].get("stdin"), str)
        and isinstance(case["output"].get("stdout"), str)
    )


def shortened(case: dict[str, dict[str, str]], keep: int = 1000) -> dict[str, dict[str, str]]:
    """A passed case as SandboxFusion echoes it: each text over ``keep`` characters cut to
    its two ends around "..."."""
    half = (keep - 3) // 2
    return {
        side: {
            name: text if len(text) <= keep else text[:half] + "..." + text[-half:] for name, text in case[side].items()
        }
        for side in ("input", "output")
    }
