"""Kind `implicit_prm` (PRIME's implicit PRM): every token's beta * (log pi - log pi_ref),
steps as the sums of their tokens, checked against a direct computation with
transformers on the saved-and-reloaded models (the whole logits, log_softmax, gather,
as PRIME's reward model computes them); batching and the shared prompt change nothing;
the policy's own ids give one reward per id; through the service, with every way of
asking wrongly named."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest

from rewardserve.models.kinds import build_model
from rewardserve.models.plan import Job
from rewardserve.models.prefix_sharing import SharedUnit
from rewardserve.models.spec import ModelSpec
from rewardserve.protocol import Item, StepOptions
from rewardserve.service.settings import Settings, load_model_file
from tests.builders import WORDS, build_llama_lm, build_qwen3_lm, random_text
from tests.harness import post, run_jobs, serve_in_process

BETA = 0.1


@pytest.fixture(scope="module")
def lms(tmp_path_factory):
    """(policy, reference) sharing a Llama 3 tokenizer, and a Qwen3 LM of another one."""
    root = tmp_path_factory.mktemp("implicit")
    return build_llama_lm(root / "pi", seed=0), build_llama_lm(root / "ref", seed=1), build_qwen3_lm(root / "qwen")


def load(policy, reference, **options):
    spec = ModelSpec(
        name="iprm",
        kind="implicit_prm",
        source=str(policy),
        options={"reference": str(reference), "beta": BETA, "compile_layers": False, **options},
    )
    model = build_model(spec)
    model.load()
    return model


def direct(policy, reference, messages, response_ids):
    """Per response token: BETA * (log pi - log pi_ref), from whole-vocabulary logits of
    both reloaded models over the templated prompt then the response ids."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(policy)
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    text = text[len(tok.bos_token) :] if tok.bos_token and text.startswith(tok.bos_token) else text
    prompt = tok(text)["input_ids"]
    ids = torch.tensor([prompt + list(response_ids)])
    logps = []
    for path in (policy, reference):
        lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        with torch.no_grad():
            logits = lm(ids).logits[0, :-1].float()
        logps.append(torch.log_softmax(logits, -1).gather(1, ids[0, 1:, None])[:, 0].numpy()[len(prompt) - 1 :])
    return BETA * (logps[0].astype(np.float64) - logps[1])


def step_of_tokens(tok, response_ids, starts):
    """Each token's step, from decoding every prefix of the ids: the step its last
    character is in (a separator goes with the step before it)."""
    out = []
    for k in range(len(response_ids)):
        end = len(tok.decode(response_ids[: k + 1], skip_special_tokens=True))
        out.append(max(0, sum(1 for s in starts if s < end) - 1))
    return out


def items_of(rng: random.Random, n: int, prompt: str):
    out = []
    for _ in range(n):
        steps = [random_text(rng, rng.randint(2, 6)) + "\n" for _ in range(rng.randint(1, 4))]
        out.append(Item(prompt=prompt, steps=steps))
    return out


def test_step_scores_are_the_summed_token_log_ratios(lms):
    policy, reference, _ = lms
    model = load(policy, reference)
    tok = model.backend.tokenizer
    rng = random.Random(5)
    prompt = " ".join(rng.choices(WORDS, k=40))
    items = items_of(rng, 5, prompt)
    plan = model.plan_steps(items, StepOptions())
    assert any(isinstance(u.payload, SharedUnit) for u in plan.units)  # the prompt ran once
    results = plan.finish(model.run(plan.units), [])
    for item, result in zip(items, results):
        response = "".join(item.steps)
        ids = tok(response, add_special_tokens=False)["input_ids"]
        rewards = direct(policy, reference, [{"role": "user", "content": prompt}], ids)
        steps = step_of_tokens(tok, ids, [s.start for s in result.spans])
        expected = [float(sum(r for r, s in zip(rewards, steps) if s == k)) for k in range(len(item.steps))]
        assert result.valid and result.step_scores == pytest.approx(expected, abs=1e-4)
        assert result.score == pytest.approx(float(rewards.sum()), abs=1e-4)  # sum: the implicit outcome reward
        assert result.aggregates["min"] == pytest.approx(min(expected), abs=1e-4)
        assert result.token_rewards is None  # no ids sent: the model's own split is not the policy's

    alone = [run_jobs(model, model.prepare([item], StepOptions()))[0] for item in items]
    padded = load(policy, reference, packing=False)  # the prompt's KV cache, then padded continuations
    assert not padded.backend.packs
    plan = padded.plan_steps(items, StepOptions())
    unpacked = plan.finish(padded.run(plan.units), [])
    separate = load(policy, reference, share_prompt=False)
    plan = separate.plan_steps(items, StepOptions())
    assert not any(isinstance(u.payload, SharedUnit) for u in plan.units)
    unshared = plan.finish(separate.run(plan.units), [])
    for one, batched, cached, whole in zip(alone, results, unpacked, unshared):
        assert one.step_scores == pytest.approx(batched.step_scores, abs=1e-5)
        assert cached.step_scores == pytest.approx(batched.step_scores, abs=1e-5)
        assert whole.step_scores == pytest.approx(batched.step_scores, abs=1e-5)


def test_the_policys_ids_get_a_reward_each(lms):
    policy, reference, _ = lms
    model = load(policy, reference)
    tok = model.backend.tokenizer
    response = "the answer is 42.\nso it is."
    ids = tok(response, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    item = Item(prompt="what is it?", response=response, response_token_ids=ids)
    (result,) = run_jobs(model, model.prepare([item], StepOptions(separator="\n")))
    rewards = direct(policy, reference, [{"role": "user", "content": "what is it?"}], ids)
    assert result.token_rewards == pytest.approx(rewards.tolist(), abs=1e-4)
    assert len(result.step_scores) == 2 and sum(result.step_scores) == pytest.approx(float(rewards.sum()), abs=1e-4)
    # The separator and the EOS belong to the step before them.
    first = len(tok(response.split("\n")[0] + "\n", add_special_tokens=False)["input_ids"])
    assert result.step_scores[0] == pytest.approx(float(rewards[:first].sum()), abs=1e-4)

    wrong = Item(prompt="q", response="something else", response_token_ids=ids)
    (bad,) = model.prepare([wrong], StepOptions())
    assert not isinstance(bad, Job) and "decode" in str(bad)
    (outside,) = model.prepare([Item(prompt="q", response="x", response_token_ids=[10**6])], StepOptions())
    assert not isinstance(outside, Job) and "vocabulary" in str(outside)


def test_a_model_is_its_own_reference_at_zero(lms):
    policy, _, _ = lms
    model = load(policy, policy)
    (result,) = run_jobs(model, model.prepare([Item(prompt="q", steps=["a b\n", "c d"])], StepOptions()))
    assert result.step_scores == [0.0, 0.0] and result.score == 0.0


def test_what_does_not_fit_is_unscored_not_zero(lms):
    policy, reference, _ = lms
    model = load(policy, reference, max_steps=4)
    model_short = build_model(
        ModelSpec(
            name="short",
            kind="implicit_prm",
            source=str(policy),
            max_tokens=40,
            options={"reference": str(reference), "beta": BETA, "compile_layers": False},
        )
    )
    model_short.load()
    item = Item(prompt="q", steps=[" ".join(WORDS[i : i + 6]) + "\n" for i in range(0, 24, 6)])
    (full,) = run_jobs(model, model.prepare([item], StepOptions()))
    (cut,) = run_jobs(model_short, model_short.prepare([item], StepOptions()))
    assert (
        cut.truncated
        and 0 < cut.steps_scored < 4
        and cut.step_scores[cut.steps_scored :] == [None] * (4 - cut.steps_scored)
    )
    assert cut.step_scores[: cut.steps_scored] == pytest.approx(full.step_scores[: cut.steps_scored], abs=1e-5)
    with pytest.raises(Exception, match="413|over this model's limit|payload"):
        model_short.prepare([item], StepOptions(truncate="error"))
    with pytest.raises(Exception, match="5 steps"):
        model.prepare([Item(prompt="q", steps=["a"] * 5)], StepOptions())


def test_turns_and_another_tokenizer_are_refused(lms):
    policy, reference, qwen = lms
    model = load(policy, reference)
    agent = Item(
        messages=[
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a"},
            {"role": "user", "content": "more"},
            {"role": "assistant", "content": "b"},
        ]
    )
    (entry,) = model.prepare([agent], StepOptions())
    assert not isinstance(entry, Job) and "assistant turns" in str(entry)
    with pytest.raises(ValueError, match="another tokenizer"):
        load(policy, qwen)
    with pytest.raises(ValueError, match="options.reference"):
        load(policy, policy.parent / "missing")
    with pytest.raises(ValueError, match="transformers or vllm"):
        build_model(
            ModelSpec(
                name="v", kind="implicit_prm", source=str(policy), backend="remote", options={"reference": str(policy)}
            )
        ).load()


def readme_config(tmp_path, policy, reference) -> Path:
    """The process-rewards guide's implicit PRM config, its hub ids standing for the models built here."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "guides" / "process-rewards.md").read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(# implicit-prm\.yaml\n.*?)```", text, re.S)
    assert block, "the process-rewards guide shows an implicit PRM config"
    body = block[1].replace("PRIME-RL/EurusPRM-Stage2", str(policy))
    path = tmp_path / "implicit-prm.yaml"
    path.write_text(body.replace("Qwen/Qwen2.5-Math-7B-Instruct", str(reference)))
    return path


async def test_the_guide_s_config_serves_steps_score_and_token_rewards(lms, tmp_path):
    policy, reference, _ = lms
    (spec,) = load_model_file(readme_config(tmp_path, policy, reference))
    assert spec.options["beta"] == 0.05 and spec.options["separator"] == "\n\n"
    spec = spec.model_copy(update={"options": {**spec.options, "beta": BETA, "compile_layers": False}})
    settings = Settings(builtin_rules=False, policy_tokenizers={"policy": str(policy)}, models=[spec])
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(policy)
    response = "the answer is 42.\n\nso it is."
    ids = tok(response, add_special_tokens=False)["input_ids"]
    async with serve_in_process(settings) as (_, http):
        body = await post(
            http,
            "/v1/score/steps",
            {
                "model": "eurus-prm",
                "items": [{"prompt": "what?", "response": response, "response_token_ids": ids}],
                "options": {"policy_tokenizer": "policy"},
            },
        )
        (result,) = body["results"]
        rewards = direct(policy, reference, [{"role": "user", "content": "what?"}], ids)
        assert len(result["step_scores"]) == 2  # the config's separator
        assert result["token_rewards"] == pytest.approx(rewards.tolist(), abs=1e-4)  # the model's own, exact
        score = await post(
            http, "/v1/score", {"model": "eurus-prm", "items": [{"prompt": "what?", "response": response}] * 2}
        )
        assert [r["score"] for r in score["results"]] == pytest.approx([float(rewards.sum())] * 2, abs=1e-4)
