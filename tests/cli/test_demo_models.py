"""``rewardserve demo-models DIR``: the stand-ins it builds load through the real loading
code under the README's names, each kind answers its route, and the outcome stand-in
scores as the reference recipe computes on the saved model."""

from __future__ import annotations

import base64
import io
import re
import subprocess
import sys

import httpx
import pytest
from PIL import Image

from rewardserve.cli.main import main
from rewardserve.service.settings import Settings
from tests.builders import reference_outcome_scores
from tests.harness import serve_in_process, serve_process


def _png() -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (32, 24), (30, 120, 200)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


@pytest.mark.long(60)
async def test_the_demo_models_are_served_under_the_readme_s_names(tmp_path, capsys, caplog):
    main(["demo-models", str(tmp_path / "demo")])
    config = (tmp_path / "demo" / "models-demo.yaml").resolve()
    captured = capsys.readouterr()
    printed = captured.out
    assert f"serve them with: rewardserve serve --config {config}" in printed
    assert "skywork: " in printed and "(stands in for Skywork/Skywork-Reward-V2-Qwen3-0.6B)" in printed
    # Quiet: a line per model and the closing one; no progress bars, blank lines or notes.
    assert len(printed.splitlines()) == 6 and all(line.strip() for line in printed.splitlines()), printed
    assert captured.err == "", captured.err

    # The config itself keeps the tiny models off the oneDNN packing and torch.compile
    # that would take most of the start (the service's defaults apply otherwise).
    settings = Settings(config=config, builtin_rules=False)
    names = ["skywork", "prm", "judge", "vl-rm", "clip", "boxed", "mix"]
    specs = {spec.name: spec for spec in settings.model_specs()}
    assert list(specs) == names
    for name in ("skywork", "prm", "judge"):
        assert specs[name].options == {"cpu_linear": "torch", "compile_layers": False, "compile_norms": False}
    image = {"type": "image_url", "image_url": {"url": _png()}}
    caplog.set_level("WARNING")
    async with serve_in_process(settings) as (_app, http):
        # No warning of transformers (random configs' notes, the VL head's load report).
        noisy = [r.getMessage()[:200] for r in caplog.records if r.name.startswith("transformers")]
        assert noisy == [], noisy
        listed = (await http.get("/v1/models")).json()
        assert sorted(m["id"] for m in listed["data"]) == sorted(names)

        item = {"prompt": "What is 2+2?", "response": "4"}
        scored = (await http.post("/v1/score", json={"model": "skywork", "items": [item]})).json()
        conversation = [{"role": "user", "content": item["prompt"]}, {"role": "assistant", "content": "4"}]
        (expected,) = reference_outcome_scores(config.parent / "skywork", [conversation])
        assert scored["results"][0]["score"] == pytest.approx(expected[0], abs=1e-4)

        # The README's rule and ensemble entries are in the demo config too.
        boxed = {"prompt": "2+2?", "response": "So \\boxed{4}", "reference": "4"}
        ruled = (await http.post("/v1/score", json={"model": "boxed", "items": [boxed]})).json()
        assert ruled["results"][0]["score"] == 1.0, ruled
        mixed = (await http.post("/v1/score", json={"model": "mix", "items": [item, item]})).json()
        assert all(r["valid"] and set(r["components"]) == {"skywork", "prm"} for r in mixed["results"]), mixed

        steps = {"prompt": "What is 2+3*4?", "steps": ["3*4 = 12.", "2 + 12 = 14.", "The answer is 14."]}
        read = (await http.post("/v1/score/steps", json={"model": "prm", "items": [steps]})).json()
        assert len(read["results"][0]["step_scores"]) == 3, read

        verdict = {"prompt": "What is 2+2?", "response": "4", "reference": "4"}
        judged = (await http.post("/v1/verify", json={"model": "judge", "items": [verdict]})).json()
        assert judged["results"][0]["valid"] and 0 <= judged["results"][0]["score"] <= 1, judged

        shown = {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "What is shown?"}, image]},
                {"role": "assistant", "content": "A login form."},
            ]
        }
        seen = (await http.post("/v1/score", json={"model": "vl-rm", "items": [shown]})).json()
        assert seen["results"][0]["valid"], seen

        frames = {"messages": [{"role": "user", "content": [image, image]}]}
        body = {"model": "clip", "items": [frames], "options": {"goal": "the drawer is open"}}
        goal = (await http.post("/v1/score/steps", json=body)).json()
        assert len(goal["results"][0]["step_scores"]) == 2, goal


# A CSI or OSC escape sequence (colour codes, cursor moves, progress bars redrawing a
# line), raw or as the log's formatter escapes it.
ANSI_ESCAPE = re.compile(r"(\x1b|\\x1b|\\033)[\[\]]")


@pytest.mark.long(30)
def test_the_demo_config_serves_from_a_real_process_with_a_quiet_log(tmp_path, monkeypatch):
    # As a user runs it: the CLI in its own process, then the service on the config it
    # wrote, with the service's own compile setting (the config's options turn it off)
    # and transformers' own verbosity and progress bars (tests/conftest.py quiets them).
    monkeypatch.delenv("TRANSFORMERS_VERBOSITY", raising=False)
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    built = subprocess.run(
        [sys.executable, "-m", "rewardserve.cli", "demo-models", str(tmp_path / "demo")],
        # Bytes: text mode would turn a progress bar's carriage returns into newlines.
        capture_output=True,
        timeout=240,
        check=True,
    )
    config = tmp_path / "demo" / "models-demo.yaml"
    log = tmp_path / "server.log"
    with serve_process("--config", str(config), env={"REWARDSERVE_COMPILE": "true"}, log_path=log) as (url, _):
        assert httpx.get(f"{url}/ready", timeout=30).status_code == 200
        listed = httpx.get(f"{url}/v1/models", timeout=30).json()
        assert {"skywork", "prm", "judge", "vl-rm", "clip", "boxed", "mix"} <= {m["id"] for m in listed["data"]}
    served = log.read_bytes().decode(errors="replace")
    assert "serving skywork, prm, judge, vl-rm, clip, boxed, mix" in served, served[-2000:]
    for name, text in (
        ("demo-models stdout", built.stdout.decode(errors="replace")),
        ("demo-models stderr", built.stderr.decode(errors="replace")),
        ("log", served),
    ):
        # Escapes, progress bars (a carriage return redraws their line), and transformers'
        # warnings: its logger's records and the Python warnings it raises.
        noisy = [
            line[:300]
            for line in text.split("\n")
            if ANSI_ESCAPE.search(line) or "\r" in line or "Warning" in line or " WARNING transformers" in line
        ]
        assert noisy == [], (name, noisy)
