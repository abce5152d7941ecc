"""A claim's launch records what the cloud launched it on (AMI, subnet, security groups) when the
cloud's InstanceView says (AWS's does, the sim's does not): drift compares them with its class."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter

from services.scheduler.lifecycle import Lifecycle, Offerings
from services.scheduler.metrics import SchedulerMetrics
from services.scheduler.projection import Projection
from shared.events import contracts as c
from shared.events.envelope import Metadata, RecordedEvent
from shared.ports.cloud import CloudError, InsufficientCapacityError
from tests.factories import T0, applied, created


def _nodes_created() -> Counter:
    return SchedulerMetrics.on(CollectorRegistry()).nodes_created


VIEW = {
    "providerID": "aws:///zone-a/i-0abc",
    "instanceType": "type-2-8Gi",
    "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
    "capacityType": "on-demand",
    "zone": "zone-a",
}
AWS = {"imageID": "ami-1", "subnetID": "subnet-a", "securityGroupIDs": ["sg-1", "sg-2"]}


class Cloud:
    def __init__(self, view: dict[str, Any]) -> None:
        self.view = view

    async def create(self, spec: dict[str, Any]) -> dict[str, Any]:
        return {**self.view, "nodeclaim": spec["nodeclaim"]}


class Ledger:
    def __init__(self) -> None:
        self.appended: list[Any] = []

    async def append(self, stream: str, expected: Any, events: list[Any]) -> list[int]:
        self.appended += events
        return [len(self.appended)]

    async def reach(self) -> None:
        return None


def recorded(position: int, event: c.Event) -> RecordedEvent:
    at = T0 + timedelta(seconds=position)
    return RecordedEvent(
        position, uuid.uuid4(), event.stream_id, 1, event.TYPE, 1, event.payload(), Metadata("t"), at, at
    )


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        ({**VIEW, **AWS}, ("ami-1", "subnet-a", ["sg-1", "sg-2"])),
        (VIEW, (None, None, None)),  # the sim's view: nothing to drift from
    ],
)
def test_the_launch_carries_the_instances_image_subnet_and_security_groups(view: dict, expected: tuple):
    projection = Projection()
    projection.apply(recorded(i, e) for i, e in enumerate([applied("p"), created("p-1", "p")], 1))
    ledger = Ledger()
    lifecycle = Lifecycle(ledger, projection, Offerings(Cloud(view)), _nodes_created())  # type: ignore[arg-type]
    assert asyncio.run(lifecycle.launch_unlaunched(T0)) == ["p-1"]
    (event,) = ledger.appended
    fact = c.NodeClaimLaunched.model_validate(event.data)
    assert (fact.image_id, fact.subnet_id, fact.security_group_ids) == expected


class Refusing:
    """A cloud whose create fails with `error`; its catalog has one type in two zones."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def instance_types(self, node_class: str | None = None) -> list[dict[str, Any]]:
        offers = [{"zone": z, "capacityType": "on-demand", "price": 0.1} for z in ("zone-a", "zone-b")]
        return [
            {"name": "type-2-8Gi", "capacity": VIEW["capacity"], "allocatable": {}, "labels": {}, "offerings": offers}
        ]

    async def create(self, spec: dict[str, Any]) -> dict[str, Any]:
        raise self.error


@pytest.mark.parametrize(
    ("error", "unavailable"),
    [
        # the cloud named what it refused: that offering alone is cached
        (InsufficientCapacityError("no", offerings=[("type-2-8Gi", "zone-b", "on-demand")]), {"zone-b"}),
        (InsufficientCapacityError("no"), {"zone-a", "zone-b"}),  # it did not say: all the claim allowed
        (CloudError("EC2NodeClass default is not Ready"), set()),  # not a capacity answer: nothing cached
    ],
)
def test_a_refused_launch_caches_only_the_offerings_the_cloud_refused(error: Exception, unavailable: set[str]):
    projection = Projection()
    projection.apply(recorded(i, e) for i, e in enumerate([applied("p"), created("p-1", "p")], 1))
    offerings = Offerings(Refusing(error))  # type: ignore[arg-type]
    asyncio.run(offerings.load())
    asyncio.run(Lifecycle(Ledger(), projection, offerings, _nodes_created()).launch_unlaunched(T0))  # type: ignore[arg-type]
    (option,) = offerings.catalog
    refused = {o.zone for o in option.offers if not offerings.unavailable.available(option.name, o, T0)}
    assert refused == unavailable


def test_offerings_refused_inside_a_fleet_that_launched_are_cached():
    """Upstream marks every capacity error's offering unavailable, even when the fleet launched
    another: the view's `refused` goes in the cache, and nothing else does."""
    projection = Projection()
    projection.apply(recorded(i, e) for i, e in enumerate([applied("p"), created("p-1", "p")], 1))
    refused = {**VIEW, "refused": [["type-2-8Gi", "zone-b", "on-demand"]]}
    offerings = Offerings(Cloud(refused))  # type: ignore[arg-type]
    ledger = Ledger()
    assert asyncio.run(Lifecycle(ledger, projection, offerings, _nodes_created()).launch_unlaunched(T0)) == ["p-1"]  # type: ignore[arg-type]
    assert offerings.unavailable.unavailable(["type-2-8Gi"], T0) == [("type-2-8Gi", "zone-b", "on-demand")]
    assert c.NodeClaimLaunched.model_validate(ledger.appended[0].data).zone == "zone-a"
    plain = Offerings(Cloud(VIEW))  # type: ignore[arg-type]
    asyncio.run(Lifecycle(Ledger(), projection, plain, _nodes_created()).launch_unlaunched(T0))  # type: ignore[arg-type]
    assert plain.unavailable.unavailable(["type-2-8Gi"], T0) == []


class Asked(Cloud):
    def __init__(self) -> None:
        super().__init__(VIEW)
        self.specs: list[dict[str, Any]] = []

    async def create(self, spec: dict[str, Any]) -> dict[str, Any]:
        self.specs.append(spec)
        return await super().create(spec)


def test_a_launch_names_the_offerings_of_its_types_the_cache_holds():
    """A spot interruption (or a failed launch) put (type, zone, spot) in the cache: the next
    claim naming that type is launched with it named, for the cloud to leave out."""
    projection = Projection()
    claim = created("p-1", "p")
    claim.requirements.append({"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["type-2-8Gi"]})
    projection.apply(recorded(i, e) for i, e in enumerate([applied("p"), claim], 1))
    cloud = Asked()
    offerings = Offerings(cloud)  # type: ignore[arg-type]
    offerings.unavailable.mark("type-2-8Gi", "zone-a", "spot", T0)
    offerings.unavailable.mark("other-type", "zone-a", "spot", T0)
    asyncio.run(Lifecycle(Ledger(), projection, offerings, _nodes_created()).launch_unlaunched(T0))  # type: ignore[arg-type]
    (spec,) = cloud.specs
    assert spec["unavailable"] == [["type-2-8Gi", "zone-a", "spot"]] and spec["firstAsk"] is False
