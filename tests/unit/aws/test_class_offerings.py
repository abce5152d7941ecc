"""A pool is offered only what its EC2NodeClass can launch: the zones of its resolved subnets and
the types one of its AMIs fits. Other offerings are flagged unavailable, never dropped (drift
asks whether one exists), and no scheduling pass plans a claim into one."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from shared.adapters.aws.provider import AwsProvider
from shared.api.core import Requirement
from shared.api.ec2nodeclass import EC2NodeClass
from shared.aws.class_offerings import for_node_class
from shared.scheduling.claims import instance_option
from shared.scheduling.packing import schedule
from shared.scheduling.requirements import Requirements
from shared.scheduling.values import PendingPod, PoolTemplate
from tests.aws_launch import ZONES, FixtureCatalog, NodeClasses, entries, node_class

NOW = datetime(2026, 3, 1, tzinfo=UTC)
ONLY_A = {"us-east-1a": "subnet-0a"}
AMD64_ONLY = (("ami-0123456789abcdef0", "amd64"),)


def _available(entry_offerings) -> set[tuple[str, str]]:
    return {(o.zone, o.capacity_type) for o in entry_offerings if o.available}


@pytest.mark.parametrize(
    ("subnets", "amis", "expected"),
    [
        (None, None, {"m5.large": set(ZONES), "t3.micro": set(ZONES), "c6g.xlarge": set(ZONES)}),
        (ONLY_A, None, {"m5.large": {"us-east-1a"}, "t3.micro": {"us-east-1a"}, "c6g.xlarge": {"us-east-1a"}}),
        (None, AMD64_ONLY, {"m5.large": set(ZONES), "t3.micro": set(ZONES), "c6g.xlarge": set()}),  # arm64: no AMI
        ({}, None, {"m5.large": set(), "t3.micro": set(), "c6g.xlarge": set()}),  # no subnet resolved
        (None, (), {"m5.large": set(), "t3.micro": set(), "c6g.xlarge": set()}),  # no AMI resolved
    ],
    ids=["every-zone", "one-subnet", "amd64-ami-only", "no-subnets", "no-amis"],
)
def test_offerings_follow_the_classes_subnets_and_amis(subnets, amis, expected):
    nc = node_class(subnets=subnets, **({"amis": amis} if amis is not None else {}))
    got = {e.name: {zone for zone, _ in _available(e.offerings)} for e in for_node_class(entries(), nc)}
    assert got == expected
    before = entries()
    after = for_node_class(before, nc)
    for old, new in zip(before, after, strict=True):  # flagged, never dropped, prices kept
        assert [(o.zone, o.capacity_type, o.price) for o in old.offerings] == [
            (o.zone, o.capacity_type, o.price) for o in new.offerings
        ]


async def test_a_pool_is_offered_only_its_classes_zones_and_a_pinned_pod_waits():
    """The defect: a class with a subnet only in us-east-1a was offered 1a, 1b and 1c, and a pod
    pinned to 1c got a claim whose launch failed for want of a subnet, again and again. Now the
    class's catalog offers 1c nowhere: the pass places no claim and says why, as for any pod no
    offering fits."""
    provider = AwsProvider(None, FixtureCatalog(), NodeClasses(node_class(subnets=ONLY_A)), "c1", lambda: NOW)
    raw = await provider.instance_types("default")
    for instance_type in raw:
        flags = {(o["zone"], o["available"]) for o in instance_type["offerings"]}
        assert ("us-east-1a", True) in flags and ("us-east-1c", False) in flags and ("us-east-1c", True) not in flags
    catalog = [instance_option(t) for t in raw]
    assert {o.zone for t in catalog for o in t.offers} == {"us-east-1a"}
    pinned = Requirements.of([Requirement(key="topology.kubernetes.io/zone", operator="In", values=["us-east-1c"])])
    pod = PendingPod("default/web", {"cpu": Decimal("0.5"), "memory": Decimal(2**28)}, requirements=pinned)
    pools = [PoolTemplate("default", Requirements(), 0)]
    plan = schedule([pod], [], pools, catalog, pool_catalogs={"default": catalog})
    assert plan.claims == [] and "no instance type satisfied" in plan.unplaced["default/web"]
    anywhere = PendingPod("default/api", {"cpu": Decimal("0.5"), "memory": Decimal(2**28)})
    plan = schedule([anywhere], [], pools, catalog, pool_catalogs={"default": catalog})
    (claim,) = plan.claims
    assert {o.zone for option in claim.options for o in option.offers} == {"us-east-1a"}
    # the default catalog (no class) is the region's
    assert {o["zone"] for t in await provider.instance_types() for o in t["offerings"] if o["available"]} == set(ZONES)


@pytest.mark.parametrize(("family", "available"), [("al2023@latest", False), ("al2@latest", True)])
def test_a1_types_are_not_offered_on_al2023(family, available):
    """AL2023 does not run on the first Graviton generation (upstream's AMI family check)."""
    a1 = replace(entries()[0], name="a1.large")
    document = node_class().model_dump(by_alias=True, exclude_none=True, mode="json")
    document["spec"]["amiSelectorTerms"] = [{"alias": family}]
    (got,) = for_node_class([a1], EC2NodeClass.model_validate(document))
    assert any(o.available for o in got.offerings) is available
