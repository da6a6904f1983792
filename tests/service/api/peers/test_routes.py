"""vLLM's /classify and SGLang's /v1/embeddings for reward models, as verl's reward loop
calls them: the scores equal a direct transformers forward of the text those servers
would score."""

from __future__ import annotations

import math

import pytest
import pytest_asyncio

from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.builders import reference_text_scores
from tests.harness import serve_in_process


@pytest_asyncio.fixture(scope="module")
async def service(llama_rm, qwen3_multihead_rm, qwen2_prm):
    settings = Settings(
        models=[
            ModelSpec(name="rm", source=str(llama_rm)),
            ModelSpec(name="heads", source=str(qwen3_multihead_rm)),
            ModelSpec(name="prm", source=str(qwen2_prm)),
        ],
        builtin_rules=False,
    )
    async with serve_in_process(settings) as (app, http):
        yield app, http


def verl_rm_prompt(tokenizer, chat: list[dict], response: str) -> str:
    """verl 0.9.1, verl/experimental/reward_loop/reward_loop.py,
    RewardLoopWorker._preprocess_reward_inputs: the RM's chat template over the prompt
    and the decoded response, EOS removed, a leading BOS stripped (the server adds it)."""
    chat = chat + [{"role": "assistant", "content": response.replace(tokenizer.eos_token, "")}]
    rm_prompt = tokenizer.apply_chat_template(chat, add_generation_prompt=False, tokenize=False)
    if tokenizer.bos_token is not None and rm_prompt.startswith(tokenizer.bos_token):
        rm_prompt = rm_prompt[len(tokenizer.bos_token) :]
    return rm_prompt


async def test_verl_reward_loop_bodies_get_the_transformers_score(service, llama_rm):
    """The bodies of verl 0.9.1's compute_score_disrm (same file): vLLM engine ->
    /classify with use_activation false, reads data[-1].probs[-1]; SGLang engine ->
    /v1/embeddings, reads data[-1].embedding[-1]. ``model`` is the checkpoint path."""
    from transformers import AutoTokenizer

    _, http = service
    tokenizer = AutoTokenizer.from_pretrained(llama_rm)
    for k, response in enumerate(["The answer is 4.", "It is five, I think.</s>", "4"]):
        prompt = verl_rm_prompt(tokenizer, [{"role": "user", "content": f"What is 2+{k}?"}], response)
        (expected,) = reference_text_scores(llama_rm, [prompt], add_special_tokens=True)
        vllm_body = {"model": str(llama_rm), "input": prompt, "use_activation": False}
        out = await http.post("/classify", json=vllm_body)
        assert out.status_code == 200, out.text
        assert out.json()["data"][-1]["probs"][-1] == pytest.approx(expected, abs=1e-4)
        sglang_body = {"model": str(llama_rm), "input": prompt}
        out = await http.post("/v1/embeddings", json=sglang_body)
        assert out.status_code == 200, out.text
        assert out.json()["data"][-1]["embedding"][-1] == pytest.approx(expected, abs=1e-4)


async def test_classify_in_vllm_shape(service, llama_rm, qwen3_multihead_rm):
    from transformers import AutoConfig, AutoTokenizer

    _, http = service
    texts = ["<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>", "a plain text", "one more text here"]
    raw = reference_text_scores(llama_rm, texts, add_special_tokens=True)
    out = await http.post("/classify", json={"model": "rm", "input": texts})
    body = out.json()
    assert out.status_code == 200 and body["object"] == "list" and body["id"].startswith("classify-")
    assert body["model"] == "rm" and isinstance(body["created"], int)
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    sigmoid = [1 / (1 + math.exp(-x)) for x in raw]
    assert [d["probs"][0] for d in body["data"]] == pytest.approx(sigmoid, abs=1e-4)  # vLLM's default
    assert all(d["num_classes"] == 1 and d["label"] == "LABEL_0" for d in body["data"])
    tokenizer = AutoTokenizer.from_pretrained(llama_rm)
    ids = [tokenizer(t)["input_ids"] for t in texts]
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] == sum(map(len, ids))
    older = await http.post("/classify", json={"model": "rm", "input": ids, "activation": False})
    assert [d["probs"][0] for d in older.json()["data"]] == pytest.approx(raw, abs=1e-4)
    single = await http.post("/classify", json={"model": "rm", "input": ids[0], "use_activation": False})
    assert single.json()["data"][0]["probs"] == pytest.approx(raw[:1], abs=1e-4)
    plain = await http.post(
        "/classify", json={"model": "rm", "input": texts[1], "add_special_tokens": False, "use_activation": False}
    )
    assert plain.json()["data"][0]["probs"][0] == pytest.approx(
        reference_text_scores(llama_rm, texts[1:2])[0], abs=1e-4
    )
    kept = await http.post(
        "/classify", json={"model": "rm", "input": ids[2], "truncate_prompt_tokens": 3, "use_activation": False}
    )
    assert kept.json()["usage"]["prompt_tokens"] == 3
    first = reference_text_scores(llama_rm, [tokenizer.decode(ids[2][:3])])[0]
    assert kept.json()["data"][0]["probs"][0] == pytest.approx(first, abs=1e-4)

    heads = await http.post("/classify", json={"model": "heads", "input": texts[1]})
    data = heads.json()["data"][0]
    labels = AutoConfig.from_pretrained(qwen3_multihead_rm).id2label
    assert data["num_classes"] == len(data["probs"]) > 1 and sum(data["probs"]) == pytest.approx(1.0)
    assert data["label"] == labels[max(range(len(data["probs"])), key=data["probs"].__getitem__)]


@pytest.mark.parametrize(
    "body, status, param",
    [
        ({"model": "rm", "input": []}, 422, "input"),
        ({"model": "rm", "input": ["x", ""]}, 422, "input[1]"),
        ({"model": "rm", "input": [[3, 10**6]]}, 422, "items[0].input_ids[1]"),
        ({"model": "prm", "input": "x"}, 422, "model"),
        ({"model": "nope", "input": "x"}, 404, None),
        ({"model": "rm", "input": "", "truncate_prompt_tokens": 0}, 422, None),  # found by schemathesis
        ({"model": "rm", "input": "", "add_special_tokens": False}, 422, "input[0]"),
    ],
)
async def test_classify_refusals_name_the_input(service, body, status, param):
    _, http = service
    out = await http.post("/classify", json=body)
    assert out.status_code == status, out.text
    if param:
        assert out.json()["error"]["param"] == param
    assert (await http.post("/v1/embeddings", json=body)).status_code == status
