"""The trainer quickstarts (docs/trainers/), each page run as a reader who opens only it
would: its blocks in order, in a scratch directory of its own, shell blocks through bash,
Python blocks through this interpreter, with the fence conventions of tests/test_readme.py
(``<!-- readme-test: not run; why -->`` skips a block and says why). A ``rewardserve serve
... &`` line starts the service for real, in the background, on a free port put in for
the page's 8000; the blocks after it call that service.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import free_port
from tests.test_readme import ROOT, Server, blocks, check_verl_config

PAGES = ["docs/trainers/trl.md", "docs/trainers/verl.md", "docs/trainers/openrlhf.md"]


def run_page(page: str, scratch: Path) -> dict[str, str]:
    """Runs every block of ``page``; returns each run block's stdout, by its first line."""
    port = free_port()
    env = {
        **os.environ,
        "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}",
        "REWARDSERVE_DRAIN_SECONDS": "0",
    }  # as tests/harness.py starts services
    server = Server(scratch, env)
    outputs: dict[str, str] = {}
    served = False
    try:
        for lang, body, why in blocks(page):
            if why is not None:
                assert len(why) > 20, "a block that is not run says why"
                continue
            body = body.replace("127.0.0.1:8000", f"127.0.0.1:{port}").replace("--port 8000", f"--port {port}")
            first = body.strip().splitlines()[0]
            if lang == "bash" and first.startswith("rewardserve serve"):
                server.start(first.removesuffix("&").strip(), port)
                served = True
                continue
            if lang == "yaml":
                # verl's custom_reward_function: the adapter loaded by path, called with its reward_kwargs.
                assert "custom_reward_function" in body, f"{page}: a YAML block the runner cannot check"
                check_verl_config(body, scratch)
                continue
            assert lang in ("bash", "python"), f"{page}: a {lang} block the runner cannot run"
            command = ["bash", "-e", "-o", "pipefail", "-c", body] if lang == "bash" else [sys.executable, "-c", body]
            if f":{port}" in body:
                assert served, f"{page}: a block calls the service before the page starts it"
            done = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True, timeout=240)
            assert done.returncode == 0, f"{body}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
            assert '"error":{' not in done.stdout.replace(" ", ""), f"{body}\n{done.stdout[-2000:]}"
            outputs[first] = done.stdout
    finally:
        server.stop()
    assert served, f"{page} starts its own service"
    return outputs


@pytest.mark.long(30)
@pytest.mark.parametrize("page", PAGES)
def test_the_trainer_quickstart_runs_end_to_end(page, tmp_path):
    outputs = run_page(page, tmp_path)
    printed = "\n".join(outputs.values())
    # What each page's steps show, as its text says: a right and a wrong answer score 1
    # and 0, a reward model's score is a number, a program's output comes back.
    if page.endswith("trl.md"):
        boxed, skywork = (float(x) for x in printed.split()[-2:])
        assert 0.0 <= boxed <= 1.0 and skywork == skywork
    if page.endswith("verl.md"):
        assert printed.count("[1.0, 0.0]") == 2, printed
        classify = json.loads(next(out for first, out in outputs.items() if "/classify" in first))
        assert len(classify["data"]) == 1 and len(classify["data"][0]["probs"]) == 1
        run_code = json.loads(next(out for first, out in outputs.items() if "/run_code" in first))
        assert run_code["status"] == "Success" and run_code["run_result"]["stdout"] == "5\n", run_code
    if page.endswith("openrlhf.md"):
        get_reward = json.loads(next(out for first, out in outputs.items() if "/get_reward" in first))
        assert get_reward["rewards"] == [1.0, 0.0]
        (reward,) = json.loads(re.search(r"^reward (.+)$", printed, re.M)[1])
        assert reward == reward  # a number, not NaN
        assert "[1.0, 0.0]" in printed, printed
