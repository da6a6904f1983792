"""The operator's own reward functions (``module:function``, TRL's signature) in a rule
model: imported from its directory, run in real pool workers, each item on its own."""

from __future__ import annotations

import importlib
import sys
import time

import pytest

from rewardserve.engine.pools.runner import RuleLimits, RuleRunner
from rewardserve.models.errors import ItemError
from rewardserve.models.kinds import build_checked, build_model
from rewardserve.models.reward_model import ModelContext
from rewardserve.models.rules.custom import prompt_text
from rewardserve.models.spec import ModelSpec
from rewardserve.protocol import Item, Message, ScoreOptions
from tests.harness import run_jobs

# The pool's workers run niced: a test process beside them would eat their time limits.
pytestmark = pytest.mark.alone

MODULE = "rs_custom_rewards"  # a name of its own: the serving process keeps what it imports
SOURCE = """
import time


def length_bonus(prompts, completions, reference, **columns):
    langs = columns.get("lang", [None] * len(completions))
    return [
        len(c) / 10 + (1.0 if c == r else 0.0) + (0.5 if lang == "en" else 0.0) + (0.25 if p else 0.0)
        for p, c, r, lang in zip(prompts, completions, reference, langs)
    ]


def picky(prompts, completions, **columns):
    kind = completions[0]
    if kind == "raise":
        raise ValueError("no thanks")
    if kind == "sleep":
        time.sleep(60)
    if kind == "none":
        return [None]
    if kind == "two":
        return [1.0, 2.0]
    if kind == "text":
        return ["high"]
    if kind == "exit":
        raise SystemExit(3)
    return [0.5]


def where_i_run(prompts, completions, **columns):
    import os

    # The worker's scheduling policy and niceness, in one number: policy * 100 + nice.
    return [float(os.sched_getscheduler(0) * 100 + os.getpriority(os.PRIO_PROCESS, 0))]


NOT_A_FUNCTION = 3
"""


@pytest.fixture(scope="module")
def rewards_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("rewards")
    (directory / f"{MODULE}.py").write_text(SOURCE)
    return directory


@pytest.fixture(scope="module")
def runner():
    runner = RuleRunner(RuleLimits(workers=2, timeout_s=1.0, memory_mb=256, max_queued=1000))
    yield runner
    runner.close()


def model_for(fn: str, rewards_dir, runner):
    spec = ModelSpec(name="mine", kind="rule", source=f"{MODULE}:{fn}", options={"path": str(rewards_dir)})
    model = build_model(spec, ModelContext(rules=runner))
    model.load()
    return model


def score(model, items):
    return run_jobs(model, model.prepare(items, ScoreOptions()))


def test_a_module_function_scores_like_the_function_called_directly(rewards_dir, runner):
    model = model_for("length_bonus", rewards_dir, runner)
    items = [
        Item(prompt="Say 4", response="4", reference="4", metadata={"lang": "en"}),
        Item(prompt="Say 4", response="four", reference="4", metadata={"lang": "fr"}),
        Item(response="a longer answer", reference="x", metadata={"lang": "en"}),
        Item(
            messages=[Message(role="user", content="q?"), Message(role="assistant", content="ok")],
            reference="ok",
            metadata={"lang": "de"},
        ),
    ]
    results = score(model, items)
    sys.path.insert(0, str(rewards_dir))
    try:
        fn = importlib.import_module(MODULE).length_bonus
    finally:
        sys.path.remove(str(rewards_dir))
    # As TRL calls it: the whole batch, each column a list.
    direct = fn(
        [prompt_text(i) for i in items],
        [i.response_text() for i in items],
        reference=[i.reference for i in items],
        lang=[(i.metadata or {})["lang"] for i in items],
    )
    assert [r.score for r in results] == pytest.approx(direct)
    assert direct == pytest.approx([0.1 + 1 + 0.5 + 0.25, 0.4 + 0.25, 1.5 + 0.5, 0.2 + 1 + 0.25])
    # No metadata: no column (the function's own default), the reference still passed.
    (alone,) = score(model, [Item(response="4", reference="4")])
    assert [alone.score] == pytest.approx(fn([None], ["4"], reference=["4"]))


def test_a_raising_a_sleeping_or_a_none_function_fails_only_its_item(rewards_dir, runner):
    model = model_for("picky", rewards_dir, runner)
    kinds = ["ok", "raise", "ok", "sleep", "none", "two", "text", "exit", "ok"]
    start = time.monotonic()
    results = score(model, [Item(response=k) for k in kinds])
    assert time.monotonic() - start < 20  # the sleeper was killed at its 1 s limit
    by_kind = dict(zip(kinds, results))
    assert [r.score for k, r in zip(kinds, results) if k == "ok"] == [0.5, 0.5, 0.5]
    errors = {k: str(r) for k, r in by_kind.items() if k != "ok"}
    assert all(isinstance(by_kind[k], ItemError) for k in errors)
    assert "ValueError: no thanks" in errors["raise"]
    assert "timed out" in errors["sleep"]
    assert errors["none"] == f"{MODULE}:picky: the function returned None"
    assert "returned 2 values" in errors["two"] and "expected a list of one" in errors["two"]
    assert "returned [str]" in errors["text"]
    assert "SystemExit: 3" in errors["exit"]
    # The killed worker was replaced: the model still answers.
    (after,) = score(model, [Item(response="ok")])
    assert after.score == 0.5


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("rs_no_such_module:f", "no module named 'rs_no_such_module'"),
        (f"{MODULE}:missing", f"module '{MODULE}' has no attribute 'missing'"),
        (f"{MODULE}:NOT_A_FUNCTION", "'NOT_A_FUNCTION' is a int, not a function"),
        ("os:system", "module 'os' comes from Python itself"),
        ("json:loads", "module 'json' comes from"),
    ],
)
def test_an_unusable_function_is_one_line_at_build_naming_the_directory(rewards_dir, source, problem):
    spec = ModelSpec(name="mine", kind="rule", source=source, options={"path": str(rewards_dir)})
    with pytest.raises(ValueError) as err:
        build_checked(spec)
    (line,) = str(err.value).splitlines()
    assert line.startswith(f"model 'mine' (kind rule, source): cannot import '{source}'")
    assert problem in line
    assert str(rewards_dir) in line


def test_options_fn_and_the_current_directory(rewards_dir, monkeypatch):
    monkeypatch.chdir(rewards_dir)
    model = build_model(ModelSpec(name="m", kind="rule", source="x", options={"fn": f"{MODULE}:length_bonus"}))
    assert model.fn_path == str(rewards_dir.resolve())
    model.close()
    monkeypatch.chdir(rewards_dir.parent)
    with pytest.raises(ValueError, match=r"\(kind rule, options.fn\): cannot import .* \(searched .* and PYTHONPATH\)"):
        build_model(ModelSpec(name="m", kind="rule", source="x", options={"fn": f"{MODULE}:nope"}))


def test_prompt_text():
    assert prompt_text(Item(prompt="p", response="r")) == "p"
    assert prompt_text(Item(response="r")) is None
    turns = [
        Message(role="system", content="s"),
        Message(role="user", content="u1"),
        Message(role="assistant", content="a"),
        Message(role="user", content="u2"),
    ]
    assert prompt_text(Item(prompt=turns, response="r")) == "u2"
    assert prompt_text(Item(messages=[*turns, Message(role="assistant", content="r")])) == "u2"


@pytest.mark.parametrize(("priority", "policy", "nice"), [("nice", "SCHED_OTHER", 19), ("idle", "SCHED_IDLE", 0)])
def test_the_workers_run_below_the_service_as_the_setting_says(rewards_dir, priority, policy, nice):
    """``rule_priority``: nice 19, or Linux's SCHED_IDLE (only cores nothing else wants)."""
    import os

    from rewardserve.service.settings import Settings

    runner = RuleRunner(Settings(models=[], rule_priority=priority, rule_workers=1).rule_limits())
    try:
        (result,) = score(model_for("where_i_run", rewards_dir, runner), [Item(response="x")])
    finally:
        runner.close()
    assert result.score == getattr(os, policy) * 100 + nice
