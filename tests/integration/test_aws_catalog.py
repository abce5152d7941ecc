"""The AWS catalog against moto's EC2 over HTTP: m5.large's allocatable, offerings per zone, spot
prices refreshed, and one DescribeInstanceTypes however many callers ask at once.

One catalog serves the module (moto's DescribeInstanceTypes takes seconds). moto prices every spot
offering at a placeholder 0.00001 with a 2006 timestamp; the refresh test rewrites the answer
of DescribeSpotPriceHistory in flight (a botocore after-call hook) with the fixture records below.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
import pytest_asyncio

from shared.adapters.aws.catalog import AwsCatalog
from tests.aws import REGION, Recording, moto_clients, moto_reset, moto_url

__all__ = ["moto_reset", "moto_url"]

pytestmark = pytest.mark.asyncio(loop_scope="module")

CALLERS = 16
SPOT_REFRESH = timedelta(hours=1)
MOTO_PLACEHOLDER_SPOT = 0.00001


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def loaded(moto_url):
    """The module's catalog, first asked by CALLERS callers at once."""
    clients = Recording(moto_clients(moto_url))
    clock = Clock()
    catalog = AwsCatalog(clients, REGION, clock, spot_refresh=SPOT_REFRESH)
    answers = await asyncio.gather(*(catalog.instance_types() for _ in range(CALLERS)))
    return catalog, clients, clock, answers, dict(clients.calls)


@pytest.fixture(autouse=True)
def _fresh_moto(moto_reset):
    """Each test starts from moto's reset state (the catalog's figures are moto's static data)."""


async def test_many_callers_at_once_share_one_fetch(loaded):
    _, _, _, answers, first = loaded
    assert first == {"DescribeInstanceTypes": 1, "DescribeInstanceTypeOfferings": 1, "DescribeSpotPriceHistory": 1}
    assert all(answer == answers[0] for answer in answers)
    assert len(answers[0]) > 500


async def test_m5_large_has_the_computed_allocatable(loaded):
    m5 = next(t for t in loaded[3][0] if t["name"] == "m5.large")
    # 3 ENIs * (10 - 1) + 2 = 29 pods; 8192 - ceil(8192 * 0.075) = 7577Mi; 7577 - (11*29 + 255) - 100 = 6903Mi
    assert m5["capacity"] == {"cpu": "2", "memory": "7577Mi", "ephemeral-storage": "20Gi", "pods": "29"}
    assert m5["allocatable"] == {"cpu": "1930m", "memory": "6903Mi", "ephemeral-storage": "17Gi", "pods": "29"}
    assert m5["labels"]["karpenter.k8s.aws/instance-family"] == "m5"


async def test_offerings_follow_the_zones_ec2_offers_the_type_in(loaded, moto_url):
    async with moto_clients(moto_url)("ec2") as ec2:
        answer = await ec2.describe_instance_type_offerings(
            LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": ["m5.large"]}]
        )
    zones = {o["Location"] for o in answer["InstanceTypeOfferings"]}
    assert len(zones) > 1 and all(z.startswith(REGION) for z in zones)
    m5 = next(t for t in loaded[3][0] if t["name"] == "m5.large")
    available = [o for o in m5["offerings"] if o["available"]]
    assert {(o["zone"], o["capacityType"]) for o in available} == {
        (zone, kind) for zone in zones for kind in ("on-demand", "spot")
    }
    assert {o["zone"] for o in m5["offerings"]} >= zones  # the region's other zones: there, flagged unavailable
    assert {o["price"] for o in available if o["capacityType"] == "on-demand"} == {0.096}
    # moto's spot answer came through: its placeholder price, for every zone
    assert {o["price"] for o in available if o["capacityType"] == "spot"} == {MOTO_PLACEHOLDER_SPOT}


async def test_spot_prices_refresh_on_their_interval_newest_per_zone(loaded):
    catalog, clients, clock, answers, _ = loaded
    spot_calls = clients.calls["DescribeSpotPriceHistory"]
    m5_offerings = next(t for t in answers[0] if t["name"] == "m5.large")["offerings"]
    zones = sorted({o["zone"] for o in m5_offerings if o["available"]})
    at = clock.now
    fixture = [
        {"InstanceType": "m5.large", "AvailabilityZone": zones[0], "SpotPrice": "0.0400", "Timestamp": at},
        {
            "InstanceType": "m5.large",
            "AvailabilityZone": zones[0],
            "SpotPrice": "0.0350",
            "Timestamp": at - timedelta(hours=2),
        },
        {"InstanceType": "m5.large", "AvailabilityZone": zones[1], "SpotPrice": "0.0310", "Timestamp": at},
    ]
    clients.rewrite["DescribeSpotPriceHistory"] = lambda parsed: parsed.update(SpotPriceHistory=list(fixture))

    clock.now += SPOT_REFRESH - timedelta(seconds=1)
    await catalog.instance_types()
    assert clients.calls["DescribeSpotPriceHistory"] == spot_calls  # not due yet

    clock.now += timedelta(seconds=1)
    types = await catalog.instance_types()
    assert clients.calls["DescribeSpotPriceHistory"] == spot_calls + 1
    assert clients.calls["DescribeInstanceTypes"] == 1  # instance types keep their 12 hours
    m5 = next(t for t in types if t["name"] == "m5.large")
    spot = {o["zone"]: o["price"] for o in m5["offerings"] if o["capacityType"] == "spot"}
    assert spot[zones[0]] == 0.04  # the newest of the zone's two records
    assert spot[zones[1]] == 0.031
    # zones the refresh did not mention keep moto's earlier (placeholder) quote
    assert {spot[z] for z in zones[2:]} <= {MOTO_PLACEHOLDER_SPOT}


async def test_an_empty_spot_answer_keeps_the_known_prices_and_logs_no_credentials(loaded, caplog):
    catalog, clients, clock, _, _ = loaded
    before = {t["name"]: t["offerings"] for t in await catalog.instance_types()}
    spot_calls = clients.calls["DescribeSpotPriceHistory"]
    clients.rewrite["DescribeSpotPriceHistory"] = lambda parsed: parsed.update(SpotPriceHistory=[])
    clock.now += SPOT_REFRESH
    with caplog.at_level("DEBUG", logger="nodewright.aws"):
        after = {t["name"]: t["offerings"] for t in await catalog.instance_types()}
    assert clients.calls["DescribeSpotPriceHistory"] == spot_calls + 1
    assert after == before
    assert "no spot prices" in caplog.text
    assert "testing" not in caplog.text  # the session's (fake) key never reaches a log line
