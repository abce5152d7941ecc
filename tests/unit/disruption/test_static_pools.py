"""A static pool in the disruption pass (docs/static-capacity.md): with the gate on, a pool over
its replicas is scaled down by a forceful `Overprovisioned` command in upstream's order, never
while off; consolidation (emptiness included) never takes its nodes, while drift replaces them
one-for-one from the pool's template (upstream's static drift), within budgets and the node limit."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from services.disruption.world import build
from shared.disruption.passes import forceful, graceful, recheck
from shared.disruption.world import consolidatable_from
from shared.runtime.catalogs import Loaded
from tests.factories import T0, applied
from tests.unit.disruption.test_service_world import CATALOG, bound, fold, node

LATER = T0 + timedelta(hours=1)


def static_applied(replicas: int) -> Any:
    event = applied("p")
    event.nodepool_object["spec"]["replicas"] = replicas
    return event


def test_a_pool_over_its_replicas_is_scaled_down_empty_nodes_first():
    projection, counters = fold(
        [static_applied(3), *node("a"), *node("b"), *node("c"), bound("w", "a"), static_applied(1)]
    )
    world = build(projection, counters, Loaded(CATALOG), LATER, static_capacity=True)
    (found,) = forceful(world)
    assert found.command.reason == "Overprovisioned" and found.forceful
    assert found.command.candidates == ("b", "c")  # the empty ones; "a" holds a pod
    off = build(projection, counters, Loaded(CATALOG), LATER)
    assert forceful(off) == []  # the gate off: nothing keeps the replicas, as upstream


def test_a_pool_at_its_replicas_loses_nothing():
    projection, counters = fold([static_applied(2), *node("a"), *node("b")])
    assert forceful(build(projection, counters, Loaded(CATALOG), LATER, static_capacity=True)) == []


def test_consolidation_never_takes_a_static_pools_nodes():
    projection, counters = fold([static_applied(2), *node("a"), *node("b")])
    world = build(projection, counters, Loaded(CATALOG), LATER, static_capacity=True)
    assert [consolidatable_from(world, n) for n in world.nodes] == [None, None]
    result = graceful(world)
    # two empty nodes a dynamic pool would lose to Emptiness (the fixture's nodes are drifted too:
    # drift, not consolidation, may take them)
    assert result.eligible.get("Empty", 0) == 0 and result.eligible.get("Underutilized", 0) == 0
    assert {f.command.reason for f in result.found} <= {"Drifted"}


def test_a_dynamic_pools_empty_node_is_still_consolidated():
    projection, counters = fold([applied("p"), *node("a")])
    result = graceful(build(projection, counters, Loaded(CATALOG), LATER, static_capacity=True))
    assert [f.command.reason for f in result.found] == ["Empty"]


def test_a_drifted_static_node_is_replaced_one_for_one_from_the_template():
    projection, counters = fold([static_applied(1), *node("a"), bound("w", "a")])
    world = build(projection, counters, Loaded(CATALOG), LATER, static_capacity=True)
    assert [n.drift for n in world.nodes] == ["RequirementsDrifted"]  # its labels lack the pool's
    (found,) = graceful(world).found
    assert (found.command.reason, found.command.candidates, found.command.replacements) == ("Drifted", ("a",), 1)
    (claim,) = found.new_claims
    assert claim.nodepool == "p" and claim.pods == [] and claim.instance_types == ["type-2-8Gi"]
    again = recheck(world, reason="Drifted", candidates=["a"], replacements=1, moved=[], pools=["p"])
    assert again.keep == ("a",) and [c.nodepool for c in again.new_claims] == ["p"]


def test_no_static_drift_while_the_pool_is_over_its_replicas_or_its_budget_is_spent():
    projection, counters = fold([static_applied(2), *node("a"), *node("b"), static_applied(1)])
    over = graceful(build(projection, counters, Loaded(CATALOG), LATER, static_capacity=True))
    assert over.found == []  # its scale-down comes first (the forceful pass)
    spent = static_applied(1)
    spent.nodepool_object["spec"]["disruption"] = {"budgets": [{"nodes": "0"}]}
    projection, counters = fold([spent, *node("a")])
    assert graceful(build(projection, counters, Loaded(CATALOG), LATER, static_capacity=True)).found == []


def test_a_static_node_at_the_node_limit_is_held_back_and_said():
    limited = static_applied(1)
    limited.nodepool_object["spec"]["limits"] = {"nodes": "1"}
    projection, counters = fold([limited, *node("a")])
    result = graceful(build(projection, counters, Loaded(CATALOG), LATER, static_capacity=True))
    assert result.found == []
    assert [(b.nodepool, b.reason, b.cause) for b in result.pool_blocked] == [("p", "Drifted", "NodeHardLimit")]
