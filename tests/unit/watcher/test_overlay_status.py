"""The watcher's NodeOverlay status resolved against the catalogs the services plan with: on AWS,
each ready pool's EC2NodeClass's own catalog (`Catalogs.load` on a gated view), so an overlay that
conflicts only over a type a pool's class never offers is not said to conflict; a pool whose class
is not ready, and every pool on the sim's cloud, keep the default catalog, as the services do."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.watcher.service import WatcherService
from shared.clock import ManualClock
from shared.events import contracts as c
from shared.ports.cluster import ADDED, EC2NODECLASS, NODEOVERLAY, NODEPOOL, WatchEvent
from shared.scheduling.offerings import InstanceOption, Offer
from tests.conftest import nodepool_doc
from tests.factories import T0, catalog_answer
from tests.unit.watcher.test_nodeclasses import FOUND, FakeResolver

ARCH = "kubernetes.io/arch"


def option(name: str, arch: str) -> InstanceOption:
    room = {"cpu": 2, "memory": 8 * 2**30, "pods": 29}
    labels = {"node.kubernetes.io/instance-type": name, ARCH: arch}
    return InstanceOption(name, room, room, labels, (Offer("us-east-1a", "on-demand", 0.1),))


AMD, ARM = option("m5.large", "amd64"), option("m6g.large", "arm64")


class PerClassCloud:
    """EC2's answer per class: `amd` offers only amd64 types (its AMIs' architecture), `arm` only
    arm64 ones; the default catalog, both."""

    async def instance_types(self, node_class: str | None = None) -> list[dict[str, Any]]:
        return catalog_answer({"amd": [AMD], "arm": [ARM]}.get(node_class or "", [AMD, ARM]))


class StatusCluster:
    """Keeps the statuses the watcher writes, by overlay."""

    def __init__(self) -> None:
        self.statuses: dict[str, dict[str, Any]] = {}

    async def patch_nodeoverlay_status(self, nodeoverlay: str, status: dict[str, Any]) -> None:
        self.statuses[nodeoverlay] = status


def pool(name: str, nodeclass: str) -> dict[str, Any]:
    return nodepool_doc(
        **{
            "metadata.name": name,
            "spec.template.spec.nodeClassRef.name": nodeclass,
            "spec.template.spec.requirements": [{"key": ARCH, "operator": "In", "values": ["amd64", "arm64"]}],
        }
    )


def overlay(name: str, *requirements: dict[str, Any], price: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": {"weight": 10, "requirements": list(requirements), "price": price},
    }


IN_POOL_A = {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["a"]}
ARM64 = {"key": ARCH, "operator": "In", "values": ["arm64"]}


def validation(cluster: StatusCluster, name: str) -> tuple[str, str]:
    (condition,) = [x for x in cluster.statuses[name]["conditions"] if x["type"] == "ValidationSucceeded"]
    return condition["status"], condition["reason"]


@pytest.mark.parametrize(
    ("aws", "ready", "expected"),
    [
        (True, True, ("True", "ValidationSucceeded")),  # pool a launches m5 alone: nothing shared
        (True, False, ("False", "Conflict")),  # its class not ready: the default catalog, as the services
        (False, True, ("False", "Conflict")),  # the sim's cloud: its classes change nothing
    ],
)
def test_an_overlay_conflicts_only_over_types_its_pools_class_offers(aws: bool, ready: bool, expected: tuple) -> None:
    """`arm-a` (first: equal weights, the later name) prices pool a's arm64 offerings, `all-a`
    all of pool a's. By the default catalog both reach m6g.large in pool a, and `all-a`
    conflicts; pool a's class `amd` offers no arm64 type, so on AWS `arm-a` reaches nothing there
    and `all-a` is valid, as the scheduler and disruption apply them."""
    cluster = StatusCluster()
    watcher = WatcherService(
        None,  # type: ignore[arg-type]  # the store: statuses are written to the cluster alone
        cluster,  # type: ignore[arg-type]
        ManualClock(T0),
        "nats://127.0.0.1:4222",
        resolver=FakeResolver(FOUND) if aws else None,
        overlays=True,
        cloud=PerClassCloud(),  # type: ignore[arg-type]
    )
    for version, (kind, name, document) in enumerate(
        [
            (EC2NODECLASS, "amd", {"metadata": {"name": "amd"}}),
            (EC2NODECLASS, "arm", {"metadata": {"name": "arm"}}),
            (NODEPOOL, "a", pool("a", "amd")),
            (NODEPOOL, "b", pool("b", "arm")),
            (NODEOVERLAY, "arm-a", overlay("arm-a", IN_POOL_A, ARM64, price="0.05")),
            (NODEOVERLAY, "all-a", overlay("all-a", IN_POOL_A, price="0.08")),
        ],
        1,
    ):
        change = WatchEvent(version, kind, ADDED, name, document)
        watcher.nodeclasses.observe(change)
        watcher.overlays.observe(change)
    watcher.nodeclasses.remember(
        [c.NodeClassStatusChanged(nodeclass="arm", ready=True, reason="Ready")]
        + ([c.NodeClassStatusChanged(nodeclass="amd", ready=True, reason="Ready")] if ready else [])
    )
    asyncio.run(watcher._write_overlay_statuses())
    assert validation(cluster, "all-a") == expected
    assert validation(cluster, "arm-a") == ("True", "ValidationSucceeded")
