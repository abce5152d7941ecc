"""Drift from the cloud: the instance type gone from the catalog (`InstanceTypeNotFound`), and the
AMI, security groups or subnet the class no longer resolves to (`AMIDrift`, `SecurityGroupDrift`,
`SubnetDrift`); then the disruption world, which reads them from the log, and a pass that never
plans a replacement into a pool whose class is not Ready."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest

from services.disruption.projection import Projection
from services.disruption.world import build, judgments
from shared.disruption.cloud_drift import Launch, cloud_drift
from shared.disruption.drift import Stamp, drift_reason
from shared.disruption.passes import graceful
from shared.events import contracts as c
from shared.events.envelope import Metadata, RecordedEvent
from shared.policy.counters import PoolCounters, evolve
from shared.runtime.catalogs import Loaded
from shared.scheduling.nodeclasses import NodeClassState
from shared.scheduling.offerings import InstanceOption, Offer
from shared.scheduling.requirements import Requirements
from tests.factories import T0, applied, created, initialized, launched

ROOM = {"cpu": Decimal(2), "memory": Decimal(8 * 2**30), "pods": Decimal(110)}
CATALOG = [
    InstanceOption(
        "type-2-8Gi",
        ROOM,
        ROOM,
        {"node.kubernetes.io/instance-type": "type-2-8Gi", "kubernetes.io/arch": "amd64"},
        (Offer("a", "on-demand", 1.0), Offer("b", "spot", 0.4)),
    )
]
UNAVAILABLE = [  # zone b's spot exists but cannot launch now (no subnet, no spot price, no capacity)
    InstanceOption(
        "type-2-8Gi", ROOM, ROOM, CATALOG[0].labels, (Offer("a", "on-demand", 1.0),), (Offer("b", "spot", 0.0),)
    )
]
LATER = T0 + timedelta(hours=2)
LAUNCH = Launch(T0, "type-2-8Gi", "a", "on-demand", "ami-1", "subnet-a", ("sg-1", "sg-2"))
CLASS = NodeClassState(True, "Ready", "", ("subnet-a", "subnet-b"), ("sg-2", "sg-1"), ("ami-1", "ami-arm"))


@pytest.mark.parametrize(
    ("launch", "nodeclass", "catalog", "now", "expected"),
    [
        (LAUNCH, CLASS, CATALOG, LATER, None),
        (LAUNCH, NodeClassState(True, "Ready", "", CLASS.subnets, CLASS.security_groups, ("ami-2",)), CATALOG, LATER, "AMIDrift"),
        (LAUNCH, NodeClassState(True, "Ready", "", CLASS.subnets, ("sg-1",), CLASS.amis), CATALOG, LATER, "SecurityGroupDrift"),
        (LAUNCH, NodeClassState(True, "Ready", "", CLASS.subnets, ("sg-1", "sg-2", "sg-3"), CLASS.amis), CATALOG, LATER, "SecurityGroupDrift"),
        (LAUNCH, NodeClassState(True, "Ready", "", ("subnet-c",), CLASS.security_groups, CLASS.amis), CATALOG, LATER, "SubnetDrift"),
        (LAUNCH, NodeClassState(True, "Ready", "", ("subnet-c",), ("sg-9",), ("ami-2",)), CATALOG, LATER, "AMIDrift"),  # AMI first
        (LAUNCH, NodeClassState(True, "Ready", "", ("subnet-c",), ("sg-9",), CLASS.amis), CATALOG, LATER, "SecurityGroupDrift"),  # then groups
        (LAUNCH, NodeClassState(False, "SubnetsNotFound"), CATALOG, LATER, None),  # resolved nothing: says nothing
        (LAUNCH, None, CATALOG, LATER, None),  # the class's status never recorded
        (Launch(T0, "type-2-8Gi", "a", "on-demand"), NodeClassState(True, "Ready", "", ("subnet-c",), ("sg-9",), ("ami-2",)), CATALOG, LATER, None),  # the sim's launch
        (Launch(T0, "type-9", "a", "on-demand"), CLASS, CATALOG, LATER, "InstanceTypeNotFound"),
        (Launch(T0, "type-2-8Gi", "a", "spot"), CLASS, CATALOG, LATER, "InstanceTypeNotFound"),  # no such offering now
        (Launch(T0, "type-2-8Gi", "b", "spot"), CLASS, CATALOG, LATER, None),
        (Launch(T0, "type-2-8Gi", "b", "spot"), CLASS, UNAVAILABLE, LATER, None),  # unavailable now, not gone
        (Launch(T0, "type-2-8Gi", "a", "spot"), CLASS, UNAVAILABLE, LATER, "InstanceTypeNotFound"),  # no such offering
        (Launch(T0, "type-9", "a", "on-demand"), CLASS, CATALOG, T0 + timedelta(minutes=59), None),  # asked after an hour
        (Launch(T0, "type-9", "a", "on-demand"), CLASS, [], LATER, None),  # no catalog: nothing known
        (Launch(T0, "type-9", "a", "on-demand", "ami-2"), CLASS, CATALOG, LATER, "InstanceTypeNotFound"),  # the core reason first
    ],
)  # fmt: skip
def test_the_clouds_drift_reasons(launch, nodeclass, catalog, now, expected):
    assert cloud_drift(launch, nodeclass, catalog, now) == expected


def test_the_pools_reasons_come_before_the_clouds():
    drifted_class = NodeClassState(True, "Ready", "", CLASS.subnets, CLASS.security_groups, ("ami-2",))
    common = {"launched": True, "claim_labels": {}, "pool_requirements": Requirements()}
    extra = {"launch": LAUNCH, "nodeclass": drifted_class, "catalog": CATALOG, "now": LATER}
    assert drift_reason(claim=Stamp("1", "v"), pool=Stamp("2", "v"), **common, **extra) == "NodePoolDrifted"
    assert drift_reason(claim=Stamp("1", "v"), pool=Stamp("1", "v"), **common, **extra) == "AMIDrift"
    assert drift_reason(claim=Stamp("1", "v"), pool=Stamp("1", "v"), **common) is None  # nothing of the cloud's
    unlaunched = {**common, "launched": False}
    assert drift_reason(claim=Stamp("1", "v"), pool=Stamp("1", "v"), **unlaunched, **extra) is None


# --- the disruption world -------------------------------------------------------------------------


def fold(events: list[c.Event], *, gated: bool = True) -> tuple[Projection, dict[str, PoolCounters]]:
    projection = Projection()
    projection.view.gated = gated
    counters: dict[str, PoolCounters] = {}
    claims: dict = {}
    for i, event in enumerate(events, 1):
        data = event.payload()
        at = T0 + timedelta(minutes=i)
        projection.apply(RecordedEvent(i, uuid.uuid4(), event.stream_id, 1, event.TYPE, 1, data, Metadata("t"), at, at))
        pool = data.get("nodepool")
        if isinstance(pool, str):
            evolve(counters.setdefault(pool, PoolCounters(pool)), claims, event.TYPE, data, i)
    return projection, counters


def resolved(ready: bool = True, amis: tuple[str, ...] = ("ami-1",)) -> c.NodeClassStatusChanged:
    return c.NodeClassStatusChanged(
        nodeclass="default",  # the class tests/conftest's NodePool names
        ready=ready,
        reason="Ready" if ready else "SubnetsNotFound",
        subnets=["subnet-a"],
        security_groups=["sg-1"],
        amis=list(amis),
    )


def node(claim: str) -> list[c.Event]:
    on_aws = launched(claim, "p", zone="a").model_copy(
        update={"image_id": "ami-1", "subnet_id": "subnet-a", "security_group_ids": ["sg-1"]}
    )
    return [
        created(claim, "p"),
        on_aws,
        c.NodeRegistered(
            node=f"{claim}-node",
            provider_id=f"aws:///a/{claim}",
            nodeclaim=claim,
            nodepool="p",
            labels={"karpenter.sh/nodepool": "p", "team": "a", "kubernetes.io/arch": "amd64"},
            allocatable={"cpu": "2", "memory": "8Gi", "pods": "110"},
        ),
        c.NodeClaimRegistered(nodeclaim=claim, nodepool="p", node=f"{claim}-node"),
        initialized(claim, "p"),
        c.PodBound(namespace="default", name=f"{claim}-w", node=f"{claim}-node", requests={"cpu": "1"}),
    ]


def test_a_claim_on_an_ami_its_class_no_longer_resolves_is_drifted_since_the_change():
    events = [applied("p"), resolved(), *node("x"), resolved(amis=("ami-2",))]
    projection, counters = fold(events)
    world = build(projection, counters, Loaded(CATALOG), T0 + timedelta(minutes=30))
    (drifted,) = world.nodes
    assert drifted.drift == "AMIDrift"
    assert drifted.drifted_since == T0 + timedelta(minutes=len(events))  # the class's change
    assert judgments(world)["x"].drifted == "AMIDrift"  # the claim's Drifted condition's reason
    (found,) = graceful(world).found
    assert found.command.reason == "Drifted" and found.command.candidates == ("x",)
    assert found.command.replacements == 1


def test_no_replacement_is_planned_into_a_pool_whose_class_is_not_ready():
    events = [applied("p"), resolved(), *node("x"), resolved(ready=False, amis=("ami-2",))]
    projection, counters = fold(events)
    world = build(projection, counters, Loaded(CATALOG), T0 + timedelta(minutes=30))
    assert [n.drift for n in world.nodes] == ["AMIDrift"]  # drift still compares with the pool
    assert world.cluster.pools == ()
    result = graceful(world)
    assert result.found == []
    assert [b.nodeclaim for b in result.blocked] == ["x"]  # its pod would have nowhere to go
    ungated, counters = fold(events, gated=False)  # the sim's classes: the pool stays in
    assert graceful(build(ungated, counters, Loaded(CATALOG), T0 + timedelta(minutes=30))).found != []


def test_a_claim_still_on_what_its_class_resolves_is_not_drifted():
    projection, counters = fold([applied("p"), resolved(), *node("x"), resolved(amis=("ami-1", "ami-arm"))])
    assert [n.drift for n in build(projection, counters, Loaded(CATALOG), T0 + timedelta(minutes=30)).nodes] == [None]
