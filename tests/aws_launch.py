"""A small catalog and a Ready EC2NodeClass for the AWS provider's tests, so launch tests need
not load moto's ~1,400 instance types (seconds each time): the entries are real EC2 figures
(tests/unit/aws/ec2_entries.py) priced from a fixed table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shared.api.ec2nodeclass import EC2NodeClass
from shared.aws.instance_types import InstanceTypeEntry, instance_type_entry
from shared.aws.pricing import PriceBook, SpotQuote
from shared.aws.settings import NodeClassSettings
from tests.unit.aws.ec2_entries import C6G_XLARGE, M5_LARGE, T3_MICRO

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
ON_DEMAND = {"m5.large": 0.096, "t3.micro": 0.0104, "c6g.xlarge": 0.136}
SPOT = {"m5.large": 0.04, "t3.micro": 0.0035, "c6g.xlarge": 0.05}
"""Spot per type; zone b is a tenth dearer, so the order depends on the zone too."""


def entries(
    raws: Sequence[Mapping[str, Any]] = (M5_LARGE, T3_MICRO, C6G_XLARGE), settings: NodeClassSettings | None = None
) -> list[InstanceTypeEntry]:
    from datetime import UTC, datetime

    at = datetime(2026, 3, 1, tzinfo=UTC)
    spot = {
        (name, zone): SpotQuote(round(price * (1.1 if zone.endswith("b") else 1.0), 6), at)
        for name, price in SPOT.items()
        for zone in ZONES
    }
    prices = PriceBook(ON_DEMAND, spot, spot_refreshed=True)
    return [
        instance_type_entry(raw, region=REGION, offered_zones=ZONES, all_zones=ZONES, prices=prices, settings=settings)
        for raw in raws
    ]


class FixtureCatalog:
    def __init__(self, raws: Sequence[Mapping[str, Any]] = (M5_LARGE, T3_MICRO, C6G_XLARGE)) -> None:
        self.raws = raws
        self._entries = entries(raws)
        self.asked = 0

    async def entries(self, settings: NodeClassSettings | None = None) -> list[InstanceTypeEntry]:
        self.asked += 1
        return self._entries if settings is None else entries(self.raws, settings)


def node_class(
    name: str = "default",
    *,
    subnets: Mapping[str, str] | None = None,
    security_groups: Sequence[str] = ("sg-0123456789abcdef0",),
    amis: Sequence[tuple[str, str]] = (("ami-0123456789abcdef0", "amd64"), ("ami-0fedcba987654321f", "arm64")),
    ready: bool = True,
    tags: Mapping[str, str] | None = None,
    kubelet: Mapping[str, Any] | None = None,
) -> EC2NodeClass:
    """A node class as the nodeclass controller leaves it: its status resolved (`subnets`: zone ->
    subnet id; `amis`: (id, architecture))."""
    subnets = subnets if subnets is not None else {z: f"subnet-0{i}" for i, z in enumerate(ZONES)}
    return EC2NodeClass.model_validate(
        {
            "metadata": {"name": name},
            "spec": {
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "role": "KarpenterNodeRole",
                "tags": dict(tags or {"team": "platform"}),
                **({"kubelet": dict(kubelet)} if kubelet else {}),
            },
            "status": {
                "subnets": [{"id": s, "zone": z} for z, s in subnets.items()],
                "securityGroups": [{"id": g} for g in security_groups],
                "amis": [
                    {"id": i, "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": [a]}]}
                    for i, a in amis
                ],
                "instanceProfile": "KarpenterNodeInstanceProfile",
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        "reason": "Ready" if ready else "SubnetsNotFound",
                        "message": "" if ready else "SubnetSelector did not match any Subnets",
                        "lastTransitionTime": "2026-03-01T00:00:00Z",
                    }
                ],
            },
        }
    )


class NodeClasses:
    """A NodeClassSource double: the classes given, by name."""

    def __init__(self, *classes: EC2NodeClass) -> None:
        self.classes = {c.name: c for c in classes}

    async def get(self, name: str) -> EC2NodeClass | None:
        return self.classes.get(name)
