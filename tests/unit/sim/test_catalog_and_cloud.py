"""The sim cloud: its generated catalog, launches of the cheapest allowed offering, injected
capacity shortages, spot reclaims."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from services.sim.catalog import (
    CATEGORY_LABEL,
    CPU_LABEL,
    GPU_RESOURCE,
    ON_DEMAND,
    SPOT,
    generate_catalog,
)
from services.sim.cloud import CapacityWindow, InsufficientCapacity, LaunchRequest, NoCompatibleOffering, SimCloud
from shared.api.core import Requirement
from shared.api.labels import ARCH_LABEL, CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, ZONE_LABEL

T0 = datetime(2026, 11, 23, 9, tzinfo=UTC)


def req(key: str, op: str, *values: str) -> Requirement:
    return Requirement(key=key, operator=op, values=list(values) or None)


def request(*requirements: Requirement, **requests: str) -> LaunchRequest:
    return LaunchRequest("claim-1", "default", list(requirements), {k: Decimal(v) for k, v in requests.items()})


def test_the_default_catalog_has_400_types_of_every_family_arch_and_size():
    catalog = generate_catalog(seed=1)
    assert len(catalog) == 400 and len({t.name for t in catalog}) == 400
    assert {t.category for t in catalog} == {"c", "m", "r", "g"}
    assert {t.arch for t in catalog} == {"amd64", "arm64"}
    assert min(t.cpu for t in catalog) == 1 and max(t.cpu for t in catalog) == 192
    ratios = {t.category: t.memory_mib // 1024 // t.cpu for t in catalog if t.category != "g"}
    assert ratios == {"c": 2, "m": 4, "r": 8}
    gpu = [t for t in catalog if t.category == "g"]
    assert gpu and all(t.capacity[GPU_RESOURCE] >= 1 and t.arch == "amd64" for t in gpu)
    assert all(GPU_RESOURCE not in t.capacity for t in catalog if t.category != "g")
    for t in catalog:
        assert t.allocatable["cpu"] < t.capacity["cpu"] and t.allocatable["memory"] < t.capacity["memory"]
        assert t.capacity["pods"] > 0
        assert {o.zone for o in t.offerings} == {"zone-a", "zone-b", "zone-c"}
        for zone in ("zone-a", "zone-b", "zone-c"):
            spot, on_demand = t.offering(zone, SPOT), t.offering(zone, ON_DEMAND)
            assert 0.30 <= 1 - spot.price / on_demand.price <= 0.70


def test_a_catalog_is_a_function_of_its_seed_count_and_zones():
    a, b = generate_catalog(7, 50, ["x", "y"]), generate_catalog(7, 50, ["x", "y"])
    assert [(t.name, t.offerings) for t in a] == [(t.name, t.offerings) for t in b]
    other = generate_catalog(8, 50, ["x", "y"])
    assert [t.offerings for t in other] != [t.offerings for t in a]
    assert len(generate_catalog(7, 1000)) == 1000
    with pytest.raises(ValueError):
        generate_catalog(7, 0)


def test_spot_is_preferred_when_allowed_and_the_cheapest_offering_wins():
    cloud = SimCloud(generate_catalog(3))
    spot = cloud.create(request(req(ARCH_LABEL, "In", "amd64")), T0)
    assert spot.offering.capacity_type == SPOT
    allowed = [(t, o) for t, o in cloud.candidates(request(req(ARCH_LABEL, "In", "amd64"))) if o.capacity_type == SPOT]
    assert spot.offering.price == min(o.price for _, o in allowed)
    on_demand = cloud.create(request(req(CAPACITY_TYPE_LABEL, "In", ON_DEMAND)), T0)
    assert on_demand.offering.capacity_type == ON_DEMAND
    assert (
        on_demand.labels[CAPACITY_TYPE_LABEL] == ON_DEMAND and on_demand.labels[ZONE_LABEL] == on_demand.offering.zone
    )


def test_requirements_and_requests_narrow_the_choice():
    cloud = SimCloud(generate_catalog(3))
    big = cloud.create(request(req(CATEGORY_LABEL, "In", "r"), req(ZONE_LABEL, "In", "zone-b"), cpu="30"), T0)
    assert big.instance_type.category == "r" and big.offering.zone == "zone-b"
    assert big.instance_type.allocatable["cpu"] >= 30
    gpu = cloud.create(request(**{GPU_RESOURCE: "2"}), T0)
    assert gpu.instance_type.capacity[GPU_RESOURCE] >= 2
    bounded = cloud.create(request(req(CPU_LABEL, "Gt", "8"), req(CPU_LABEL, "Lt", "16")), T0)
    assert bounded.instance_type.cpu == 12
    with pytest.raises(NoCompatibleOffering):
        cloud.create(request(req(INSTANCE_TYPE_LABEL, "In", "no-such-type")), T0)


def test_a_capacity_shortage_moves_the_launch_or_fails_it_only_inside_its_window():
    catalog = generate_catalog(3)
    cheapest = SimCloud(catalog).create(request(req(INSTANCE_TYPE_LABEL, "In", "m5.large")), T0)
    window = CapacityWindow(T0, T0 + timedelta(minutes=10), "m5.large", cheapest.offering.zone, SPOT)
    cloud = SimCloud(catalog, [window])
    moved = cloud.create(request(req(INSTANCE_TYPE_LABEL, "In", "m5.large")), T0)
    assert moved.offering.zone != cheapest.offering.zone and moved.offering.capacity_type == SPOT
    everywhere = SimCloud(catalog, [CapacityWindow(T0, T0 + timedelta(minutes=10), "m5.large")])
    with pytest.raises(InsufficientCapacity) as refused:
        everywhere.create(request(req(INSTANCE_TYPE_LABEL, "In", "m5.large")), T0 + timedelta(minutes=5))
    assert refused.value.nodeclaim == "claim-1" and len(refused.value.tried) == 6  # 3 zones x 2 capacity types
    later = everywhere.create(request(req(INSTANCE_TYPE_LABEL, "In", "m5.large")), T0 + timedelta(minutes=10))
    assert later.instance_type.name == "m5.large"


def test_interruptions_pick_running_instances_of_the_capacity_type_and_deletes_end_them():
    cloud = SimCloud(generate_catalog(3), seed=5)
    spots = [cloud.create(request(), T0) for _ in range(4)]
    on_demand = cloud.create(request(req(CAPACITY_TYPE_LABEL, "In", ON_DEMAND)), T0)
    picked = cloud.interrupt(SPOT, 2, T0)
    assert len(picked) == 2 and all(i in spots for i in picked) and on_demand not in picked
    assert all(i.interrupted_at == T0 for i in picked)
    cloud.delete(picked[0].provider_id, T0)
    assert picked[0] not in cloud.running() and len(cloud.running()) == 4


def test_a_spot_shortage_falls_back_to_on_demand_when_the_claim_allows_it():
    catalog = generate_catalog(3)
    cloud = SimCloud(catalog, [CapacityWindow(T0, T0 + timedelta(hours=1), capacity_type=SPOT)])
    both = req(CAPACITY_TYPE_LABEL, "In", SPOT, ON_DEMAND)
    assert cloud.create(request(both), T0).offering.capacity_type == ON_DEMAND
    with pytest.raises(InsufficientCapacity):
        cloud.create(request(req(CAPACITY_TYPE_LABEL, "In", SPOT)), T0)


def test_requirements_on_labels_no_offering_defines_do_not_rule_offerings_out():
    cloud = SimCloud(generate_catalog(3))
    template = [req("karpenter.sh/nodepool", "In", "default"), req("team", "In", "a"), req(ARCH_LABEL, "In", "arm64")]
    assert cloud.create(request(*template), T0).instance_type.arch == "arm64"


def test_a_prioritized_launch_takes_the_first_type_it_can_not_the_cheapest():
    """Planned with NodeOverlays, a claim's types come in its planner's order (EC2 Fleet's
    `prioritized`): the first available wins, whatever the cloud's own prices say."""
    catalog = generate_catalog(0, 60)
    on_demand = req(CAPACITY_TYPE_LABEL, "In", ON_DEMAND)
    types = req(INSTANCE_TYPE_LABEL, "In", "c5.xlarge", "r5.xlarge")
    assert SimCloud(catalog).create(request(types, on_demand), T0).instance_type.name == "c5.xlarge"
    asked = request(types, on_demand)
    asked.prioritized = ["r5.xlarge", "c5.xlarge"]
    assert SimCloud(catalog).create(asked, T0).instance_type.name == "r5.xlarge"
    short = SimCloud(catalog, [CapacityWindow(T0, T0 + timedelta(minutes=5), instance_type="r5.xlarge")])
    assert short.create(asked, T0).instance_type.name == "c5.xlarge"  # the next in order
