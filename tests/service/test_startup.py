"""Start-up as a user meets it, in real processes: what cannot be served stops the
service in seconds with one line per problem naming the model; what loads says what it
chose and how long each phase took; a model that fails to load stops it (exit 1) unless
--keep-going."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from rewardserve.service.settings import parse_model_arg
from tests.harness import free_port, wait_ready


def rewardserve(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rewardserve.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("rewardserve: error:")]


def test_a_busy_port_fails_before_anything_loads():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        start = time.monotonic()
        done = rewardserve("serve", "--port", str(port))
    assert done.returncode == 2 and time.monotonic() - start < 20
    (line,) = error_lines(done)
    assert f"cannot listen on 127.0.0.1:{port}" in line and "--port" in line
    assert "Traceback" not in done.stderr


def test_every_model_that_cannot_be_built_is_named_on_one_line(tmp_path, qwen3_rm):
    config = tmp_path / "models.yaml"
    config.write_text(
        "models:\n"
        f"  - {{name: typo, source: {qwen3_rm}, options: {{packng: false}}}}\n"
        "  - {name: strange, source: x, kind: regression}\n"
    )
    done = rewardserve(
        "serve", "--port", str(free_port()), "--config", str(config), "--model", f"missing={tmp_path}/nowhere"
    )
    assert done.returncode == 2
    lines = error_lines(done)
    assert len(lines) == 3 and "Traceback" not in done.stderr
    typo, strange, missing = lines
    assert "'typo'" in typo and "packng" in typo and "did you mean 'packing'" in typo
    assert "'strange'" in strange and "unknown model kind 'regression'" in strange and "outcome" in strange
    assert "'missing'" in missing and f"no such directory: {tmp_path}/nowhere" in missing


def test_a_config_that_is_not_a_models_list_stops_start_up_saying_what_to_write(tmp_path):
    config = tmp_path / "models.yaml"
    cases = [
        (
            "model:\n  - {name: a, kind: rule, source: exact_match}\n",
            "unknown top-level key 'model'; did you mean 'models'?",
        ),
        ("", f"the config file {config} is empty: it needs a 'models:' list"),
        (
            "models:\n  - {name: rm, kind: rule, source: exact_match, max_token: 5}\n",
            "model 'rm' (models[0]): unknown field 'max_token'; did you mean 'max_tokens'?",
        ),
    ]
    for text, expected in cases:
        config.write_text(text)
        done = rewardserve("serve", "--port", str(free_port()), "--config", str(config))
        (line,) = error_lines(done)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert str(config) in line and expected in line


def test_a_bad_kind_after_the_colon_names_the_kinds():
    done = rewardserve("serve", "--port", str(free_port()), "--model", "rm=acme/reward-7b:outcom")
    (line,) = error_lines(done)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "unknown kind 'outcom'; did you mean 'outcome'?" in line and "kinds: clip_goal, ensemble," in line
    assert "no such directory" not in line


def test_an_unknown_rule_and_a_request_option_are_start_up_problems_of_their_models(tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text(
        "models:\n"
        "  - {name: nope, kind: rule, source: nonexistent_rule}\n"
        "  - {name: sig, kind: rule, source: exact_match, options: {activation: sigmoid}}\n"
    )
    done = rewardserve("serve", "--port", str(free_port()), "--config", str(config), "--no-builtin-rules")
    assert done.returncode == 2 and "Traceback" not in done.stderr and "AttributeError" not in done.stderr
    nope, sig = error_lines(done)
    assert "model 'nope' (kind rule): unknown rule 'nonexistent_rule' (source); known rules: " in nope
    assert "exact_match" in nope and "math_equiv" in nope
    assert "model 'sig'" in sig and "'activation' is a request option (send it in the request's options)" in sig


def test_a_hub_id_that_is_not_cached_fails_in_seconds(tmp_path):
    cache = {"HF_HOME": str(tmp_path / "hf")}
    offline = rewardserve(
        "serve",
        "--port",
        str(free_port()),
        "--model",
        "rm=acme/reward-7b:outcome",
        env={**cache, "HF_HUB_OFFLINE": "1"},
    )
    (line,) = error_lines(offline)
    assert offline.returncode == 2 and "'rm'" in line and "HF_HUB_OFFLINE is set" in line
    # No offline flag, and the hub does not answer (a closed port on loopback).
    start = time.monotonic()
    unreachable = rewardserve(
        "serve",
        "--port",
        str(free_port()),
        "--model",
        "rm=acme/reward-7b:outcome",
        env={**cache, "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"},
    )
    (line,) = error_lines(unreachable)
    assert unreachable.returncode == 2 and "is unreachable" in line and "local directory" in line
    assert time.monotonic() - start < 30


def test_no_models_at_all_is_an_error_not_a_service_that_never_gets_ready():
    done = rewardserve("serve", "--port", str(free_port()), env={"REWARDSERVE_BUILTIN_RULES": "false"})
    (line,) = error_lines(done)
    assert done.returncode == 2 and "no models to serve" in line


def test_the_command_line_names_a_kind():
    assert parse_model_arg("prm=/models/prm:process").kind == "process"
    assert parse_model_arg("prm=/models/prm:process").source == "/models/prm"
    assert parse_model_arg("prm=acme/prm-7b", kind="process").kind == "process"
    assert parse_model_arg("rm=acme/rm-7b").kind is None
    # A suffix that is no kind stays part of the source.
    assert parse_model_arg("rm=/data/run:3").source == "/data/run:3"


def test_a_model_without_a_name_is_called_what_vllm_would_call_it(tmp_path):
    hub = parse_model_arg("Skywork/Skywork-Reward-V2-Qwen3-0.6B")
    assert hub.name == hub.source == "Skywork/Skywork-Reward-V2-Qwen3-0.6B"
    (tmp_path / "my-rm").mkdir()
    assert parse_model_arg(str(tmp_path / "my-rm")).name == "my-rm"
    rule = parse_model_arg("exact_match:rule")
    assert (rule.name, rule.source, rule.kind) == ("exact_match", "exact_match", "rule")
    flagged = parse_model_arg("rm=acme/rm", dtype="bfloat16", max_tokens=128, device="cpu", backend="transformers")
    assert (flagged.dtype, flagged.max_tokens, flagged.device, flagged.backend) == (
        "bfloat16",
        128,
        "cpu",
        "transformers",
    )
    with pytest.raises(ValueError, match="--model rm=acme/rm: .*dtype"):
        parse_model_arg("rm=acme/rm", dtype="fp8")


def test_serve_a_source_with_per_model_flags_and_an_api_key(qwen3_rm, tmp_path):
    import hashlib

    from tests.harness import serve_subprocess

    template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    (tmp_path / "template.jinja").write_text(template)
    flags = ("--model", str(qwen3_rm), "--dtype", "float32", "--max-tokens", "100", "--api-key", "k1")
    given = ("--tokenizer", str(qwen3_rm), "--chat-template", str(tmp_path / "template.jinja"))
    with serve_subprocess(*flags, *given, "--device", "cpu", "--backend", "transformers", "--no-builtin-rules") as url:
        assert httpx.get(f"{url}/v1/models", timeout=10).status_code == 401
        keyed = {"authorization": "Bearer k1"}
        (card,) = httpx.get(f"{url}/v1/models", headers=keyed, timeout=10).json()["data"]
        assert card["id"] == qwen3_rm.name and card["max_tokens"] == 100 and card["backend"] == "transformers"
        assert card["chat_template_sha256"] == hashlib.sha256(template.encode()).hexdigest()
        (info,) = httpx.get(f"{url}/info", headers=keyed, timeout=10).json()["models"]
        assert (info["dtype"], info["device"]) == ("float32", "cpu")
        body = {"model": qwen3_rm.name, "items": [{"response": "word " * 150}]}
        assert httpx.post(f"{url}/v1/score", json=body, headers=keyed, timeout=30).status_code == 413


def broken_checkpoint(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"architectures": ["Qwen3ForSequenceClassification"]}')
    return broken


def test_a_model_that_fails_to_load_stops_the_service(tmp_path):
    done = rewardserve(
        "serve",
        "--port",
        str(free_port()),
        "--no-builtin-rules",
        "--model",
        f"rm={broken_checkpoint(tmp_path)}",
        timeout=120,
    )
    assert done.returncode == 1
    failures = [line for line in done.stderr.splitlines() if "ERROR" in line]
    assert any("model rm failed to load" in line for line in failures)
    assert any("stopping" in line and "--keep-going" in line for line in failures)


@pytest.mark.long(25)
def test_start_up_says_what_it_chose_and_keep_going_serves_the_rest(tmp_path, qwen3_rm):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rewardserve.cli",
                "serve",
                "--port",
                str(port),
                "--keep-going",
                "--log-format",
                "json",
                "--model",
                f"rm={qwen3_rm}:outcome",
                "--model",
                f"bad={broken_checkpoint(tmp_path)}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "REWARDSERVE_DRAIN_SECONDS": "0"},
        )
        try:
            wait_ready(url, proc, 180)
            response = httpx.post(
                url + "/v1/score",
                json={"model": "rm", "items": [{"response": "hi"}]},
                headers={"x-request-id": "trainer-7.step-3"},
                timeout=30,
            )
            assert response.headers["x-request-id"] == "trainer-7.step-3"
            refused = httpx.post(url + "/v1/score", json={"model": "bad", "items": [{"response": "hi"}]}, timeout=30)
            assert refused.status_code == 503 and "failed to load" in refused.json()["error"]["message"]
            assert httpx.get(url + "/health", timeout=5).status_code == 200
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
    records = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert len(records) == len(log.read_text().splitlines()), "one format: every line is JSON"
    startup = [r["message"] for r in records if r["logger"] == "rewardserve.startup"]
    plan = next(m for m in startup if m.startswith("model rm: source="))
    assert "kind=outcome" in plan and "dtype=float32" in plan and "device=cpu" in plan
    assert "checkpoint context 512" in plan
    for phase in ("weights", "pack", "compile", "load", "probe"):
        assert any(m.startswith(f"model rm: {phase} ") and m.endswith(("s", ")")) for m in startup), phase
    assert any(m.startswith("model rm: ready in") for m in startup)
    assert any(m.startswith("model math: ready in") for m in startup)
    # Rules do not wait for the checkpoints.
    ready = [m.split(":")[0] for m in startup if m.endswith(")") and ": ready in " in m]
    assert ready.index("model math") < ready.index("model rm")
    assert any(m.startswith("auth off: any caller is served") and m.endswith("no shadows") for m in startup)
    serving = next(m for m in startup if m.startswith("serving "))
    assert "rm" in serving and url in serving and "/v1/score" in serving and "bad" not in serving.split(" at ")[0]
    (line,) = [r for r in records if r.get("request_id") == "trainer-7.step-3"]
    assert line["route"] == "/v1/score" and line["model"] == "rm" and line["items"] == 1 and line["status"] == 200
    assert line["tokens"] > 0 and line["queue_ms"] >= 0 and line["inference_ms"] > 0
    assert any(r.get("status") == 503 and "failed to load" in r.get("reason", "") for r in records)


def test_the_start_says_who_may_call_and_what_is_shadowed(tmp_path, caplog):
    import logging

    from rewardserve.models.spec import ModelSpec, ShadowSpec
    from rewardserve.service.app import create_app
    from rewardserve.service.settings import Settings

    tenants = tmp_path / "tenants.yaml"
    tenants.write_text("tenants:\n  - {name: a, keys: [ka], weight: 3}\n  - {name: b, keys: [kb]}\n")
    models = [
        ModelSpec(name="m1", kind="rule", source="exact_match", shadow=ShadowSpec(model="m2", fraction=0.25)),
        ModelSpec(name="m2", kind="rule", source="exact_match"),
    ]
    with caplog.at_level(logging.INFO, logger="rewardserve.startup"):
        create_app(Settings(api_keys=["op"], tenants_file=tenants, models=models))
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("auth ")]
    assert line == "auth on: 1 operator key(s); 2 tenant(s): a (weight 3), b (weight 1); shadows: m1 -> m2 (25%)"
