"""The one fair scheduler: its books per resource, shared weights, work told per
resource, and weighted fair queueing's order within a resource."""

from __future__ import annotations

from rewardserve.engine.scheduler import FairScheduler


def test_each_resource_gets_its_books_once_and_every_charge_is_told_with_its_resource():
    told: list[tuple[str, str | None, float]] = []
    scheduler = FairScheduler(served=lambda resource, tenant, work: told.append((resource, tenant, work)))
    forward = scheduler.turns("forward", "rm")
    assert scheduler.turns("forward", "rm") is forward
    assert scheduler.turns("forward", "other") is not forward
    forward.charge("a", {"a": 30.0, "b": 10.0})
    scheduler.turns("rules", "light").account("b", 0.25)
    scheduler.turns("gate").charge("a", {"a": 1.0})
    assert told == [("forward", "a", 30.0), ("forward", "b", 10.0), ("rules", "b", 0.25), ("gate", "a", 1.0)]
    assert scheduler.resources() == [("forward", "other"), ("forward", "rm"), ("gate", ""), ("rules", "light")]


def test_the_weights_are_the_scheduler_s_for_every_resource():
    weights = {"a": 3.0, "b": 1.0}
    scheduler = FairScheduler(weight=lambda tenant: weights.get(tenant or "", 1.0))
    for resource in ("gate", "forward", "rules"):
        turns = scheduler.turns(resource)
        served = {"a": 0.0, "b": 0.0}
        for _ in range(400):  # each turn one unit of work to whoever is furthest behind
            tenant = turns.furthest_behind(["a", "b"])
            assert tenant is not None
            turns.charge(tenant, {tenant: 1.0})
            served[tenant] += 1
        assert served == {"a": 300.0, "b": 100.0}, resource


def test_work_at_one_resource_costs_no_turns_at_another():
    scheduler = FairScheduler()
    scheduler.turns("rules").account("a", 100.0)  # a's slow rule calls
    forward = scheduler.turns("forward", "rm")
    forward.rejoin("a")
    forward.rejoin("b")
    assert forward.in_turn(["b", "a"]) == ["a", "b"]  # a tie, broken by name, not by a's rule time


def test_a_tenant_back_from_idle_gets_no_credit_for_the_time_away():
    turns = FairScheduler().turns("forward", "rm")
    for _ in range(50):
        turns.charge("a", {"a": 10.0})
    turns.rejoin("b")  # b was idle all along: it starts where a's turns are now
    order = []
    for _ in range(4):
        tenant = turns.furthest_behind(["a", "b"])
        turns.charge(tenant, {tenant: 10.0})
        order.append(tenant)
    assert sorted(order) == ["a", "a", "b", "b"]  # alternating, not four of b's
