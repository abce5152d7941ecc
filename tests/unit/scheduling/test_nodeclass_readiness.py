"""A NodePool whose EC2NodeClass is not Ready launches nothing: the rule (`nodeclasses`), the
scheduling view's fold of `NodeClassStatusChanged`, and a provisioning pass that leaves such pools
out and says why on the pods only they would take."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from services.scheduler.lifecycle import Offerings
from services.scheduler.metrics import SchedulerMetrics
from services.scheduler.projection import Projection
from services.scheduler.provisioning import Provisioner
from shared.api.validation import validate_nodepool
from shared.events import contracts as c
from shared.events.envelope import Metadata, RecordedEvent
from shared.ports.cluster import KubeEvent
from shared.runtime.recorder import Recorder
from shared.scheduling.nodeclasses import NodeClassState, unready_reason
from shared.scheduling.offerings import InstanceOption, Offer
from tests.conftest import nodepool_doc
from tests.factories import T0, CatalogCloud, catalog_answer


def pool_doc(name: str, nodeclass: str, kind: str = "EC2NodeClass") -> dict[str, Any]:
    return nodepool_doc(
        **{
            "metadata.name": name,
            "spec.template.metadata.labels": {"team": name},
            "spec.template.spec.nodeClassRef": {"group": "karpenter.k8s.aws", "kind": kind, "name": nodeclass},
        }
    )


def status(nodeclass: str, ready: bool, reason: str = "Ready", message: str = "") -> c.NodeClassStatusChanged:
    return c.NodeClassStatusChanged(nodeclass=nodeclass, ready=ready, reason=reason, message=message)


BROKEN = status("broken", False, "SubnetsNotFound", "SubnetSelector did not match any Subnets")


@pytest.mark.parametrize(
    ("kind", "gated", "classes", "expected"),
    [
        ("EC2NodeClass", False, {}, None),  # the sim's classes are always ready
        ("EC2NodeClass", True, {"c": NodeClassState(True, "Ready")}, None),
        ("EC2NodeClass", True, {}, 'EC2NodeClass "c" NodeClassReadinessUnknown: Node Class Readiness Unknown'),
        ("EC2NodeClass", True, {"c": NodeClassState(False, "AMIsNotFound", "no AMI")}, 'EC2NodeClass "c" AMIsNotFound: no AMI'),
        ("EC2NodeClass", True, {"c": NodeClassState(False, "SecurityGroupsNotFound")}, 'EC2NodeClass "c" SecurityGroupsNotFound'),
        ("EC2NodeClass", True, {"other": NodeClassState(True, "Ready")}, 'EC2NodeClass "c" NodeClassReadinessUnknown: Node Class Readiness Unknown'),
        ("SimNodeClass", True, {}, None),  # a class of another kind is not this cloud's to resolve
    ],
)  # fmt: skip
def test_a_pool_is_ready_only_while_its_ec2nodeclass_is(kind: str, gated: bool, classes: dict, expected: str | None):
    pool = validate_nodepool(pool_doc("p", "c", kind)).nodepool
    assert pool is not None
    assert unready_reason(pool, classes, gated) == expected


def recorded(position: int, event: c.Event) -> RecordedEvent:
    at = T0 + timedelta(seconds=position)
    return RecordedEvent(
        position, uuid.uuid4(), event.stream_id, 1, event.TYPE, 1, event.payload(), Metadata("t"), at, at
    )


def view_of(*events: c.Event) -> Projection:
    projection = Projection(gated=True)
    projection.apply(recorded(i, e) for i, e in enumerate(events, 1))
    return projection


def pools(events: list[c.Event]) -> list[c.Event]:
    return [
        c.NodePoolApplied(nodepool="a", nodepool_object=pool_doc("a", "broken")),
        c.NodePoolApplied(nodepool="b", nodepool_object=pool_doc("b", "ok")),
        c.NodePoolApplied(nodepool="sim", nodepool_object=pool_doc("sim", "x", kind="SimNodeClass")),
        *events,
    ]


@pytest.mark.parametrize(
    ("facts", "launchable"),
    [
        ([], ["sim"]),  # neither class resolved yet: unknown is not ready
        ([BROKEN, status("ok", True)], ["b", "sim"]),
        ([BROKEN, status("ok", True), status("broken", True)], ["a", "b", "sim"]),  # the last status counts
        ([status("ok", True), status("ok", False, "AMIsNotFound")], ["sim"]),
    ],
)
def test_the_view_folds_each_classes_last_status(facts: list[c.Event], launchable: list[str]):
    view = view_of(*pools(facts))
    assert sorted(t.name for t in view.templates({})) == launchable
    assert sorted(t.name for t in view.templates({}, unready=True)) == ["a", "b", "sim"]
    assert sorted(view.unready()) == sorted({"a", "b"} - set(launchable))


def test_a_class_turning_ready_makes_the_next_pass_plan():
    view = view_of(*pools([BROKEN]))
    view.changed = False
    view.apply([recorded(10, status("broken", True))])
    assert view.changed and "a" not in view.unready()


def test_ungated_the_view_launches_into_every_pool():
    projection = Projection()
    projection.apply(recorded(i, e) for i, e in enumerate(pools([BROKEN]), 1))
    assert sorted(t.name for t in projection.templates({})) == ["a", "b", "sim"]


# --- a provisioning pass --------------------------------------------------------------------------


class Store:
    async def counters(self) -> dict:
        return {}


class Ledger:
    """Reserves every claim and feeds it to the projection, as the consumer would."""

    def __init__(self, projection: Projection) -> None:
        self.projection, self.store, self.created = projection, Store(), []

    async def reserve_launch(self, claims: list[c.NodeClaimCreated], *, occurred_at: Any) -> list[int]:
        for claim in claims:
            self.created.append(claim)
            self.projection.apply([recorded(self.projection.position + 1, claim)])
        return [self.projection.position]

    async def reach(self) -> None:
        return None


class Lifecycle:
    def __init__(self) -> None:
        self.created_here: set[str] = set()

    async def launch_unlaunched(self, now: Any) -> list[str]:
        return []  # launching is the lifecycle's, tested on its own


class Cluster:
    def __init__(self) -> None:
        self.events: list[KubeEvent] = []

    async def record_event(self, event: KubeEvent) -> None:
        self.events.append(event)


CATALOG = [
    InstanceOption(
        "m.large",
        {"cpu": 4, "memory": 16 * 2**30, "pods": 110},
        {"cpu": 4, "memory": 16 * 2**30, "pods": 110},
        {"kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "m.large"},
        (Offer("zone-a", "on-demand", 0.1),),
    )
]


def pod(name: str, team: str) -> c.PodPending:
    return c.PodPending(namespace="default", name=name, uid=name, requests={"cpu": "1"}, node_selector={"team": team})


def provision(events: list[c.Event], cloud: Any = None) -> tuple[Ledger, Cluster]:
    projection = view_of(*events)
    ledger, cluster = Ledger(projection), Cluster()
    offerings = Offerings(cloud or CatalogCloud(CATALOG))
    provisioner = Provisioner(
        ledger,  # type: ignore[arg-type]
        projection,
        offerings,
        Lifecycle(),  # type: ignore[arg-type]
        Recorder(cluster),  # type: ignore[arg-type]
        SchedulerMetrics.on(CollectorRegistry()),
        timeout=timedelta(minutes=1),
        monotonic=lambda: 0.0,
    )
    asyncio.run(provisioner.plan_and_launch(T0))
    return ledger, cluster


def said(cluster: Cluster) -> dict[str, tuple[str, str]]:
    return {e.key: (e.reason, e.message) for e in cluster.events}


def test_a_pass_leaves_a_pool_whose_class_is_not_ready_out_and_says_why():
    ledger, cluster = provision(pools([BROKEN, status("ok", True), pod("web-a", "a"), pod("web-b", "b")]))
    assert [(claim.nodepool, claim.pods) for claim in ledger.created] == [("b", ["default/web-b"])]
    events = said(cluster)
    assert events["default/web-b"][0] == "Nominated"
    reason, message = events["default/web-a"]
    assert reason == "FailedScheduling"
    assert message.startswith('Failed to schedule pod, incompatible with nodepool "sim", ')
    assert message.endswith(
        '; ignoring nodepool "a", not ready '
        '(EC2NodeClass "broken" SubnetsNotFound: SubnetSelector did not match any Subnets)'
    )


def test_with_no_ready_pool_the_event_names_only_the_pools_left_out():
    only = [c.NodePoolApplied(nodepool="a", nodepool_object=pool_doc("a", "broken")), pod("web-a", "a")]
    ledger, cluster = provision(only)
    assert ledger.created == []
    assert said(cluster)["default/web-a"] == (
        "FailedScheduling",
        'Failed to schedule pod, ignoring nodepool "a", not ready '
        '(EC2NodeClass "broken" NodeClassReadinessUnknown: Node Class Readiness Unknown)',
    )


def test_a_pod_no_left_out_pool_would_take_keeps_the_passs_reasons():
    ledger, cluster = provision(pools([BROKEN, pod("web-z", "z")]))
    reason, message = said(cluster)["default/web-z"]
    assert ledger.created == [] and reason == "FailedScheduling"
    assert "not ready" not in message and 'incompatible with nodepool "sim"' in message


def test_once_its_class_is_ready_the_pool_launches():
    ledger, _ = provision(pools([BROKEN, pod("web-a", "a"), status("broken", True)]))
    assert [claim.nodepool for claim in ledger.created] == ["a"]


class PerClass:
    """The catalog with, for the class `tight`, the pods its kubelet's maxPods (3) leaves."""

    def __init__(self) -> None:
        self.asked: list[str | None] = []

    async def instance_types(self, node_class: str | None = None) -> list[dict[str, Any]]:
        self.asked.append(node_class)
        if node_class != "tight":
            return catalog_answer(CATALOG)
        (option,) = CATALOG
        room = {**option.allocatable, "pods": 3}
        return catalog_answer([InstanceOption(option.name, room, room, option.labels, option.offers)])


def test_a_pool_plans_with_the_pods_its_classes_kubelet_admits():
    """Seven small pods fit one m.large by the default figures (110 pods); on a class whose
    kubelet admits 3 pods a node, the pass plans three claims, as the launched nodes will hold."""
    tight = c.NodePoolApplied(nodepool="a", nodepool_object=pool_doc("a", "tight"))
    plain = c.NodePoolApplied(nodepool="b", nodepool_object=pool_doc("b", "ok"))
    ready = [status("tight", True), status("ok", True)]
    cloud = PerClass()
    ledger, _ = provision([tight, plain, *ready, *(pod(f"a-{i}", "a") for i in range(7)), pod("b-0", "b")], cloud)
    sizes = sorted((claim.nodepool, len(claim.pods)) for claim in ledger.created)
    assert sizes == [("a", 1), ("a", 3), ("a", 3), ("b", 1)]
    assert sorted(a for a in cloud.asked if a is not None) == ["ok", "tight"]
