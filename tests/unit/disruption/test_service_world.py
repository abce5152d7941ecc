"""The disruption service's projection as the pure pass sees it: an empty node is found, a pod
bound to a candidate after the decision makes the command stale, a changed template drifts its
nodes, and a replacement whose command is still under way is never a candidate itself."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

from services.disruption.projection import Projection
from services.disruption.world import build
from shared.disruption.passes import graceful, recheck
from shared.events import contracts as c
from shared.events.envelope import Metadata, RecordedEvent
from shared.policy.counters import PoolCounters, evolve
from shared.runtime.catalogs import Loaded
from shared.scheduling.offerings import InstanceOption, Offer
from tests.factories import T0, applied, created, decided, initialized, launched

CATALOG = [
    InstanceOption(
        "type-2-8Gi",
        {"cpu": Decimal(2), "memory": Decimal(8 * 2**30), "pods": Decimal(110)},
        {"cpu": Decimal(2), "memory": Decimal(8 * 2**30), "pods": Decimal(110)},
        {"node.kubernetes.io/instance-type": "type-2-8Gi"},
        (Offer("a", "on-demand", 1.0),),
    )
]


def fold(events: list[c.Event], start: int = 1) -> tuple[Projection, dict[str, PoolCounters]]:
    projection = Projection()
    counters: dict[str, PoolCounters] = {}
    claims: dict = {}
    for i, event in enumerate(events, start):
        data = event.payload()
        at = T0 + timedelta(minutes=i)
        projection.apply(RecordedEvent(i, uuid.uuid4(), event.stream_id, 1, event.TYPE, 1, data, Metadata("t"), at, at))
        pool = data.get("nodepool")
        if isinstance(pool, str):
            evolve(counters.setdefault(pool, PoolCounters(pool)), claims, event.TYPE, data, i)
    return projection, counters


def node(claim: str, labels: dict[str, str] | None = None) -> list[c.Event]:
    """A launched, registered, initialized claim of pool p (drifted unless `labels` match)."""
    return [
        created(claim, "p"),
        launched(claim, "p", zone="a"),
        c.NodeRegistered(
            node=f"{claim}-node",
            provider_id=f"sim:///{claim}",
            nodeclaim=claim,
            nodepool="p",
            labels=labels or {"karpenter.sh/nodepool": "p"},
            allocatable={"cpu": "2", "memory": "8Gi", "pods": "110"},
        ),
        c.NodeClaimRegistered(nodeclaim=claim, nodepool="p", node=f"{claim}-node"),
        initialized(claim, "p"),
    ]


def bound(pod: str, claim: str) -> c.PodBound:
    return c.PodBound(namespace="default", name=pod, node=f"{claim}-node", requests={"cpu": "1"}, labels={"app": "x"})


def test_an_empty_node_is_found_and_one_with_a_pod_is_not():
    projection, counters = fold([applied("p"), *node("a"), *node("b"), bound("w", "b")])
    now = T0 + timedelta(hours=1)
    result = graceful(build(projection, counters, Loaded(CATALOG), now))
    assert [f.command.candidates for f in result.found] == [("a",)]
    assert result.found[0].command.reason == "Empty"


def test_a_pod_bound_to_a_candidate_after_the_decision_makes_the_command_stale():
    events = [applied("p"), *node("a"), *node("b")]
    projection, counters = fold(events)
    observed = projection.position
    projection2, counters2 = fold([*events, decided("d", "p", "Empty", ["a"]), bound("late", "a")])
    claim = projection2.claims["a"]
    assert claim.touched > observed
    world = build(projection2, counters2, Loaded(CATALOG), T0 + timedelta(hours=1), judging="d")
    verdict = recheck(world, reason="Empty", candidates=["a"], replacements=0, moved=["a"])
    assert verdict.cancelled and verdict.dropped == {"a": "changed since the decision: its stream moved"}
    untouched = recheck(
        build(projection, counters, Loaded(CATALOG), T0 + timedelta(hours=1)),
        reason="Empty",
        candidates=["a"],
        replacements=0,
        moved=[],
    )
    assert untouched.keep == ("a",)


def test_a_changed_template_drifts_the_nodes_made_before_it():
    changed = applied("p")
    changed.nodepool_object["spec"]["template"].setdefault("metadata", {})["labels"] = {"team": "b"}
    projection, counters = fold(
        [applied("p"), *node("a"), c.NodePoolApplied(nodepool="p", nodepool_object=changed.nodepool_object)]
    )
    world = build(projection, counters, Loaded(CATALOG), T0 + timedelta(hours=1))
    assert [n.drift for n in world.nodes] == ["NodePoolDrifted"]


def test_a_replacement_is_not_a_candidate_while_its_command_is_under_way():
    events = [applied("p"), *node("a"), bound("w", "a"), decided("d", "p", "Drifted", ["a"], ["r"]), *node("r")]
    events[-5] = created("r", "p", replacement_for="d")
    projection, counters = fold(events)
    world = build(projection, counters, Loaded(CATALOG), T0 + timedelta(hours=1))
    states = {n.state.nodeclaim: n.state for n in world.nodes}
    assert states["r"].nominated and states["a"].deleting
    assert graceful(world).found == []


def test_finished_commands_leave_the_projection_so_a_long_run_keeps_only_live_ones():
    from tests.factories import terminated

    base = [applied("p"), *node("a"), *node("b"), decided("d", "p", "Empty", ["a"]), decided("e", "p", "Empty", ["b"])]
    cancelled = c.DisruptionCancelled(decision_id="d", nodepool="p", reason="Empty", candidates=["a"])
    completed = c.DisruptionCompleted(decision_id="e", nodepool="p", reason="Empty")
    projection, _ = fold([*base, cancelled, completed])
    assert set(projection.commands) == {"e"}  # its candidate still drains
    assert [c_.decision_id for c_ in projection.live_commands()] == []
    projection, _ = fold([*base, cancelled, completed, terminated("b", "p")])
    assert projection.commands == {}


def test_the_simulations_see_each_pools_own_catalog():
    projection, counters = fold([applied("p"), *node("a")])
    own = [replace(CATALOG[0], name="tight")]
    world = build(projection, counters, Loaded(CATALOG, {"p": own}), T0 + timedelta(hours=1))
    assert world.cluster.catalog == tuple(CATALOG) and world.cluster.pool_catalogs == {"p": tuple(own)}


def test_the_simulation_sees_what_each_pools_limits_leave_and_each_candidates_capacity():
    projection, counters = fold([applied("p", {"cpu": "5", "nodes": "4"}), applied("q"), *node("a"), bound("w", "a")])
    world = build(projection, counters, Loaded(CATALOG), T0 + timedelta(hours=1))
    left = {t.name: t.remaining for t in world.cluster.pools}
    assert left == {"p": {"cpu": Decimal(3), "nodes": Decimal(3)}, "q": None}
    (moving,) = [n.movable for n in world.nodes if n.movable is not None]
    assert (moving.move.nodepool, moving.move.capacity["cpu"]) == ("p", Decimal(2))


def test_a_claim_whose_type_the_sims_catalog_no_longer_offers_drifts():
    events = node("a")
    events[1] = events[1].model_copy(update={"labels": {"kubernetes.io/arch": "amd64", "team": "a"}})  # its pool's
    projection, counters = fold([applied("p"), *events])
    later = T0 + timedelta(hours=2)  # the catalog is asked an hour after creation
    assert {n.drift for n in build(projection, counters, Loaded(CATALOG), later).nodes} == {None}
    gone = [replace(CATALOG[0], name="another-type")]
    assert {n.drift for n in build(projection, counters, Loaded(gone), later).nodes} == {"InstanceTypeNotFound"}


def test_a_pool_with_consolidation_off_says_so_on_each_of_its_nodes():
    never = applied("p")
    never.nodepool_object["spec"]["disruption"]["consolidateAfter"] = "Never"
    projection, counters = fold([never, *node("a")])
    result = graceful(build(projection, counters, Loaded(CATALOG), T0 + timedelta(hours=1)))
    assert result.unconsolidatable == {"a": 'NodePool "p" has consolidation disabled'}
    projection, counters = fold([applied("p"), *node("a")])
    assert "a" not in graceful(build(projection, counters, Loaded(CATALOG), T0 + timedelta(hours=1))).unconsolidatable
