"""The trainers' adapters on the code model: verl's ``compute_score`` for its code data
sources (ground truth: the tests as JSON text, as verl's codecontests / apps / taco rows
carry them), and TRL's reward function on open-r1's ``verification_info`` column."""

from __future__ import annotations

import json

import pytest

from rewardserve.client.integrations.trl import reward_function
from rewardserve.client.integrations.verl import compute_score
from tests.harness import serve_subprocess

RIGHT = "Here it is:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```"
HALF = "```python\nprint(3)\n```"


@pytest.fixture(scope="module")
def url():
    with serve_subprocess(env={"REWARDSERVE_LOG_LEVEL": "warning"}) as base:
        yield base


def test_verl_compute_score_scores_a_code_data_source_s_tests_in_one_request(url):
    truth = json.dumps({"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]})
    assert compute_score("codecontests", RIGHT, truth, None, model="code", base_url=url) == 1.0
    assert compute_score("codecontests", HALF, truth, None, model="code", base_url=url) == 0.5
    binary = {"binary": True}
    assert compute_score("codecontests", HALF, truth, None, model="code", base_url=url, code=binary) == 0.0


def test_trl_reward_function_reads_open_r1_s_verification_info(url):
    reward = reward_function("code", base_url=url, reference_column="verification_info")
    info = {"language": "python", "test_cases": [{"input": "1 2", "output": "3", "type": "stdin_stdout"}] * 2}
    cut_short = "```python\nprint(3)\nprint()\n```"
    completions = [[{"role": "assistant", "content": c}] for c in (RIGHT, HALF, cut_short)]
    prompts = [[{"role": "user", "content": "add two numbers"}]] * 3
    assert reward(prompts, completions, verification_info=[info] * 3) == [1.0, 1.0, 1.0]
    two_lines = {"language": "python", "test_cases": [{"input": "1 2", "output": "3\n4", "type": "stdin_stdout"}]}
    # open-r1's zip would pass the first line alone; here the line counts must agree.
    assert reward(prompts[:1], completions[:1], verification_info=[two_lines]) == [0.0]
