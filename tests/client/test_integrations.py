"""Trainer integrations against a live service: TRL's real GRPOTrainer, verl's reward
function shapes, OpenRLHF's /get_reward and python reward mode, agent trajectories."""

from __future__ import annotations

import asyncio
import inspect
import math
import os
from functools import partial
from types import SimpleNamespace

import httpx
import pytest

from rewardserve.client import RewardClient
from rewardserve.client.integrations import openrlhf, verl
from rewardserve.client.integrations.trajectory import step_ends, token_rewards, trajectory_rewards
from rewardserve.client.integrations.trl import (
    async_reward_function,
    ensemble_reward_functions,
    reward_function,
    rubric_reward_functions,
)
from tests.harness import serve_subprocess


@pytest.fixture(scope="module")
def service(tmp_path_factory, qwen2_prm, qwen3_rm):
    config = tmp_path_factory.mktemp("cfg") / "models.yaml"
    config.write_text(
        "models:\n"
        "  - {name: fuzzy, kind: rule, source: fuzzy}\n"
        f"  - {{name: prm, source: {qwen2_prm}}}\n"
        f"  - {{name: rm, source: {qwen3_rm}}}\n"
        "  - {name: mix, kind: ensemble, source: ensemble, options: {members: [rm, fuzzy]}}\n"
    )
    with serve_subprocess("--config", str(config)) as url:
        yield url


@pytest.mark.long(25)
def test_trl_grpo_trainer_logs_the_service_rewards(service, tmp_path):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from tests.builders import build_causal_lm

    policy = build_causal_lm(tmp_path / "policy", seed=5)
    dataset = Dataset.from_list([{"prompt": f"Say yes {k}.", "reference": "yes yes yes"} for k in range(8)])
    client = RewardClient(service)
    inner = reward_function("fuzzy", client=client, reference_column="reference")

    class CountingClient(RewardClient):
        rubric_calls = 0

        def rubric(self, *args, **kwargs):
            type(self).rubric_calls += 1
            return super().rubric(*args, **kwargs)

    # A rubric's criteria as reward functions of their own, from one service call per step.
    rubric = rubric_reward_functions(
        criteria=[{"name": "fuzz", "fn": "fuzzy", "weight": 3.0}, {"name": "rm", "model": "rm"}],
        client=CountingClient(service),
        prefix="rubric_",
    )
    assert [f.__name__ for f in rubric.functions] == ["rubric_fuzz", "rubric_rm"]
    assert rubric.weights == [0.75, 0.25]
    seen: list[tuple[list, list, list]] = []

    def fuzzy_reward(prompts, completions, **columns):
        rewards = inner(prompts, completions, **columns)
        seen.append((list(prompts), list(completions), list(rewards)))
        return rewards

    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=3,
        logging_steps=1,
        learning_rate=1e-4,
        report_to=[],
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        seed=0,
        reward_weights=[1.0, *rubric.weights],
    )
    trainer = GRPOTrainer(
        model=str(policy), reward_funcs=[fuzzy_reward, *rubric.functions], args=args, train_dataset=dataset
    )
    trainer.train()
    assert CountingClient.rubric_calls == 3
    history = trainer.state.log_history
    fuzz_logged = [h["rewards/rubric_fuzz/mean"] for h in history if "rewards/rubric_fuzz/mean" in h]
    rm_logged = [h["rewards/rubric_rm/mean"] for h in history if "rewards/rubric_rm/mean" in h]
    assert len(fuzz_logged) == len(rm_logged) == 3

    logged = [h["rewards/fuzzy_reward/mean"] for h in trainer.state.log_history if "rewards/fuzzy_reward/mean" in h]
    assert len(logged) == 3 and len(seen) == 3
    for (prompts, completions, rewards), mean in zip(seen, logged):
        again = client.score(
            "fuzzy", [{"prompt": p, "response": c, "reference": "yes yes yes"} for p, c in zip(prompts, completions)]
        )
        assert [r.score for r in again.results] == pytest.approx(rewards)
        assert mean == pytest.approx(sum(rewards) / len(rewards), abs=1e-5)
    for (prompts, completions, rewards), fuzz_mean, rm_mean in zip(seen, fuzz_logged, rm_logged):
        # The criterion is the same rule: TRL logs the same mean for it.
        assert fuzz_mean == pytest.approx(sum(rewards) / len(rewards), abs=1e-5)
        alone = client.score("rm", [{"prompt": p, "response": c} for p, c in zip(prompts, completions)])
        assert rm_mean == pytest.approx(sum(r.score for r in alone.results) / len(completions), abs=1e-4)


async def test_an_ensemble_s_members_reach_trl_from_one_call_per_batch(service):
    from rewardserve.client import AsyncRewardClient

    class Counting(RewardClient):
        calls = 0

        def score(self, *args, **kwargs):
            type(self).calls += 1
            return super().score(*args, **kwargs)

    prompts, completions = ["Say yes.", "Say no."], ["yes yes", "no"]
    reference = ["yes yes yes", "no"]
    rewards = ensemble_reward_functions("mix", members=["rm", "fuzzy"], client=Counting(service))
    assert [f.__name__ for f in rewards.functions] == ["mix", "rm", "fuzzy"] and rewards.weights == [1.0, 0.0, 0.0]
    columns = [fn(prompts, completions, reference=reference) for fn in rewards.functions]
    assert Counting.calls == 1
    direct = RewardClient(service).score(
        "mix", [{"prompt": p, "response": c, "reference": r} for p, c, r in zip(prompts, completions, reference)]
    )
    assert columns[0] == pytest.approx([r.score for r in direct.results])
    assert columns[1] == pytest.approx(direct.components()["rm"]) and columns[2] == pytest.approx(
        direct.components()["fuzzy"]
    )
    async_rewards = ensemble_reward_functions("mix", members=["rm", "fuzzy"], client=AsyncRewardClient(service))
    gathered = await asyncio.gather(*(fn(prompts, completions, reference=reference) for fn in async_rewards.functions))
    assert gathered[0] == pytest.approx(columns[0]) and gathered[2] == pytest.approx(columns[2])


async def test_trl_reward_functions_all_endpoints(service):
    prompts = ["What is 2+2?", "What is 3+3?"]
    completions = ["\\boxed{4}", "\\boxed{7}"]
    math_fn = reward_function("math", base_url=service, reference_column="answer")
    assert math_fn.__name__ == "math_score"
    assert math_fn(prompts, completions, answer=["4", "6"], trainer_state=object()) == [1.0, 0.0]
    # An unscorable item is None (TRL leaves it out), never 0.
    assert math_fn(prompts, completions, answer=["4", None]) == [1.0, None]
    conversational = [[{"role": "user", "content": p}] for p in prompts]
    answers = [[{"role": "assistant", "content": c}] for c in completions]
    assert await async_reward_function("math", base_url=service, reference_column="answer")(
        conversational, answers, answer=["4", "6"]
    ) == [1.0, 0.0]
    steps = reward_function("prm", endpoint="steps", base_url=service, aggregate="last")(prompts, ["a\n\nb", "c"])
    assert all(0 <= s <= 1 for s in steps)
    rubric = reward_function(
        None,
        endpoint="rubric",
        base_url=service,
        criteria=[{"name": "m", "fn": "math_equiv"}, {"name": "f", "fn": "regex", "args": {"pattern": "boxed"}}],
        aggregation={"mode": "all"},
    )
    assert rubric(prompts, completions, reference=["4", "6"]) == [1.0, 0.0]
    outcome = reward_function("rm", base_url=service)(prompts, completions)
    assert all(isinstance(x, float) for x in outcome)


def test_verl_compute_score_shapes(service):
    kwargs = {"model": "math", "base_url": service}
    assert (
        verl.compute_score("openai/gsm8k", "so #### \\boxed{72}", "72", {"question": "q", "split": "train"}, **kwargs)
        == 1.0
    )
    assert verl.compute_score("openai/gsm8k", "\\boxed{71}", "72", None, **kwargs) == 0.0
    batch = verl.compute_score_batch(
        ["a", "b", "c"],
        ["\\boxed{1}", "\\boxed{2}", "\\boxed{3}"],
        ["1", "5", "3"],
        [{"index": 0}, {"index": 1}, {"index": 2}],
        **kwargs,
    )
    assert batch == [1.0, 0.0, 1.0]
    with pytest.raises(Exception, match="no reward"):
        verl.compute_score("x", "\\boxed{1}", None, None, **kwargs)
    assert verl.compute_score("x", "\\boxed{1}", None, None, invalid_score=-1.0, **kwargs) == -1.0


# verl 0.9.1 cannot be imported here (its package imports ray at the top), so what its
# reward loop does with a custom reward function is replayed from its source:
# verl/trainer/ppo/reward.py get_custom_reward_fn wraps the function with its
# reward_kwargs (these two helpers, verbatim in behaviour), and
# verl/experimental/reward_loop/reward_manager/naive.py (dapo.py alike) run_single calls
# it once per sample with keywords, awaiting it when it is a coroutine function.


def _verl_call_with_kwargs(raw_fn, extra_kwargs, *args, **kwargs):
    return raw_fn(*args, **{**kwargs, **extra_kwargs})


async def _verl_call_with_kwargs_async(raw_fn, extra_kwargs, *args, **kwargs):
    return await raw_fn(*args, **{**kwargs, **extra_kwargs})


def _verl_custom_reward_fn(raw_fn, reward_kwargs):
    if not inspect.iscoroutinefunction(raw_fn):
        return partial(_verl_call_with_kwargs, raw_fn, reward_kwargs)
    return partial(_verl_call_with_kwargs_async, raw_fn, reward_kwargs)


async def _verl_run_single(compute_score, sample: dict, reward_router_address=None, reward_model_tokenizer=None):
    extra_info = dict(sample.get("extra_info", {}), num_turns=None, rollout_reward_scores={})
    extra_reward_kwargs = (
        {"reward_router_address": reward_router_address, "reward_model_tokenizer": reward_model_tokenizer}
        if reward_router_address is not None
        else {}
    )
    call = dict(
        data_source=sample["data_source"],
        solution_str=sample["response"],
        ground_truth=sample["ground_truth"],
        extra_info=extra_info,
        **extra_reward_kwargs,
    )
    if inspect.iscoroutinefunction(compute_score):
        result = await compute_score(**call)
    else:
        result = await asyncio.get_running_loop().run_in_executor(None, lambda: compute_score(**call))
    return result["score"] if isinstance(result, dict) else result


def _verl_extra_info(result) -> dict:
    """naive.py run_single (0.9.1, lines 89-95): a dict result's every key goes to
    reward_extra_info; a bare score is logged as "acc"."""
    return dict(result) if isinstance(result, dict) else {"acc": result}


async def test_verl_reward_loop_managers_call_the_adapter(service):
    samples = [
        {
            "data_source": "openai/gsm8k",
            "response": f"so \\boxed{{{k}}}",
            "ground_truth": "2",
            "extra_info": {"question": "1+1?", "index": k},
        }
        for k in range(4)
    ]
    reward_kwargs = {"model": "math", "base_url": service}
    for raw_fn, awaited in ((verl.compute_score_async, True), (verl.compute_score, False)):
        fn = _verl_custom_reward_fn(raw_fn, reward_kwargs)
        assert inspect.iscoroutinefunction(fn) is awaited
        for router in (None, "10.0.0.1:9000"):  # verl also serving a reward model adds its keywords
            scores = await asyncio.gather(*(_verl_run_single(fn, s, router, object()) for s in samples))
            assert scores == [0.0, 0.0, 1.0, 0.0]


async def test_verl_gets_a_rubric_s_components_in_its_extra_info(service):
    criteria = [{"name": "fuzz", "fn": "fuzzy"}, {"name": "rm", "model": "rm", "normalize": "sigmoid"}]
    reward_kwargs = {
        "model": "rubric",
        "endpoint": "rubric",
        "base_url": service,
        "components": True,
        "criteria": criteria,
    }
    sample = {"data_source": "d", "response": "yes yes", "ground_truth": "yes yes yes", "extra_info": {"question": "q"}}
    expected = (
        RewardClient(service)
        .rubric([{"prompt": "q", "response": "yes yes", "reference": "yes yes yes"}], criteria=criteria)
        .results[0]
    )
    for raw_fn in (verl.compute_score_async, verl.compute_score):
        fn = _verl_custom_reward_fn(raw_fn, reward_kwargs)
        call = dict(
            data_source="d",
            solution_str=sample["response"],
            ground_truth=sample["ground_truth"],
            extra_info=sample["extra_info"],
        )
        result = await fn(**call) if inspect.iscoroutinefunction(fn) else fn(**call)
        extra = _verl_extra_info(result)
        assert extra["score"] == pytest.approx(expected.score)
        assert extra["fuzz"] == pytest.approx(expected.components["fuzz"])
        assert extra["rm"] == pytest.approx(expected.components["rm"])
        assert await _verl_run_single(fn, sample) == pytest.approx(expected.score)


def test_openrlhf_get_reward_route_and_python_mode(service, monkeypatch):
    prompts = ["<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"] * 2
    queries = [prompts[0] + "\\boxed{4}<|im_end|>", prompts[1] + "\\boxed{5}<|im_end|>"]
    body = {"query": queries, "prompts": prompts, "labels": ["4", "4"]}
    response = httpx.post(service + "/get_reward?model=math", json=body, timeout=30)
    assert response.status_code == 200, response.text
    assert response.json()["rewards"] == [1.0, 0.0] and response.json()["scores"] == [1.0, 0.0]
    unnamed = httpx.post(service + "/get_reward", json=body, timeout=30)  # several models: name one
    assert unnamed.status_code == 422 and unnamed.json()["error"]["param"] == "model"
    broken = dict(body, labels=["4", None])
    assert httpx.post(service + "/get_reward?model=math", json=broken, timeout=30).status_code == 422
    stand_in = httpx.post(service + "/get_reward?model=math&invalid=-1", json=broken, timeout=30).json()
    assert stand_in["rewards"] == [1.0, -1.0]
    monkeypatch.setenv("REWARDSERVE_BASE_URL", service)
    monkeypatch.setenv("REWARDSERVE_MODEL", "math")
    out = openrlhf.reward_func(queries, prompts, ["4", "4"])
    assert out["rewards"].tolist() == [1.0, 0.0]


class _PolicyEngine:
    """Generates as OpenRLHF's vLLM engine would (``await generate(prompt_token_ids,
    params, multi_modal_data=...)`` -> ``outputs[0].token_ids``), with a real tiny policy
    through transformers: vLLM is not in this environment."""

    def __init__(self, path):
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(path).eval()

    async def generate(self, prompt_token_ids, params, multi_modal_data=None):
        import torch

        with torch.inference_mode():
            out = self.model.generate(
                torch.tensor([prompt_token_ids]), max_new_tokens=params.max_tokens, do_sample=False
            )
        ids = out[0, len(prompt_token_ids) :].tolist()
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, finish_reason="length", logprobs=None)])


def test_openrlhf_agent_gets_the_reward_its_own_server_gives(service, qwen3_rm, tmp_path):
    """OpenRLHF 0.11.2's own SingleTurnAgentExecutor (openrlhf/utils/agent.py: execute,
    _fetch_rewards_via_http) builds the query and posts it to /get_reward; the reward is
    what openrlhf/cli/serve_rm.py would answer for that query text."""
    import asyncio

    from openrlhf.utils.agent import SingleTurnAgentExecutor
    from transformers import AutoTokenizer

    from tests.builders import build_causal_lm, reference_text_scores

    policy = build_causal_lm(tmp_path / "policy", seed=3)
    tokenizer = AutoTokenizer.from_pretrained(policy)
    engine = _PolicyEngine(policy)
    executor = SingleTurnAgentExecutor(remote_rm_url=f"{service}/get_reward?model=rm")
    params = SimpleNamespace(max_tokens=12, logprobs=None)  # the fields of vLLM's SamplingParams it reads
    for k in range(3):
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": f"Say yes {k}."}], tokenize=False, add_generation_prompt=True
        )
        output = asyncio.run(executor.execute(prompt, "yes", params, 256, tokenizer, engine))
        query = tokenizer.decode(output["observation_tokens"], skip_special_tokens=False)
        assert output["reward"] is not None, "the reward request failed"
        assert output["reward"] == pytest.approx(reference_text_scores(qwen3_rm, [query]), abs=1e-4)


def test_trajectory_rewards_and_token_placement(service):
    messages = [
        {"role": "user", "content": "find x"},
        {
            "role": "assistant",
            "content": "Searching.",
            "tool_calls": [{"id": "1", "function": {"name": "search", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "1", "content": "x=4"},
        {"role": "assistant", "content": "x is 4."},
    ]
    client = RewardClient(service)
    out = trajectory_rewards(client, "prm", messages)
    assert len(out.step_rewards) == 2 and out.reward == pytest.approx(min(out.step_rewards))
    with_outcome = trajectory_rewards(client, "prm", messages, outcome_model="rm")
    assert with_outcome.reward == client.score("rm", [{"messages": messages}]).results[0].score
    # The trainer's own text: messages one after another; its tokens cover 5 chars each.
    starts = {1: 0, 3: 20}
    ends = step_ends(out.spans, starts)
    assert ends == [len("Searching.") - 1, 20 + len("x is 4.") - 1]
    offsets = [(k, k + 5) for k in range(0, 30, 5)]
    per_token = token_rewards(offsets, ends, out.step_rewards)
    assert per_token[1] == out.step_rewards[0] and per_token[5] == out.step_rewards[1]
    assert sum(per_token) == pytest.approx(sum(out.step_rewards)) and not math.isnan(sum(per_token))
    assert os.environ.get("REWARDSERVE_MODEL") is None


def test_shaped_step_rewards_on_the_tokenizer_s_own_text(service, qwen2_prm):
    from transformers import AutoTokenizer

    from rewardserve.client.integrations.trajectory import templated

    messages = [
        {"role": "user", "content": "find x"},
        {"role": "assistant", "content": "Searching for x."},
        {"role": "user", "content": "and?"},
        {"role": "assistant", "content": "x is 4."},
    ]
    client = RewardClient(service)
    raw = trajectory_rewards(client, "prm", messages)
    delta = trajectory_rewards(client, "prm", messages, shaping="delta")
    # The shaped rewards, not the raw scores, where shaping was asked for.
    assert delta.step_rewards == pytest.approx([raw.step_rewards[0], raw.step_rewards[1] - raw.step_rewards[0]])
    tokenizer = AutoTokenizer.from_pretrained(qwen2_prm)
    text = templated(tokenizer, messages)
    assert text.text == tokenizer.apply_chat_template(messages, tokenize=False)
    for index in (1, 3):
        start = text.message_starts[index]
        assert text.text[start : start + len(messages[index]["content"])] == messages[index]["content"]
    ends = step_ends(delta.spans, text.message_starts)
    per_token = token_rewards(text.offsets, ends, delta.step_rewards)
    assert len(per_token) == len(tokenizer(text.text, add_special_tokens=False)["input_ids"])
    placed = [i for i, r in enumerate(per_token) if r != 0]
    assert [per_token[i] for i in placed] == pytest.approx(delta.step_rewards)
    # Each reward sits on the token holding its step's last character.
    for i, end in zip(placed, ends):
        assert text.offsets[i][0] <= end < text.offsets[i][1] and text.text[end] == "."


def test_trl_groups_are_its_prompts_and_missing_rewards_say_why(service, caplog):
    """TRL sends each prompt's completions together (num_generations in a row): they form
    one group, so a ``normalize: group`` criterion gives z-scores summing to 0 per prompt;
    a reward that cannot be computed is logged with its reason, or raised, or stood in for."""
    import logging

    from rewardserve.client import RewardServeError

    client = RewardClient(service)
    prompts = [p for p in ("Say yes.", "Say no.") for _ in range(4)]
    completions = ["yes", "yes yes, I say yes", "no", "maybe so", "no", "no no", "yes", "I will not say it"]
    (normalized,) = rubric_reward_functions(
        criteria=[{"name": "rm", "model": "rm", "normalize": "group"}], client=client
    ).functions
    values = normalized(prompts, completions)
    for group in (values[:4], values[4:]):
        assert abs(sum(group)) < 1e-6 and max(abs(v) for v in group) > 0.1, values
    no_answer = reward_function("fuzzy", client=client, reference_column="answer")
    # A column the dataset lacks is the caller's mistake, named with the columns there.
    with pytest.raises(KeyError, match=r"'answer' is not among the dataset's columns \['reference'\]"):
        no_answer(prompts, completions, reference=["yes"] * 8)
    empty = {"answer": [None] * 8}
    with caplog.at_level(logging.WARNING, "rewardserve.trl"):
        assert no_answer(prompts, completions, **empty) == [None] * 8
    assert "8 of 8 completions have no reward" in caplog.text and "reference" in caplog.text
    stand_in = reward_function("fuzzy", client=client, reference_column="answer", on_invalid=0.0)
    assert stand_in(prompts, completions, **empty) == [0.0] * 8
    with pytest.raises(RewardServeError, match="no reward"):
        reward_function("fuzzy", client=client, reference_column="answer", on_invalid="raise")(
            prompts, completions, **empty
        )
    # The default column is read when there, and its absence is no error: reward
    # models take no reference.
    assert len(reward_function("rm", client=client)(prompts, completions)) == 8
    # The same choice for a rubric's functions, which share one call: every function
    # stands in or raises, not only the first TRL calls.
    criteria = [{"name": "f", "model": "fuzzy"}, {"name": "fmt", "fn": "think_format"}]
    for on_invalid in (-1.0, "raise"):
        functions = rubric_reward_functions(
            criteria=criteria, client=client, reference_column="answer", on_invalid=on_invalid
        ).functions
        for fn in functions:
            if on_invalid == "raise":
                with pytest.raises(RewardServeError, match="no reward"):
                    fn(prompts, completions, **empty)
            else:
                assert fn(prompts, completions, **empty) == [-1.0] * 8
