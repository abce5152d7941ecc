"""The catalog's refresh rules with an in-memory EC2: one fetch for callers who ask while it runs,
a fetch again only once the interval has passed, and what a failed call leaves behind."""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from shared.adapters.aws.catalog import AwsCatalog
from shared.api.ec2nodeclass import KubeletConfiguration
from shared.aws.settings import NodeClassSettings
from shared.ports.cloud import CloudError
from tests.unit.aws.ec2_entries import M5_LARGE, T3_MICRO

T0 = datetime(2026, 3, 1, tzinfo=UTC)
ZONES = ("us-east-1a", "us-east-1b")


class FakeEc2:
    """Answers the three paginated calls from lists; `gate` holds DescribeInstanceTypes open."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.gate = asyncio.Event()
        self.gate.set()
        self.spot: list[dict[str, Any]] = []
        self.fail: set[str] = set()

    def get_paginator(self, operation: str) -> FakeEc2:
        self.operation = operation
        return self

    def paginate(self, **params: Any) -> Any:
        return self._pages(self.operation)

    async def _pages(self, operation: str) -> Any:
        self.calls[operation] += 1
        if operation in self.fail:
            raise ClientError({"Error": {"Code": "RequestLimitExceeded", "Message": "slow down"}}, operation)
        if operation == "describe_instance_types":
            await self.gate.wait()
            yield {"InstanceTypes": [M5_LARGE]}
            yield {"InstanceTypes": [T3_MICRO]}  # a second page
        elif operation == "describe_instance_type_offerings":
            yield {
                "InstanceTypeOfferings": [
                    {"InstanceType": t, "Location": z} for t in ("m5.large", "t3.micro") for z in ZONES
                ]
            }
        else:
            yield {"SpotPriceHistory": list(self.spot)}


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def _catalog(ec2: FakeEc2, clock: Clock) -> AwsCatalog:
    @asynccontextmanager
    async def clients(service: str):
        yield ec2

    return AwsCatalog(
        clients,
        "us-east-1",
        clock,
        on_demand_table={"us-east-1": {"m5.large": 0.096, "t3.micro": 0.0104}},
        types_refresh=timedelta(hours=12),
        spot_refresh=timedelta(hours=1),
    )


async def test_callers_who_ask_during_a_fetch_wait_for_it_instead_of_fetching_again():
    ec2, clock = FakeEc2(), Clock()
    ec2.gate.clear()
    catalog = _catalog(ec2, clock)
    waiting = [asyncio.create_task(catalog.instance_types()) for _ in range(10)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert ec2.calls["describe_instance_types"] == 1
    ec2.gate.set()
    answers = await asyncio.gather(*waiting)
    assert ec2.calls["describe_instance_types"] == 1
    assert [t["name"] for t in answers[0]] == ["m5.large", "t3.micro"]  # both pages
    assert all(a == answers[0] for a in answers)


async def test_each_part_is_fetched_again_only_after_its_interval():
    ec2, clock = FakeEc2(), Clock()
    ec2.spot = [{"InstanceType": "m5.large", "AvailabilityZone": "us-east-1a", "SpotPrice": "0.03", "Timestamp": T0}]
    catalog = _catalog(ec2, clock)
    await catalog.instance_types()
    clock.now = T0 + timedelta(minutes=59)
    await catalog.instance_types()
    assert ec2.calls == {
        "describe_instance_types": 1,
        "describe_instance_type_offerings": 1,
        "describe_spot_price_history": 1,
    }
    clock.now = T0 + timedelta(hours=1)
    await catalog.instance_types()
    assert ec2.calls["describe_spot_price_history"] == 2
    assert ec2.calls["describe_instance_types"] == 1
    clock.now = T0 + timedelta(hours=12)
    await catalog.instance_types()
    assert ec2.calls["describe_instance_types"] == 2


async def test_spot_prices_replace_the_on_demand_default_once_known():
    ec2, clock = FakeEc2(), Clock()
    ec2.spot = [{"InstanceType": "m5.large", "AvailabilityZone": "us-east-1a", "SpotPrice": "0.03", "Timestamp": T0}]
    types = await _catalog(ec2, clock).instance_types()
    m5 = {(o["zone"], o["capacityType"]): o["price"] for o in types[0]["offerings"] if o["available"]}
    # us-east-1b has no spot quote after the refresh: not available as spot there, yet it exists
    assert m5 == {("us-east-1a", "on-demand"): 0.096, ("us-east-1a", "spot"): 0.03, ("us-east-1b", "on-demand"): 0.096}
    flagged = [(o["zone"], o["capacityType"]) for o in types[0]["offerings"] if not o["available"]]
    assert flagged == [("us-east-1b", "spot")]


async def test_a_failed_spot_refresh_keeps_spot_at_its_default_and_is_retried_a_minute_later():
    ec2, clock = FakeEc2(), Clock()
    ec2.fail.add("describe_spot_price_history")
    catalog = _catalog(ec2, clock)
    types = await catalog.instance_types()
    assert {o["price"] for o in types[0]["offerings"] if o["capacityType"] == "spot"} == {0.096}
    clock.now = T0 + timedelta(seconds=59)
    await catalog.instance_types()
    assert ec2.calls["describe_spot_price_history"] == 1
    clock.now = T0 + timedelta(minutes=1)
    await catalog.instance_types()
    assert ec2.calls["describe_spot_price_history"] == 2


async def test_a_failed_instance_type_fetch_is_a_cloud_error():
    ec2, clock = FakeEc2(), Clock()
    ec2.fail.add("describe_instance_types")
    with pytest.raises(CloudError, match="describing EC2 instance types in us-east-1"):
        await _catalog(ec2, clock).instance_types()


async def test_a_node_classes_entries_are_its_own_and_kept_until_a_refresh():
    """maxPods 8 makes every type admit 8 pods; the list is computed once per distinct settings
    and again after a refresh (its prices may have changed)."""
    ec2, clock = FakeEc2(), Clock()
    catalog = _catalog(ec2, clock)
    tight = NodeClassSettings(kubelet=KubeletConfiguration(maxPods=8))
    first = await catalog.entries(tight)
    assert {e.name: e.allocatable["pods"] for e in first} == {"m5.large": 8, "t3.micro": 8}
    assert {e.name: e.allocatable["pods"] for e in await catalog.entries()} == {"m5.large": 29, "t3.micro": 4}
    again = await catalog.entries(NodeClassSettings(kubelet=KubeletConfiguration(maxPods=8)))
    assert again is first  # equal settings share one list
    clock.now = T0 + timedelta(hours=12)  # the types' refresh
    assert await catalog.entries(tight) is not first
