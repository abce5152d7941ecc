"""The scheduler's projection: a PodPending fact becomes a pod the pass can place; claims in
flight hold their pods back until their node is ready."""

from __future__ import annotations

import uuid
from decimal import Decimal

from services.scheduler.projection import Projection, pending_pod
from shared.events import contracts as c
from shared.events.envelope import Metadata, RecordedEvent
from tests.factories import T0

PENDING = {
    "namespace": "default",
    "name": "web-1",
    "uid": "u1",
    "requests": {"cpu": "500m", "memory": "1Gi"},
    "node_selector": {"team": "a"},
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}
                ]
            }
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        },
    },
    "topology_spread_constraints": [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ],
    "tolerations": [{"key": "dedicated", "operator": "Exists"}],
    "labels": {"app": "web"},
    "owner_kind": "Deployment",
}


def recorded(position: int, kind: str, data: dict) -> RecordedEvent:
    if kind == "NodeClaimCreated":  # the projection decodes each fact: it keeps its contract
        data = {"instance_types": [{"name": "m.xlarge", "capacity": {"cpu": "4"}}], **data}
    return RecordedEvent(position, uuid.uuid4(), f"x-{position}", 1, kind, 1, data, Metadata("test"), T0, T0)


def test_a_pending_fact_carries_every_constraint_into_the_pass():
    pod = pending_pod(c.PodPending.model_validate(PENDING), T0)
    assert pod.key == "default/web-1" and pod.requests["cpu"] == Decimal("0.5")
    assert pod.requirements["team"].has("a") and pod.requirements["kubernetes.io/arch"].has("arm64")
    assert pod.tolerations[0].key == "dedicated" and not pod.daemonset
    assert pod.topology.zonal and pod.topology.anti_affinity and pod.topology.labels == {"app": "web"}
    assert pending_pod(c.PodPending.model_validate({**PENDING, "owner_kind": "DaemonSet"}), T0).daemonset


def test_pods_of_a_claim_in_flight_wait_until_its_node_is_ready_or_it_fails():
    p = Projection()
    p.apply([recorded(1, "PodPending", PENDING)])
    assert [x.key for x in p.plannable()] == ["default/web-1"]
    p.apply([recorded(2, "NodeClaimCreated", {"nodeclaim": "c1", "nodepool": "a", "pods": ["default/web-1"]})])
    assert p.plannable() == []
    p.apply([recorded(3, "NodeClaimInitialized", {"nodeclaim": "c1", "nodepool": "a"})])
    assert [x.key for x in p.plannable()] == ["default/web-1"]  # ready and still waiting: plan again
    p.apply([recorded(4, "NodeClaimCreated", {"nodeclaim": "c2", "nodepool": "a", "pods": ["default/web-1"]})])
    p.apply([recorded(5, "NodeClaimLaunchFailed", {"nodeclaim": "c2", "nodepool": "a", "reason": "x"})])
    assert [x.key for x in p.plannable()] == ["default/web-1"]
    p.apply([recorded(6, "PodBound", {"namespace": "default", "name": "web-1", "node": "n1"})])
    assert p.plannable() == [] and p.node_of("default/web-1") == "n1" and p.position == 6


def small(name: str, cpu: str = "1", labels: dict | None = None) -> dict:
    return {
        "namespace": "default",
        "name": name,
        "uid": name,
        "requests": {"cpu": cpu, "memory": "1Gi"},
        "labels": labels or {"app": "web"},
    }


LAUNCHED = {
    "nodeclaim": "c1",
    "nodepool": "a",
    "instance_type": "m.xlarge",
    "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
    "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "110"},
    "labels": {"karpenter.sh/nodepool": "a", "topology.kubernetes.io/zone": "zone-b"},
    "provider_id": "sim:///zone-b/i-1",
    "zone": "zone-b",
}


def test_a_launched_claim_offers_what_its_pods_leave_until_its_node_registers():
    p = Projection()
    p.apply([recorded(1, "PodPending", small("web-1", "2")), recorded(2, "PodPending", small("web-2"))])
    created = {"nodeclaim": "c1", "nodepool": "a", "pods": ["default/web-1"], "requirements": []}
    p.apply([recorded(3, "NodeClaimCreated", created)])
    assert p.unlaunched() == ["c1"] and p.capacity() == []  # no room known before the launch
    p.apply([recorded(4, "NodeClaimLaunched", LAUNCHED)])
    assert p.unlaunched() == []
    (room,) = p.capacity()
    assert room.name == "c1" and not room.initialized and room.labels["topology.kubernetes.io/zone"] == "zone-b"
    assert room.free["cpu"] == Decimal("1.92") and room.free["pods"] == 109  # web-1's 2 cpu are taken
    assert ({"app": "web"}, "zone-b", "c1", ()) in p.running()  # web-1 counts where its claim is
    registered = {
        "node": "c1",
        "provider_id": "sim:///zone-b/i-1",
        "nodeclaim": "c1",
        "nodepool": "a",
        "labels": LAUNCHED["labels"],
        "allocatable": LAUNCHED["allocatable"],
    }
    p.apply([recorded(5, "NodeRegistered", registered)])
    (room,) = p.capacity()  # the node now, not the claim as well; web-1 still waits for it
    assert room.name == "c1" and room.free["cpu"] == Decimal("1.92")


def test_a_claim_pinned_to_a_zone_counts_its_pods_there_before_its_launch():
    p = Projection()
    p.apply([recorded(1, "PodPending", small("web-1"))])
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-c"]}
    p.apply(
        [
            recorded(
                2,
                "NodeClaimCreated",
                {"nodeclaim": "c9", "nodepool": "a", "pods": ["default/web-1"], "requirements": [zone]},
            )
        ]
    )
    assert p.running() == [({"app": "web"}, "zone-c", "c9", ())]
    assert p.claims["c9"].requirements == [zone]


def test_a_bound_pods_own_anti_affinity_reaches_the_topology_rules():
    p = Projection()
    bound = {"namespace": "default", "name": "db-1", "node": "n1", "labels": {"app": "db"}}
    p.apply([recorded(1, "PodBound", {**bound, "affinity": PENDING["affinity"]})])
    ((labels, _, host, terms),) = p.running()
    assert (labels, host) == ({"app": "db"}, "n1") and terms[0].label_selector.match_labels == {"app": "web"}
    p.apply([recorded(2, "PodDeleted", {"namespace": "default", "name": "db-1"})])
    assert p.running() == [] and p.anti_affinity == {}


def test_daemonsets_keep_room_on_nodes_still_starting_and_reach_the_pass():
    p = Projection()
    agent = {"namespace": "kube-system", "name": "agent", "requests": {"cpu": "500m", "memory": "256Mi"}}
    gpu_only = {**agent, "name": "gpu", "node_selector": {"gpu": "true"}}
    p.apply([recorded(1, "DaemonSetApplied", agent), recorded(2, "DaemonSetApplied", gpu_only)])
    assert set(p.daemonsets) == {"kube-system/agent", "kube-system/gpu"}
    node = {"node": "n1", "provider_id": "p1", "labels": {}, "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"}}
    p.apply([recorded(3, "NodeRegistered", node)])
    (room,) = p.capacity()
    assert room.free["cpu"] == Decimal("3.5") and room.free["pods"] == 9  # the agent's pod, not the gpu one
    p.apply([recorded(4, "NodeInitialized", {"node": "n1"})])
    (room,) = p.capacity()
    assert room.free["cpu"] == Decimal("3.5")  # ready, and its agent still to come
    agent_pod = {"namespace": "kube-system", "name": "agent-n1", "node": "n1", "owner_kind": "DaemonSet"}
    p.apply([recorded(5, "PodBound", {**agent_pod, "requests": agent["requests"]})])
    (room,) = p.capacity()
    assert room.free["cpu"] == Decimal("3.5") and room.free["pods"] == 9  # bound now: not kept twice
    p.apply([recorded(6, "DaemonSetDeleted", {"namespace": "kube-system", "name": "gpu"})])
    assert list(p.daemonsets) == ["kube-system/agent"]


def test_a_claim_whose_node_went_away_offers_no_room():
    p = Projection()
    p.apply([recorded(1, "NodeClaimCreated", {"nodeclaim": "c1", "nodepool": "a", "pods": []})])
    p.apply([recorded(2, "NodeClaimLaunched", LAUNCHED)])
    registered = {"node": "c1", "provider_id": "p", "nodeclaim": "c1", "allocatable": LAUNCHED["allocatable"]}
    p.apply([recorded(3, "NodeRegistered", registered), recorded(4, "NodeDeleted", {"node": "c1", "nodeclaim": "c1"})])
    assert p.capacity() == []  # a spot reclaim took the node; the claim is not capacity again


def test_a_claim_whose_node_was_deleted_is_orphaned_until_it_ends():
    p = Projection()
    p.apply([recorded(1, "NodeClaimCreated", {"nodeclaim": "c1", "nodepool": "a", "pods": []})])
    p.apply([recorded(2, "NodeClaimLaunched", LAUNCHED)])
    p.apply([recorded(3, "NodeRegistered", {"node": "n-c1", "provider_id": "p", "nodeclaim": "c1"})])
    assert p.orphaned() == []
    p.apply([recorded(4, "NodeDeleted", {"node": "n-c1"})])  # the claim found through the node
    assert p.orphaned() == ["c1"]
    p.apply([recorded(5, "NodeClaimTerminated", {"nodeclaim": "c1", "nodepool": "a"})])
    assert p.orphaned() == [] and p.claims == {}


def test_garbage_collection_leaves_a_claim_being_deleted_to_termination():
    """Issue 7's note: a claim whose node is gone is the garbage collector's only if nobody asked
    for its deletion; termination ends the others, so each claim ends once, by one service."""
    p = Projection()
    for position, name in enumerate(("c1", "c2"), start=1):
        created = {"nodeclaim": name, "nodepool": "a", "pods": [], "requirements": []}
        p.apply([recorded(2 * position - 1, "NodeClaimCreated", created)])
        p.apply([recorded(2 * position, "NodeClaimLaunched", {**LAUNCHED, "nodeclaim": name})])
    p.apply([recorded(5, "NodeClaimDeletionRequested", {"nodeclaim": "c2", "nodepool": "a"})])
    p.apply([recorded(6, "NodeDeleted", {"node": "c1", "nodeclaim": "c1"})])
    p.apply([recorded(7, "NodeDeleted", {"node": "c2", "nodeclaim": "c2"})])
    assert p.orphaned() == ["c1"]
    p.apply([recorded(8, "NodeClaimTerminated", {"nodeclaim": "c2", "nodepool": "a"})])
    assert p.orphaned() == ["c1"] and "c2" not in p.deleting and "c2" not in p.claims


def test_a_claim_being_deleted_offers_no_room_to_the_pods_it_sheds():
    """Upstream leaves nodes marked for deletion out of its simulation: pods evicted from a node
    being drained (an interruption, a manual delete) get new capacity at once, not a nomination
    to the node about to go."""
    from tests.factories import applied, created, launched

    facts: list[c.Event] = [applied("p")]
    for name in ("p-a", "p-b"):
        facts += [created(name, "p"), launched(name, "p")]
        facts.append(c.NodeRegistered(node=name, provider_id=f"sim:///{name}", nodeclaim=name, nodepool="p"))
    in_flight = launched("p-c", "p").model_copy(update={"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"}})
    facts += [created("p-c", "p"), in_flight]  # launched, its node not registered yet
    projection = Projection()
    projection.apply(
        RecordedEvent(i, uuid.uuid4(), e.stream_id, 1, e.TYPE, 1, e.payload(), Metadata("t"), T0, T0)
        for i, e in enumerate(facts, 1)
    )
    assert {n.name for n in projection.capacity()} == {"p-a", "p-b", "p-c"}
    for i, name in enumerate(("p-a", "p-c"), len(facts) + 1):
        asked = c.NodeClaimDeletionRequested(nodeclaim=name, nodepool="p", reason="spot_interrupted")
        projection.apply(
            [RecordedEvent(i, uuid.uuid4(), asked.stream_id, 2, asked.TYPE, 1, asked.payload(), Metadata("t"), T0, T0)]
        )
    assert {n.name for n in projection.capacity()} == {"p-b"}  # a node and a claim in flight, both leaving
