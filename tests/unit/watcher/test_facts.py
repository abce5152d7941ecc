"""The watcher's facts, from a sim world's watch stream and from lists after a restart."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from decimal import Decimal

from services.sim.cloud import LaunchRequest
from services.sim.world import World
from services.watcher.facts import Facts
from shared.api.core import Requirement, Taint
from shared.api.scenario import parse_scenario
from tests.conftest import nodepool_doc
from tests.factories import scenario_doc, startup_tainted_pool

SCENARIO = scenario_doc(
    cloud={"instanceTypes": 60},
    nodePools=[startup_tainted_pool()],
    workloads=[{"name": "web", "replicas": 3, "requests": {"cpu": "1"}, "pdb": {"minAvailable": 2}}],
)
ON_DEMAND = Requirement(key="karpenter.sh/capacity-type", operator="In", values=["on-demand"])


def launch(world: World, name: str) -> None:
    labels = {"karpenter.sh/nodepool": "general"}
    startup = [Taint(key="agent-not-ready", effect="NoExecute")]
    world.launch(LaunchRequest(name, "general", [ON_DEMAND], {"cpu": Decimal(3)}, labels, [], startup))


def types(facts) -> Counter[str]:
    return Counter(f.event.TYPE for f in facts)


def test_a_watch_reports_pools_pending_pods_nodes_and_bindings():
    world = World(parse_scenario(SCENARIO))
    facts = Facts()
    world.advance(world.now)
    seen = [f for e in world.cluster.changes_since(0) for f in facts.observe(e)]
    assert types(seen) == {"NodePoolApplied": 1, "PodPending": 3, "PodDisruptionBudgetApplied": 1}
    pending = next(f.event for f in seen if f.event.TYPE == "PodPending")
    assert (
        pending.requests == {"cpu": "1"} and pending.labels == {"app": "web"} and "0/0" not in (pending.message or "")
    )
    applied = next(f.event for f in seen if f.event.TYPE == "NodePoolApplied")
    assert applied.drift_hash and applied.resource_version
    rv = world.cluster.resource_version
    launch(world, "general-a")
    world.advance(world.now + timedelta(seconds=30))
    registered = [f for e in world.cluster.changes_since(rv) for f in facts.observe(e)]
    assert types(registered) == {"NodeRegistered": 1}  # not Ready, startup taint still on
    rv = world.cluster.resource_version
    world.advance(world.now + timedelta(seconds=20))
    later = [f for e in world.cluster.changes_since(rv) for f in facts.observe(e)]
    assert types(later) == {"NodeInitialized": 1, "PodBound": 3}
    node = next(f.event for f in registered)
    assert (node.nodeclaim, node.nodepool, node.provider_id.startswith("sim:///")) == ("general-a", "general", True)


def launched() -> tuple[World, Facts, list]:
    """A world with one initialized node, and the watcher's facts so far."""
    world = World(parse_scenario(SCENARIO))
    facts = Facts()
    world.advance(world.now)
    launch(world, "general-a")
    world.advance(world.now + timedelta(minutes=1))
    return world, facts, [f for e in world.cluster.changes_since(0) for f in facts.observe(e)]


def test_a_restarted_watcher_lists_and_reports_only_what_changed_with_the_same_ids():
    world, _, reported = launched()
    # the watcher dies; meanwhile a pod, the node and the pool go away, and a PDB changes
    world.cluster.delete_pod(next(iter(world.cluster.pods)))
    world.terminate(next(iter(world.cloud.running())).provider_id)
    world.cluster.delete_nodepool("general")
    world.advance(world.now)  # the controller replaces the lost pods
    restarted = Facts()
    restarted.remember(f.event for f in reported)
    again = restarted.resync(world.cluster.snapshot())
    kinds = types(again)
    assert kinds["PodDeleted"] == 3 and kinds["NodeDeleted"] == 1 and kinds["NodePoolDeleted"] == 1
    assert kinds["PodPending"] == 3  # the controller's replacements, pending (no node left)
    assert "PodBound" not in kinds and "NodePoolApplied" not in kinds and "NodeRegistered" not in kinds
    ids = [f.event_id for f in reported + again]
    assert len(ids) == len(set(ids))
    assert restarted.resync(world.cluster.snapshot()) == []  # nothing new: nothing reported


def test_a_watcher_that_reports_twice_uses_the_same_ids():
    world = World(parse_scenario(SCENARIO))
    world.advance(world.now)
    once = [f.event_id for e in world.cluster.changes_since(0) for f in Facts().observe(e)]
    twice = [f.event_id for e in world.cluster.changes_since(0) for f in Facts().observe(e)]
    assert once == twice


def test_an_invalid_nodepool_is_rejected_once_and_a_fix_applies_it():
    world = World(parse_scenario(SCENARIO))
    facts = Facts()
    bad = nodepool_doc(**{"metadata.name": "broken"})
    bad["spec"]["limits"] = {"cpu": "lots"}
    world.cluster.apply_nodepool(bad)
    rejected = [f for e in world.cluster.changes_since(0) for f in facts.observe(e)]
    (fact,) = [f for f in rejected if f.event.TYPE == "NodePoolRejected"]
    assert fact.event.errors[0]["path"] == "spec.limits[cpu]"
    assert facts.resync(world.cluster.snapshot()) == []
    condition = {
        "type": "ValidationSucceeded",
        "status": "False",
        "reason": "ValidationFailed",
        "message": "x",
        "lastTransitionTime": "2026-11-23T09:00:00Z",
    }
    world.cluster.set_nodepool_condition("broken", condition)  # the watcher's own write-back
    assert facts.resync(world.cluster.snapshot()) == []
    good = nodepool_doc(**{"metadata.name": "broken"})
    rv = world.cluster.resource_version
    world.cluster.apply_nodepool(good)
    fixed = [f for e in world.cluster.changes_since(rv) for f in facts.observe(e)]
    assert types(fixed) == {"NodePoolApplied": 1}
    rv = world.cluster.resource_version
    world.cluster.set_nodepool_condition("broken", {**condition, "status": "True", "reason": "ValidationSucceeded"})
    assert [f for e in world.cluster.changes_since(rv) for f in facts.observe(e)] == []  # status only


def test_a_list_reports_pools_and_nodes_before_the_pods_that_refer_to_them():
    world = World(parse_scenario(SCENARIO))
    world.advance(world.now)
    launch(world, "general-a")
    world.advance(world.now + timedelta(minutes=1))
    world.cluster.taint("general-a", Taint(key="later", effect="PreferNoSchedule"))  # the node changes last
    facts = Facts().resync(world.cluster.snapshot())
    order = [f.event.TYPE for f in facts]
    assert order.index("NodePoolApplied") < order.index("NodeRegistered") < order.index("PodBound")


def test_an_initialized_node_that_goes_not_ready_and_back_is_reported_once_each_way():
    """A NotReady node consumes its pool's budget (docs/budgets.md, B21): the watcher says when it
    flips, once, with ids a restarted watcher reuses; an uninitialized node is not reported."""
    world, facts, reported = launched()
    rv = world.cluster.resource_version
    assert world.nodes_not_ready("general", 5, timedelta(minutes=2)) == ["general-a"]
    down = [f for e in world.cluster.changes_since(rv) for f in facts.observe(e)]
    assert [(f.event.TYPE, f.event.nodeclaim, f.event.nodepool) for f in down] == [
        ("NodeClaimNotReady", "general-a", "general")
    ]
    restarted = Facts()
    restarted.remember(f.event for f in reported + down)
    assert restarted.resync(world.cluster.snapshot()) == []
    rv = world.cluster.resource_version
    world.advance(world.now + timedelta(minutes=3))
    up = [f for e in world.cluster.changes_since(rv) for f in facts.observe(e)]
    assert types(up) == {"NodeClaimReady": 1}
    assert [f.event_id for f in up] == [f.event_id for f in restarted.resync(world.cluster.snapshot())]


def test_an_agent_condition_that_turns_false_and_back_is_reported_once_each_way_and_ready_stays():
    """A node monitoring agent's condition (`KernelReady`) is what node repair's policies name
    beside Ready: reported when it turns False and when it clears, with ids a restarted watcher
    reuses; the node stays Ready, so no NotReady (budgets do not count it)."""
    world, facts, reported = launched()
    rv = world.cluster.resource_version
    assert world.nodes_not_ready("general", 5, timedelta(minutes=2), "KernelReady") == ["general-a"]
    down = [f for e in world.cluster.changes_since(rv) for f in facts.observe(e)]
    assert [(f.event.TYPE, f.event.condition, f.event.status) for f in down] == [
        ("NodeClaimConditionChanged", "KernelReady", "False")
    ]
    assert down[0].event.since == world.now.isoformat()
    restarted = Facts()
    restarted.remember(f.event for f in reported + down)
    assert restarted.resync(world.cluster.snapshot()) == []
    rv = world.cluster.resource_version
    world.advance(world.now + timedelta(minutes=3))
    up = [f for e in world.cluster.changes_since(rv) for f in facts.observe(e)]
    assert [(f.event.TYPE, f.event.condition, f.event.status) for f in up] == [
        ("NodeClaimConditionChanged", "KernelReady", "True")
    ]
    assert [f.event_id for f in up] == [f.event_id for f in restarted.resync(world.cluster.snapshot())]


def test_only_the_ready_family_of_conditions_is_recorded():
    from shared.api.core import agent_condition

    assert [k for k in ("Ready", "KernelReady", "MemoryPressure", "StorageReady", "", None) if agent_condition(k)] == [
        "KernelReady",
        "StorageReady",
    ]


def test_a_status_write_that_moves_the_resource_version_is_not_a_new_spec():
    from services.watcher.facts import Facts
    from shared.ports.cluster import ADDED, MODIFIED, NODEPOOL, WatchEvent
    from tests.conftest import nodepool_doc

    pool = nodepool_doc()
    pool["metadata"].update({"resourceVersion": "5", "uid": "u-1", "generation": 1})
    facts = Facts()
    assert [f.event.TYPE for f in facts.observe(WatchEvent(5, NODEPOOL, ADDED, pool["metadata"]["name"], pool))] == [
        "NodePoolApplied"
    ]
    written = {**pool, "metadata": {**pool["metadata"], "resourceVersion": "9"}, "status": {"nodes": 1}}
    assert facts.observe(WatchEvent(9, NODEPOOL, MODIFIED, pool["metadata"]["name"], written)) == []
