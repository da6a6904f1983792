"""The reward-hacking alarms (service/observability/hacking_alarms.py) on seeded synthetic reward
streams: clean runs raise none (at most 1% of 1,000 runs raise any), and an injected
length hack, variance collapse or component dominance from step k is flagged within 20
steps of k in at least 95% of runs. A step is 8 GRPO groups of 8 completions."""

from __future__ import annotations

import random

import pytest

from rewardserve.service.observability.hacking_alarms import Alarms, Group

GROUPS, SIZE = 8, 8
STEPS, HACK_AT = 48, 20
SIGMAS = (1.0, 0.8, 0.6)  # the components' spreads (a rubric of three criteria)


def step(rng: random.Random, at: int, hack: str | None) -> list[Group]:
    on = hack is not None and at >= HACK_AT
    groups = []
    for _ in range(GROUPS):
        difficulty = rng.gauss(0, 1)
        lengths = [max(10.0, rng.gauss(300, 80)) for _ in range(SIZE)]
        mean_length = sum(lengths) / SIZE
        rewards, components, truncated, reference = [], [], [], []
        for length in lengths:
            sigmas = (6.0, *SIGMAS[1:]) if on and hack == "dominance" else SIGMAS
            parts = {f"c{k}": rng.gauss(0, s) for k, s in enumerate(sigmas)}
            noise = sum(parts.values())
            if on and hack == "variance":
                noise *= 0.05  # the group's completions all score about alike
            reward = difficulty + noise + 0.1 * (length - mean_length) / 80  # a little length bias: normal
            if on and hack == "length":
                reward += 1.2 * (length - mean_length) / 80
            rewards.append(reward)
            components.append(parts)
            truncated.append(rng.random() < 0.02)
            reference.append(reward + rng.gauss(0, 0.7) if rng.random() < 0.05 else None)
        groups.append(Group(rewards, lengths, truncated, components, reference))
    return groups


def run(seed: int, hack: str | None) -> dict[str, int]:
    """The step each alarm first started at."""
    rng = random.Random(seed)
    alarms = Alarms()
    first: dict[str, int] = {}
    for at in range(STEPS if hack is None else HACK_AT + 21):
        for group in step(rng, at, hack):
            alarms.observe_group(group)
        started, _ = alarms.evaluate()
        for name in started:
            first.setdefault(name, at)
    return first


@pytest.mark.long(40)
def test_clean_runs_raise_no_alarm():
    raised = [seed for seed in range(1000) if run(seed, None)]
    assert len(raised) <= 10, f"{len(raised)} of 1000 clean runs raised an alarm: {[run(s, None) for s in raised[:5]]}"
    print(f"clean: {len(raised)} of 1000 runs raised an alarm")


@pytest.mark.long(20)
@pytest.mark.parametrize("hack", ["length", "variance", "dominance"])
def test_an_injected_hack_is_flagged_within_20_steps(hack):
    runs = [run(10_000 + seed, hack) for seed in range(200)]
    caught = [first[hack] - HACK_AT for first in runs if hack in first and first[hack] >= HACK_AT]
    early = [first for first in runs if any(at < HACK_AT for at in first.values())]
    assert len(caught) >= 0.95 * len(runs), (hack, len(caught), runs[:5])
    assert all(delay <= 20 for delay in caught)
    assert len(early) <= 0.02 * len(runs), early[:5]  # before the hack: nothing to see
    print(
        f"{hack}: flagged in {len(caught)} of {len(runs)} runs, after {sorted(caught)[len(caught) // 2]} steps (median)"
    )


def test_an_alarm_ends_when_the_hack_stops():
    rng = random.Random(7)
    alarms = Alarms()
    seen = []
    for at in range(60):
        hack = "length" if 20 <= at < 35 else None
        for group in step(rng, at if hack else 0, hack):
            alarms.observe_group(group)
        started, ended = alarms.evaluate()
        seen += [(at, "start", name) for name in started] + [(at, "end", name) for name in ended]
    assert [e for e in seen if e[2] == "length"][0][1] == "start"
    assert any(kind == "end" and name == "length" and at > 35 for at, kind, name in seen), seen
    assert not alarms.active


def test_reward_health_keeps_alarms_per_model_and_tenant_with_gauges_and_log_lines(caplog):
    from rewardserve.protocol import Item, ItemResult
    from rewardserve.service.observability.metrics import Metrics
    from rewardserve.service.observability.reward_health import RewardHealth

    metrics = Metrics()
    health = RewardHealth(metrics)
    rng = random.Random(11)
    lines: list[str] = []
    for at in range(40):
        groups = step(rng, at, "length")
        items, results = [], []
        for g, group in enumerate(groups):
            for reward, length in zip(group.rewards, group.lengths):
                items.append(Item(prompt="p", response="x" * int(length), group_id=f"{at}-{g}"))
                results.append(ItemResult(score=reward))
        lines += health.alarms("rm", "team-a", items, results)
        health.alarms("rm", "team-b", items[:8], results[:8])  # another tenant: its own baseline
    assert any(line.startswith("reward alarm 'length' started for model 'rm' (team-a)") for line in lines), lines
    text = metrics.render().decode()
    assert 'rewardserve_reward_alarm{alarm="length",model="rm",tenant="team-a"} 1.0' in text
    assert 'tenant="team-b"' not in text  # too few groups for a baseline yet: no alarm
    assert any("reward alarm 'length' started" in r.getMessage() for r in caplog.records)


def test_drift_against_a_reference_is_flagged_from_its_own_pairs():
    """A frozen reference (a shadow candidate) scores a sample of the items later: its
    pairs have a window of their own. The proxy keeps rising while the reference does not."""
    rng = random.Random(5)
    alarms = Alarms()
    for _ in range(2 * 64):  # a baseline and a full window of groups, no hack
        alarms.observe_group(step(rng, 0, None)[0])
    started_at = None
    for k in range(40):
        pairs = []
        for _ in range(32):
            gold = rng.gauss(0, 1)
            proxy = gold + rng.gauss(0, 0.5) if k < 12 else rng.gauss(0, 1) + 0.2 * (k - 12)
            pairs.append((proxy, gold))
        alarms.observe_reference(pairs)
        started, _ = alarms.evaluate()
        if "drift" in started and started_at is None:
            started_at = k
    assert started_at is not None and started_at >= 12, started_at  # not before the proxy drifted
    assert "drift" in alarms.active
