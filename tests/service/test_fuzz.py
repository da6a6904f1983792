"""Schemathesis fuzzes every operation of the service's OpenAPI schema against a live
process: no 5xx, no crash (a bounded, seeded run), with bodies that also carry unpaired
surrogates and oversized numbers (schemathesis_hooks.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx

from tests.harness import serve_subprocess


def test_schemathesis_finds_no_server_errors(qwen3_rm, qwen2_prm, tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text(f"models:\n  - {{name: rm, source: {qwen3_rm}}}\n  - {{name: prm, source: {qwen2_prm}}}\n")
    cli = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert cli, "schemathesis comes with the dev extra"
    with serve_subprocess("--config", str(config), log_path=tmp_path / "server.log") as url:
        hooks = Path(__file__).with_name("schemathesis_hooks.py")
        done = subprocess.run(
            [cli, "run", f"{url}/openapi.json", "--checks", "not_a_server_error", "--max-examples", "20",
             "--seed", "7", "--request-timeout", "30"],
            capture_output=True, text=True, timeout=600,
            cwd=tmp_path,  # its crash cache goes here, not into the checkout
            env={**os.environ, "SCHEMATHESIS_HOOKS": str(hooks)},
        )
        assert httpx.get(url + "/health", timeout=5).status_code == 200  # still alive
    summary = done.stdout[-3000:]
    assert done.returncode == 0, summary
    assert " passed" in summary and "failed" not in summary.split("Test cases:")[-1], summary
