"""The scheduler's projection: a PodPending fact becomes a pod the pass can place; claims in
flight hold their pods back until their node is ready."""

from __future__ import annotations

import uuid
from decimal import Decimal

from services.scheduler.projection import Projection, pending_pod
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
    return RecordedEvent(position, uuid.uuid4(), f"x-{position}", 1, kind, 1, data, Metadata("test"), T0, T0)


def test_a_pending_fact_carries_every_constraint_into_the_pass():
    pod = pending_pod(PENDING, T0)
    assert pod.key == "default/web-1" and pod.requests["cpu"] == Decimal("0.5")
    assert pod.requirements["team"].has("a") and pod.requirements["kubernetes.io/arch"].has("arm64")
    assert pod.tolerations[0].key == "dedicated" and not pod.daemonset
    assert pod.topology.zonal and pod.topology.anti_affinity and pod.topology.labels == {"app": "web"}
    assert pending_pod({**PENDING, "owner_kind": "DaemonSet"}, T0).daemonset


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
    assert p.plannable() == [] and p.bound["default/web-1"][0] == "n1" and p.position == 6
