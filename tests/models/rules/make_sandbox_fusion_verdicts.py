"""Writes sandbox_fusion_verdicts.json: SandboxFusion's own verdict on every golden pair of
code_golden.py, for test_code_compare.py to hold the ``sandbox_fusion`` mode to.

SandboxFusion's judge is its server's ``sandbox/utils/testing.py`` ``check_stdio_test_case``,
which no PyPI package ships (PyPI's sandbox-fusion 0.3.7 is its client only). This script
runs that function from a checkout of github.com/bytedance/SandboxFusion, with the sandbox
call it makes answered by a run that printed ``got`` and exited 0, and its server's
configuration, logging and HTTP client left out (the judge reads none of them)::

    .venv/bin/python -m tests.models.rules.make_sandbox_fusion_verdicts /path/to/SandboxFusion

The test runs it live (``--print``) where ``SANDBOXFUSION_SRC`` names such a checkout.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import json
import subprocess
import sys
import types
from pathlib import Path

from tests.models.rules.code_golden import golden

VERDICTS = Path(__file__).with_name("sandbox_fusion_verdicts.json")


def pairs_digest(pairs: list[tuple[str, str]]) -> str:
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()


def _stand_ins() -> None:
    """Modules testing.py imports for what the judge does not use: the server's config, its
    HTTP client (replaced by a run that answers at once), structlog and psutil's limiter; and
    the server's wire models (sandbox/server/sandbox_api.py imports every runner), declared
    here with its fields."""
    from pydantic import BaseModel
    from sandbox.runners.types import CommandRunResult  # type: ignore[import-not-found]

    class RunStatus(str, enum.Enum):
        Success = "Success"
        Failed = "Failed"
        SandboxError = "SandboxError"

    class RunCodeRequest(BaseModel):
        code: str
        language: str
        stdin: str | None = None
        compile_timeout: float = 10
        run_timeout: float = 10

    class RunCodeResponse(BaseModel):
        status: RunStatus
        message: str
        compile_result: CommandRunResult | None = None
        run_result: CommandRunResult | None = None

    config = types.SimpleNamespace(dataset=types.SimpleNamespace(max_runner_concurrency=0))
    run_config = types.ModuleType("sandbox.configs.run_config")
    run_config.RunConfig = types.SimpleNamespace(get_instance_sync=lambda: config)  # type: ignore[attr-defined]
    sandbox_api = types.ModuleType("sandbox.server.sandbox_api")
    sandbox_api.RunCodeRequest = RunCodeRequest  # type: ignore[attr-defined]
    sandbox_api.RunCodeResponse = RunCodeResponse  # type: ignore[attr-defined]
    sandbox_api.RunStatus = RunStatus  # type: ignore[attr-defined]
    execution = types.ModuleType("sandbox.utils.execution")
    execution.max_concurrency = lambda n: lambda f: f  # type: ignore[attr-defined]
    client = types.ModuleType("sandbox.utils.sandbox_client")
    client.RunCodeRequest = RunCodeRequest  # type: ignore[attr-defined]

    async def printed(request: RunCodeRequest) -> RunCodeResponse:
        run = CommandRunResult(status="Finished", execution_time=0.0, return_code=0, stdout=request.code)
        return RunCodeResponse(status="Success", message="", run_result=run)

    client.run_code_in_sandbox = printed  # type: ignore[attr-defined]
    client.run_code_in_sandbox_w_retry = printed  # type: ignore[attr-defined]
    structlog = types.ModuleType("structlog")
    structlog.stdlib = types.SimpleNamespace(get_logger=lambda: None)  # type: ignore[attr-defined]
    for module in (run_config, sandbox_api, execution, client, structlog):
        sys.modules[module.__name__] = module


def sandbox_fusion_says(checkout: str, pairs: list[tuple[str, str]]) -> list[bool]:
    # The packages as bare namespaces: their __init__ files import every runner and dataset.
    for package in ("sandbox", "sandbox.runners", "sandbox.datasets", "sandbox.utils"):
        module = types.ModuleType(package)
        module.__path__ = [str(Path(checkout, *package.split(".")))]
        sys.modules[package] = module
    _stand_ins()
    from sandbox.datasets.types import GeneralStdioTest, TestConfig  # type: ignore[import-not-found]
    from sandbox.utils.testing import check_stdio_test_case  # type: ignore[import-not-found]

    config = TestConfig(language="python")

    async def judge(got: str, want: str) -> bool:
        case = GeneralStdioTest(input={"stdin": ""}, output={"stdout": want})
        return bool((await check_stdio_test_case(got, case, config)).passed)  # "code" is what it printed

    return [asyncio.run(judge(got, want)) for got, want in pairs]


def main(checkout: str) -> None:
    pairs = golden()
    commit = subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    verdicts = sandbox_fusion_says(checkout, pairs)
    VERDICTS.write_text(
        json.dumps(
            {
                "judge": "bytedance/SandboxFusion sandbox/utils/testing.py check_stdio_test_case",
                "commit": commit.strip() or "unknown",
                "pairs_sha256": pairs_digest(pairs),
                "passed": "".join("1" if v else "0" for v in verdicts),
            },
            indent=1,
        )
        + "\n"
    )
    print(f"{sum(verdicts)} of {len(verdicts)} pass; written to {VERDICTS}")


if __name__ == "__main__":
    if sys.argv[2:] == ["--print"]:  # the verdicts only, for the test's live run
        print("".join("1" if v else "0" for v in sandbox_fusion_says(sys.argv[1], golden())))
    else:
        main(sys.argv[1])
