"""The examples of the README and of every guide page (docs/guides/), each page run as
written, in order, in a scratch directory of its own, as a reader who opens only that
page would: its shell blocks through bash, its Python blocks through this interpreter,
its YAML files written where a block names them. Only model sources (the models the
page's own ``rewardserve demo-models`` builds, instead of hub ids), the port, and the
length of the GRPO run are put in; a block marked ``<!-- readme-test: not run; why -->``
is skipped, and must say why.

``make serve`` lines start the service for real (in the background, from the scratch
directory with the checkout's Makefile and .venv); the following blocks call it, until
the next ``make serve`` replaces it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from PIL import Image

from tests.builders import build_causal_lm, build_sequence_classifier
from tests.harness import free_port

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"(<!-- readme-test: not run; (?P<why>[^>]+?) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)```", re.S)


# Pages whose examples run, each independent of the others (a test apiece).
PAGES = [
    "README.md",
    *sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs" / "guides").glob("*.md")),
    "docs/lifecycle.md",
    "docs/reference/settings.md",
    "docs/reference/options.md",
]

# A service started as a shell line: `REWARDSERVE_X=... rewardserve serve ...`.
SERVE_LINE = re.compile(r"^(?P<env>(?:REWARDSERVE_\w+=\S+ +)*)rewardserve serve\b(?P<args>.*)$")


def blocks(page: str) -> list[tuple[str, str, str | None]]:
    text = (ROOT / page).read_text(encoding="utf-8")
    return [(m["lang"], m["body"], m["why"]) for m in FENCE.finditer(text)]


class Server:
    def __init__(self, cwd: Path, env: dict[str, str]):
        self.cwd, self.env = cwd, env
        self.proc: subprocess.Popen | None = None
        self.log = cwd / "serve.log"

    def start(self, command: str, port: int) -> None:
        self.stop()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                ["bash", "-c", f"exec {command}"],
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"{command!r} exited: {self.log.read_text()[-3000:]}"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise TimeoutError(command)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=60)
        self.proc = None


# The README's hub ids and the demo-models folder that stands in for each: the README
# builds them (`rewardserve demo-models demo`) before any block serves them.
DEMO_FOR = {
    "Skywork/Skywork-Reward-V2-Qwen3-0.6B": "skywork",
    "Qwen/Qwen2.5-Math-PRM-7B": "prm",
    "Qwen/Qwen3-1.7B": "judge",
    "Skywork/Skywork-VL-Reward-7B": "vl-rm",
    "openai/clip-vit-base-patch32": "clip",
}


DEMO_MODELS = ".venv/bin/rewardserve demo-models demo"


@pytest.fixture(scope="module")
def built_demo(tmp_path_factory) -> Path:
    """The pages' ``rewardserve demo-models demo``, run once for them all: each page's
    block links this folder in (the command itself runs in the README's test and in
    tests/cli/test_demo_models.py)."""
    where = tmp_path_factory.mktemp("shared")
    subprocess.run(
        [str(ROOT / ".venv" / "bin" / "rewardserve"), "demo-models", "demo"], cwd=where, check=True, timeout=300
    )
    return where / "demo"


@pytest.fixture(scope="module")
def no_stand_in(tmp_path_factory) -> dict[str, Path]:
    """The two sources the docs name that demo-models has no stand-in for: a policy, and
    a Llama classifier with the context the docs' max_tokens asks for."""
    return {
        "/models/Skywork-Reward-V2-Llama-3.1-8B": build_sequence_classifier(
            tmp_path_factory.mktemp("llama_8k"), "llama", seed=1, max_positions=8192
        ),
        "Qwen/Qwen2.5-0.5B-Instruct": build_causal_lm(tmp_path_factory.mktemp("policy"), seed=3),
    }


def sources(scratch: Path, no_stand_in: dict[str, Path]) -> dict[str, str]:
    """What each hub id or path of a page stands for here: the page's own demo models
    (built in its scratch directory), and the two demo-models does not build."""
    return {
        **{hub_id: str(scratch / "demo" / name) for hub_id, name in DEMO_FOR.items()},
        **{given: str(local) for given, local in no_stand_in.items()},
    }


# Every block of a page, each bounded (300 s); a second test run beside it doubles the
# total, past the suite's default timeout.
@pytest.mark.long(20)
@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", PAGES)
def test_every_example_on_the_page_runs(page, tmp_path, no_stand_in, built_demo):
    stand_ins = sources(tmp_path, no_stand_in)
    port = free_port()
    env = {
        **os.environ,
        "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}",
        "REWARDSERVE_DRAIN_SECONDS": "0",
        "REWARDSERVE_COMPILE": "false",
    }  # as tests/harness.py starts services
    for name in (".venv", "Makefile", "pyproject.toml"):
        (tmp_path / name).symlink_to(ROOT / name)
    for k, name in enumerate(["shot.png", "frame0.png", "frame1.png", "frame2.png"]):
        Image.new("RGB", (32, 24), (40 * k, 90, 200)).save(tmp_path / name)
    server = Server(tmp_path, env)

    def put_in(text: str) -> str:
        for given, local in stand_ins.items():
            text = text.replace(given, local)
        text = re.sub(r"http://(127\.0\.0\.1|rm|rm-0|rm-1):8000", f"http://127.0.0.1:{port}", text)
        # The GRPO run: one short step, not 200 of 256 tokens.
        return (
            text.replace("steps: 200", "steps: 1")
            .replace("prompts_per_step: 8", "prompts_per_step: 1")
            .replace("max_new_tokens: 256", "max_new_tokens: 8")
        )

    ran = {"bash": 0, "python": 0, "yaml": 0, "serve": 0}
    took: list[tuple[float, str]] = []  # seconds per block, printed: where the test's time goes
    last: tuple[float, str] | None = None
    try:
        for lang, body, why in blocks(page):
            now = time.monotonic()
            if last is not None:
                took.append((now - last[0], last[1]))
            last = (now, f"{lang}: {body.strip().splitlines()[0][:80] if body.strip() else ''}")
            if why is not None:
                assert len(why) > 20, "a block that is not run says why"
                continue
            body = put_in(body)
            if lang == "yaml":
                first = body.splitlines()[0]
                if first.startswith("# "):
                    (tmp_path / first[2:].strip()).write_text(body)
                else:
                    check_verl_config(body, tmp_path)
                ran["yaml"] += 1
            elif lang == "python":
                done = subprocess.run(
                    [sys.executable, "-c", body], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
                )
                assert done.returncode == 0, f"{body}\n{done.stderr[-3000:]}"
                if "think_format" in body:  # the rubric example scores what its comment shows
                    assert "('correct', 1.0), ('format', 1.0)" in done.stdout, done.stdout
                if "admin.admin.load(" in body:  # slept, woken, then the loaded version serves
                    assert "state='awake'" in done.stdout and "version='step-400'" in done.stdout, done.stdout
                ran["python"] += 1
            elif lang == "bash":
                if page != "README.md" and body.startswith(DEMO_MODELS):
                    (tmp_path / "demo").symlink_to(built_demo)
                    ran["bash"] += 1
                    continue
                serves = [line for line in body.splitlines() if line.startswith("make ") or SERVE_LINE.match(line)]
                if serves:
                    for line in serves:
                        command = line.split("#")[0].strip()
                        if command == "make test":
                            continue  # what is running this
                        if started := SERVE_LINE.match(command):
                            # The port the line names, or the one it would default to, is put in.
                            assigned = re.sub(r"REWARDSERVE_PORT=\d+", f"REWARDSERVE_PORT={port}", started["env"])
                            flag = "" if "REWARDSERVE_PORT=" in assigned else f" --port {port}"
                            command = f"env {assigned}rewardserve serve{started['args']}{flag}"
                        else:
                            args = re.search(r'ARGS="([^"]*)"', command)
                            command = f'make serve ARGS="{args[1] if args else ""} --port {port}"'
                        if "--model" in command or "--config" in command:  # the demo models stand in
                            assert (tmp_path / "demo" / "models-demo.yaml").exists(), "served before demo-models"
                        server.start(command, port)
                        ran["serve"] += 1
                    continue
                done = subprocess.run(
                    ["bash", "-e", "-o", "pipefail", "-c", body],
                    cwd=tmp_path,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                assert done.returncode == 0, f"{body}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
                assert '"error":{' not in done.stdout.replace(" ", ""), f"{body}\n{done.stdout[-2000:]}"
                if '"model": "code"' in body:  # the code example passes both its tests, as shown
                    (result,) = json.loads(done.stdout)["results"]
                    assert result["score"] == 1.0 and [t["verdict"] for t in result["tests"]] == ["AC", "AC"]
                if body.startswith("rewardserve models --config"):  # the options example passes the checks
                    assert re.search(r"^judge +verifier .* ok *$", done.stdout, re.M), done.stdout
                ran["bash"] += 1
        if page == "docs/reference/settings.md":  # the service the example started takes its keys only
            score = {"model": "exact_match", "items": [{"prompt": "p", "response": "a", "reference": "a"}]}
            url = f"http://127.0.0.1:{port}/v1/score"
            assert httpx.post(url, json=score, timeout=30).status_code == 401
            assert httpx.post(url, json=score, headers={"authorization": "Bearer k2"}, timeout=30).status_code == 200
    finally:
        if last is not None:
            took.append((time.monotonic() - last[0], last[1]))
        server.stop()
        print("".join(f"{seconds:6.1f}s  {what}\n" for seconds, what in sorted(took, reverse=True)[:12]))
    # A page whose examples call a service starts one itself, before its first call.
    assert ran["serve"] >= 1 or not any(f":{port}" in put_in(body) for _, body, why in blocks(page) if why is None)
    # What the examples wrote is what they say.
    if page == "docs/guides/command-line.md":
        scores = [json.loads(line) for line in (tmp_path / "scores.jsonl").read_text().splitlines()]
        assert [(r["id"], r["score"]) for r in scores] == [("a", 1.0), ("b", 0.0)]
        accuracy = json.loads((tmp_path / "eval" / "accuracy.json").read_text())
        assert accuracy["pairs"] == 1 and accuracy["subsets"]["math"]["pairs"] == 1
    if page == "docs/guides/grpo-loop.md":
        assert (tmp_path / "grpo-out" / "metrics.jsonl").read_text().count("\n") == 1
    if ran["serve"] and "--config demo/models-demo.yaml" in (ROOT / page).read_text(encoding="utf-8"):
        # make serve's start-up, readable at a glance: a plan line and a ready line per
        # model, then where it serves.
        log = (tmp_path / "serve.log").read_text()
        assert "model skywork: source=" in log and "model skywork: ready in" in log
        assert f"at http://127.0.0.1:{port}; routes: " in log


def test_the_site_home_is_the_readme():
    """docs/index.md is the README, its links made relative to docs/ (the README's own
    examples run above)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    home = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    expected = readme.replace("](docs/", "](").replace(
        "`make docs` (into `site/`), or read them here", "`make docs` (into `site/`)"
    )
    assert home == expected


def test_the_kinds_table_is_what_the_service_answers():
    """The README's table of kinds: every kind, with the routes its 422s name."""
    from rewardserve.models.kinds import kind_class, known_kinds
    from rewardserve.service.api._usecase import ENDPOINT_ROUTES

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| (.+) \|$", readme, re.M))
    # The kinds the package ships (tests register toy kinds of their own beside them).
    shipped = {kind for kind in known_kinds() if kind_class(kind).__module__.startswith("rewardserve.")}
    assert set(rows) == shipped
    for kind, cell in rows.items():
        named = set(re.findall(r"`(/[^`]+)`", cell))
        routes = {
            route
            for endpoint in kind_class(kind).endpoints
            for route in re.findall(r"/[\w/]+", ENDPOINT_ROUTES[endpoint])
        }
        assert named == routes, kind


def check_verl_config(body: str, cwd: Path) -> None:
    """verl's custom_reward_function block: the file ``rewardserve paths`` prints, loaded
    as verl loads it (by path), its function called with the block's reward_kwargs."""
    import importlib.util

    import yaml

    config = yaml.safe_load(body)["custom_reward_function"]
    printed = subprocess.run(
        [sys.executable, "-m", "rewardserve.cli", "paths"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    (path,) = [line.split("\t")[0] for line in printed.splitlines() if line.split("\t")[0].endswith("/verl.py")]
    assert config["path"] == "/path/to/rewardserve/client/integrations/verl.py"
    spec = importlib.util.spec_from_file_location("custom_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, config["name"])
    scores = fn(["gsm8k", "gsm8k"], [r"\boxed{4}", "5"], ["4", "4"], [{}, {}], **config["reward_kwargs"])
    assert scores == [1.0, 0.0]
