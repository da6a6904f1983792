"""Writes sandbox_fusion_verdicts.json: SandboxFusion's own verdict on every golden pair of
code_golden.py, for test_code_compare.py to hold the ``sandbox_fusion`` mode to, and the
code its extraction takes from each completion of ``completions()``, for
test_sandbox_fusion_extraction.py.

SandboxFusion's judge is its server's ``sandbox/utils/testing.py`` ``check_stdio_test_case``,
and its extraction ``sandbox/utils/extraction.py`` ``default_extract_helper``, which no PyPI
package ships (PyPI's sandbox-fusion 0.3.7 is its client only). This script runs them
from a checkout of github.com/bytedance/SandboxFusion, with the sandbox
call it makes answered by a run that printed ``got`` and exited 0, and its server's
configuration, logging and HTTP client left out (the judge reads none of them)::

    .venv/bin/python -m tests.models.rules.code.make_sandbox_fusion_verdicts /path/to/SandboxFusion

The tests run it live (``--print``) where ``SANDBOXFUSION_SRC`` names such a checkout.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import json
import random
import subprocess
import sys
import types
from pathlib import Path

from tests.models.rules.code.code_golden import golden

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


PIECES = [
    "```python\n", "```py\n", "```\n", "```cpp\n", "```PY3\n", "``` python \n", "````\n", "```c++\n",
    "```", "\n```", " ```\n", "\n  \t```", "def f(x):\n", "    return x\n", "\treturn 2\n", "class A:\n",
    "import os\n", "from a import b\n", "#c\n", "import\n", "def \n", "x = 1\n", "\n", "\n\n \n",
    "print(1)\n", "text ", "\r\n", "`", "\u3000\n", "\x1c",
]  # fmt: skip


def completions(generated: int = 300, seed: int = 41) -> list[tuple[str, str]]:
    """(completion, language): some written, the rest drawn from PIECES."""
    written = [
        ("Here:\n```python\nprint(1)\n```\nand\n```py\nprint(2)\n```", "python"),
        ("```\nprint(0)\n```\n```cpp\nint main(){}\n```", "cpp"),
        ("```\nprint(0)\n```\n```cpp\nint main(){}\n```", "python"),
        ("no code at all", "python"),
        ("import os\n\ndef f():\n\n    return 1\nprint(f())", "python"),
        ("import os\ndef f():\n    return 1", "cpp"),
        ("```python\nunclosed\n", "python"),
        ("```python", "python"),
        ("```python\n" + "\n" * 3000, "python"),
        ("```\n" + " \n" * 2000 + "x```", "python"),
        ("import a\n" * 500 + "x = 1\n" + "def g():\n  pass\n", "python"),
        ("", "python"),
    ]
    rng = random.Random(seed)
    drawn = [
        ("".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12))), rng.choice(["python", "cpp"]))
        for _ in range(generated)
    ]
    return written + drawn


def code_digest(code: str) -> str:
    return hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def sandbox_fusion_extracts(checkout: str, cases: list[tuple[str, str]]) -> list[str]:
    """SandboxFusion's extraction (after sandbox_fusion_says has loaded its modules)."""
    from sandbox.utils.extraction import default_extract_helper  # type: ignore[import-not-found]

    return [code_digest(default_extract_helper(completion, language)) for completion, language in cases]


def sandbox_fusion_live(checkout: str) -> tuple[list[str], str]:
    """(extracted code digests, verdicts) from a checkout, run apart so that the stand-in
    modules stay out of the caller's process."""
    script = ["-m", "tests.models.rules.code.make_sandbox_fusion_verdicts", checkout, "--print"]
    run = subprocess.run([sys.executable, *script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    extracted, verdicts = json.loads(run.stdout.strip().splitlines()[-1])
    return extracted, verdicts


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
                "extraction": "bytedance/SandboxFusion sandbox/utils/extraction.py default_extract_helper",
                "completions_sha256": pairs_digest(completions()),
                "extracted_sha256_16": sandbox_fusion_extracts(checkout, completions()),
            },
            indent=1,
        )
        + "\n"
    )
    print(f"{sum(verdicts)} of {len(verdicts)} pass; written to {VERDICTS}")


if __name__ == "__main__":
    if sys.argv[2:] == ["--print"]:  # for the tests' live runs
        verdicts = sandbox_fusion_says(sys.argv[1], golden())
        print(json.dumps([sandbox_fusion_extracts(sys.argv[1], completions()), "".join("01"[v] for v in verdicts)]))
    else:
        main(sys.argv[1])
