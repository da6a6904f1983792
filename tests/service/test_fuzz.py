"""Schemathesis fuzzes every operation of the service's OpenAPI schema against a live
process: no 5xx, no crash (a bounded, seeded run), with bodies that also carry unpaired
surrogates and oversized numbers (schemathesis_hooks.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.harness import serve_subprocess

HOOKS = Path(__file__).with_name("schemathesis_hooks.py")
OPERATION_GROUPS = [
    "^/v1/rubric$|^/classify$|^/get_reward$|^/run_code$|^/submit$|^/v1/ping$",
    "^/v1/score/steps$|^/v1/score/turns$|^/pooling$|^/v1/models$|^/v1/models/\\{name\\}/shadow$",
    "^/v1/score$|^/v1/embeddings$|^/health$|^/ready$|^/metrics$",
    # The admin API answers 403 here (no admin keys): fuzzed for what reaches admission.
    "^/v1/verify$|^/v1/compare$|^/tokenize$|^/version$|^/info$|^/v1/admin/",
]


@pytest.mark.long(90)
def test_schemathesis_finds_no_server_errors(qwen3_rm, qwen2_prm, tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text(f"models:\n  - {{name: rm, source: {qwen3_rm}}}\n  - {{name: prm, source: {qwen2_prm}}}\n")
    cli = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert cli, "schemathesis comes with the dev extra"
    with serve_subprocess("--config", str(config), log_path=tmp_path / "server.log") as url:
        # One schemathesis process per group of operations, side by side: each case waits
        # on the server more than on the CPU (~200 s in one process, ~60 s in four on 2
        # cores). Processes, not its --workers threads: those crash in CPython 3.11's
        # ast module ("AST constructor recursion depth mismatch").
        runs = []
        for n, paths in enumerate(OPERATION_GROUPS):
            workdir = tmp_path / f"run{n}"  # its crash cache goes here, not into the checkout
            workdir.mkdir()
            runs.append(
                subprocess.Popen(
                    [
                        cli,
                        "run",
                        f"{url}/openapi.json",
                        "--checks",
                        "not_a_server_error",
                        "--max-examples",
                        "20",
                        "--seed",
                        "7",
                        "--request-timeout",
                        "30",
                        "--include-path-regex",
                        paths,
                    ],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    cwd=workdir,
                    env={**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS)},
                )
            )
        outputs = [run.communicate(timeout=600)[0] for run in runs]
        assert httpx.get(url + "/health", timeout=5).status_code == 200  # still alive
        schema_paths = httpx.get(url + "/openapi.json", timeout=5).json()["paths"]
    # Every operation of the schema is in a group.
    assert all(any(re.search(group, path) for group in OPERATION_GROUPS) for path in schema_paths), schema_paths
    for run, output in zip(runs, outputs):
        summary = output[-3000:]
        assert run.returncode == 0, summary
        assert " passed" in summary and "failed" not in summary.split("Test cases:")[-1], summary
