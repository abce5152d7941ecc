"""The watcher's facts from the sim's NodeClaims and Nodes as API objects: a NodeClaim marked for
deletion (by a user or a service, as an object or for the NATS path) and a deleted Node of a
NodeClaim each report NodeClaimDeletionRequested once."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from services.sim.cluster import Node, SimCluster
from services.watcher.facts import Facts

T0 = datetime(2026, 11, 23, 9, tzinfo=UTC)


def requested(facts: Facts, cluster: SimCluster, after: int) -> list[tuple[str, str]]:
    out = []
    for change in cluster.changes_since(after):
        for fact in facts.observe(change):
            if fact.event.TYPE == "NodeClaimDeletionRequested":
                out.append((fact.event.nodeclaim, fact.event.nodepool))
    return out


def test_a_claim_marked_through_the_nats_path_is_reported_once():
    cluster, facts = SimCluster(), Facts()
    cluster.annotate_nodeclaim("general-a", "general", {"karpenter.sh/nodeclaim-termination-timestamp": "x"}, T0)
    cluster.delete_nodeclaim("general-a", "general", T0)
    assert requested(facts, cluster, 0) == [("general-a", "general")]
    claim = cluster.nodeclaims["general-a"]
    assert claim["metadata"]["finalizers"] == ["karpenter.sh/termination"] and claim["metadata"]["deletionTimestamp"]
    assert claim["metadata"]["annotations"] == {"karpenter.sh/nodeclaim-termination-timestamp": "x"}
    version = cluster.resource_version
    cluster.nodeclaim_gone("general-a")  # its instance terminated: the marked claim goes
    assert "general-a" not in cluster.nodeclaims and requested(facts, cluster, version) == []
    assert "general-a" not in facts.deletions


def test_a_claim_created_then_deleted_is_reported_when_marked_not_before():
    cluster, facts = SimCluster(), Facts()
    claim = {
        "metadata": {
            "name": "c1",
            "labels": {"karpenter.sh/nodepool": "web"},
            "finalizers": ["karpenter.sh/termination"],
        },
        "spec": {},
    }
    cluster.create_custom("NodeClaim", claim, T0)
    assert requested(facts, cluster, 0) == []
    version = cluster.resource_version
    cluster.delete_custom("NodeClaim", "c1", T0)
    cluster.delete_custom("NodeClaim", "c1", T0)  # asked twice: marked once
    assert requested(facts, cluster, version) == [("c1", "web")]


def test_a_deleted_node_of_a_claim_requests_its_claims_deletion_once():
    cluster, facts = SimCluster(), Facts()
    allocatable = {"cpu": Decimal(4)}
    node = Node("c1", "sim:///c1", {"karpenter.sh/nodepool": "web"}, [], allocatable, allocatable, T0, True)
    node.finalizers = ["karpenter.sh/termination"]
    cluster.add_node(node)
    cluster.request_node_deletion("c1", T0)
    cluster.label_node("c1", {"more": "x"})  # still marked: no second request
    claim = {"metadata": {"name": "c1", "labels": {"karpenter.sh/nodepool": "web"}, "finalizers": ["f"]}, "spec": {}}
    cluster.create_custom("NodeClaim", claim, T0)
    cluster.delete_custom("NodeClaim", "c1", T0)  # its claim marked too: the same request
    assert requested(facts, cluster, 0) == [("c1", "web")]


def test_a_terminated_instances_node_is_held_by_its_finalizer_not_lost():
    from services.sim.cloud import LaunchRequest
    from services.sim.world import World
    from shared.api.core import Requirement
    from shared.api.scenario import parse_scenario
    from tests.conftest import nodepool_doc
    from tests.factories import scenario_doc

    world = World(parse_scenario(scenario_doc("held", nodePools=[nodepool_doc(**{"metadata.name": "web"})])))
    on_demand = Requirement(key="karpenter.sh/capacity-type", operator="In", values=["on-demand"])
    requests = {"cpu": Decimal(1)}
    held = world.launch(LaunchRequest("c1", "web", [on_demand], requests, {"karpenter.sh/nodepool": "web"}, [], []))
    free = world.launch(LaunchRequest("c2", "web", [on_demand], requests, {"karpenter.sh/nodepool": "web"}, [], []))
    world.advance(world.now + world.launch_latency + world.registration_latency)
    world.cluster.nodes["c1"].finalizers = ["karpenter.sh/termination"]
    world.terminate(held.provider_id)
    world.terminate(free.provider_id)
    assert "c2" not in world.cluster.nodes  # no finalizer: gone with its instance
    node = world.cluster.nodes["c1"]
    assert node.deletion_timestamp is not None and not node.ready
    node.finalizers = []
    world.cluster.update_node(node)
    assert "c1" not in world.cluster.nodes
