"""The pure CreateFleet rules (shared.aws.fleet): which offerings a claim allows, the capacity
type, the overrides' order, the request's shape, and what a fleet's answer means."""

from __future__ import annotations

from decimal import Decimal

import pytest

from shared.aws import fleet as F
from tests.aws_launch import ZONES, entries

SUBNETS = {z: f"subnet-{z[-1]}" for z in ZONES}


def req(key: str, operator: str, *values: str) -> dict:
    return {"key": key, "operator": operator, "values": list(values)}


@pytest.mark.parametrize(
    ("requirements", "requests", "types", "zones", "capacity"),
    [
        ([], {}, {"m5.large", "t3.micro", "c6g.xlarge"}, set(ZONES), {"spot", "on-demand"}),
        ([req("kubernetes.io/arch", "In", "arm64")], {}, {"c6g.xlarge"}, set(ZONES), {"spot", "on-demand"}),
        (
            [req("node.kubernetes.io/instance-type", "NotIn", "t3.micro")],
            {},
            {"m5.large", "c6g.xlarge"},
            set(ZONES),
            {"spot", "on-demand"},
        ),
        (
            [req("topology.kubernetes.io/zone", "In", "us-east-1b")],
            {},
            {"m5.large", "t3.micro", "c6g.xlarge"},
            {"us-east-1b"},
            {"spot", "on-demand"},
        ),
        (
            [req("karpenter.sh/capacity-type", "In", "on-demand")],
            {},
            {"m5.large", "t3.micro", "c6g.xlarge"},
            set(ZONES),
            {"on-demand"},
        ),
        ([], {"memory": Decimal(4 * 2**30)}, {"m5.large", "c6g.xlarge"}, set(ZONES), {"spot", "on-demand"}),
        (
            [req("karpenter.sh/nodepool", "In", "default")],
            {},
            {"m5.large", "t3.micro", "c6g.xlarge"},
            set(ZONES),
            {"spot", "on-demand"},
        ),
        ([req("kubernetes.io/arch", "In", "s390x")], {}, set(), set(), set()),
    ],
    ids=["all", "arch", "not-in-type", "zone", "capacity", "requests", "pool-label-undefined", "none"],
)
def test_candidates_follow_the_requirements(requirements, requests, types, zones, capacity):
    found = F.candidates(entries(), requirements, requests)
    assert {c.instance_type for c in found} == types
    assert {c.zone for c in found} == zones
    assert {c.capacity_type for c in found} == capacity


@pytest.mark.parametrize(
    ("capacities", "chosen"),
    [({"spot", "on-demand"}, "spot"), ({"on-demand"}, "on-demand"), ({"spot"}, "spot")],
)
def test_spot_when_allowed(capacities, chosen):
    found = F.candidates(entries(), [req("karpenter.sh/capacity-type", "In", *sorted(capacities))])
    assert F.capacity_type(found) == chosen


def test_overrides_are_cheapest_first_one_per_type_and_zone_with_a_subnet():
    found = F.candidates(entries(), [])
    subnets = {z: s for z, s in SUBNETS.items() if z != "us-east-1c"}
    overrides = F.overrides(found, subnets, "spot")
    prices = [o.price for o in overrides]
    assert prices == sorted(prices)
    assert [(o.instance_type, o.zone) for o in overrides][:2] == [
        ("t3.micro", "us-east-1a"),
        ("t3.micro", "us-east-1b"),
    ]
    assert {o.zone for o in overrides} == {"us-east-1a", "us-east-1b"}
    assert len({(o.instance_type, o.zone) for o in overrides}) == len(overrides) == 6
    assert all(o.subnet_id == SUBNETS[o.zone] for o in overrides)


def test_overrides_keep_the_cheapest_sixty_types():
    kind = type(entries()[0])
    named = [F.Candidate(kind(f"t{i:02d}", {}, {}, {}, {}, ()), "us-east-1a", "on-demand", 70.0 - i) for i in range(70)]
    overrides = F.overrides(named, SUBNETS, "on-demand")
    assert len(overrides) == F.MAX_INSTANCE_TYPES
    assert overrides[0].instance_type == "t69" and "t00" not in {o.instance_type for o in overrides}


@pytest.mark.parametrize(
    ("prioritized", "chosen", "expected"),
    [
        (
            [],
            "spot",
            [
                ("t3.micro", "us-east-1a", 0.0035),
                ("t3.micro", "us-east-1b", 0.00385),
                ("m5.large", "us-east-1a", 0.04),
                ("m5.large", "us-east-1b", 0.044),
                ("c6g.xlarge", "us-east-1a", 0.05),
                ("c6g.xlarge", "us-east-1b", 0.055),
            ],
        ),
        (
            ["c6g.xlarge", "m5.large", "t3.micro"],
            "spot",
            [
                ("c6g.xlarge", "us-east-1a", 0),
                ("c6g.xlarge", "us-east-1b", 0),
                ("m5.large", "us-east-1a", 1),
                ("m5.large", "us-east-1b", 1),
                ("t3.micro", "us-east-1a", 2),
                ("t3.micro", "us-east-1b", 2),
            ],
        ),
        (
            ["m5.large", "c6g.xlarge"],
            "on-demand",
            [
                ("m5.large", "us-east-1a", 0),
                ("m5.large", "us-east-1b", 0),
                ("c6g.xlarge", "us-east-1a", 1),
                ("c6g.xlarge", "us-east-1b", 1),
                ("t3.micro", "us-east-1a", 2),
                ("t3.micro", "us-east-1b", 2),
            ],
        ),
        (
            ["r5.xlarge", "m5.large"],
            "on-demand",
            [
                ("m5.large", "us-east-1a", 1),
                ("m5.large", "us-east-1b", 1),
                ("t3.micro", "us-east-1a", 2),
                ("t3.micro", "us-east-1b", 2),
                ("c6g.xlarge", "us-east-1a", 2),
                ("c6g.xlarge", "us-east-1b", 2),
            ],
        ),
    ],
    ids=["cheapest-first-priced", "ranked-spot", "unlisted-type-last", "rank-of-a-type-not-offered"],
)
def test_override_priorities(prioritized, chosen, expected):
    """Without `prioritized` each override's Priority is its price, cheapest first; with it, the
    type's rank in the list (lower preferred, EC2's reading), every zone of a type tied, in that
    order; a type the list leaves out ranks after every listed one, cheapest first among them."""
    subnets = {z: s for z, s in SUBNETS.items() if z != "us-east-1c"}
    overrides = F.overrides(F.candidates(entries(), []), subnets, chosen, prioritized)
    assert [(o.instance_type, o.zone, o.as_request()["Priority"]) for o in overrides] == expected


def test_prioritized_overrides_keep_the_first_sixty_types_of_the_list_not_the_cheapest():
    kind = type(entries()[0])
    named = [F.Candidate(kind(f"t{i:02d}", {}, {}, {}, {}, ()), "us-east-1a", "on-demand", 70.0 - i) for i in range(70)]
    ordered = [f"t{i:02d}" for i in range(70)]  # the dearest first, as an overlay may have it
    overrides = F.overrides(named, SUBNETS, "on-demand", ordered)
    assert [o.instance_type for o in overrides] == ordered[: F.MAX_INSTANCE_TYPES]
    assert [o.priority for o in overrides] == list(range(F.MAX_INSTANCE_TYPES))


@pytest.mark.parametrize(
    ("chosen", "rank", "options", "strategy", "priority"),
    [
        ("spot", None, "SpotOptions", "price-capacity-optimized", 0.04),
        ("on-demand", None, "OnDemandOptions", "lowest-price", 0.04),
        ("spot", 0, "SpotOptions", "capacity-optimized-prioritized", 0),
        ("on-demand", 3, "OnDemandOptions", "prioritized", 3),
    ],
    ids=["spot", "on-demand", "spot-prioritized", "on-demand-prioritized"],
)
def test_fleet_request_shape(chosen, rank, options, strategy, priority):
    overrides = [F.Override("m5.large", "us-east-1a", "subnet-a", 0.04, rank)]
    request = F.fleet_request([("karpenter.k8s.aws/abc", overrides)], chosen, {"b": "2", "a": "1"})
    assert request["Type"] == "instant"
    assert request[options] == {"AllocationStrategy": strategy}
    assert {"SpotOptions", "OnDemandOptions"} & request.keys() == {options}
    assert request["TargetCapacitySpecification"] == {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": chosen}
    config = request["LaunchTemplateConfigs"][0]
    assert config["LaunchTemplateSpecification"]["LaunchTemplateName"] == "karpenter.k8s.aws/abc"
    assert config["Overrides"] == [
        {"InstanceType": "m5.large", "SubnetId": "subnet-a", "AvailabilityZone": "us-east-1a", "Priority": priority}
    ]
    assert {s["ResourceType"] for s in request["TagSpecifications"]} == {"instance", "volume", "fleet"}
    assert request["TagSpecifications"][0]["Tags"] == [{"Key": "a", "Value": "1"}, {"Key": "b", "Value": "2"}]


def _error(code: str, instance_type: str = "m5.large", zone: str = "us-east-1a", lifecycle: str = "spot") -> dict:
    overrides = {"InstanceType": instance_type, "AvailabilityZone": zone}
    return {
        "ErrorCode": code,
        "ErrorMessage": "m",
        "Lifecycle": lifecycle,
        "LaunchTemplateAndOverrides": {"Overrides": overrides},
    }


@pytest.mark.parametrize(
    ("answer", "launched", "refused", "capacity_only"),
    [
        (
            {
                "Instances": [
                    {
                        "InstanceIds": ["i-1"],
                        "InstanceType": "m5.large",
                        "Lifecycle": "spot",
                        "LaunchTemplateAndOverrides": {"Overrides": {"AvailabilityZone": "us-east-1b"}},
                    }
                ]
            },
            ("i-1", "m5.large", "us-east-1b", "spot"),
            (),
            False,
        ),
        ({"Errors": [_error("InsufficientInstanceCapacity")]}, None, (("m5.large", "us-east-1a", "spot"),), True),
        (
            {"Errors": [_error("UnfulfillableCapacity"), _error("MaxSpotInstanceCountExceeded", "t3.micro")]},
            None,
            (("m5.large", "us-east-1a", "spot"), ("t3.micro", "us-east-1a", "spot")),
            True,
        ),
        ({"Errors": [_error("InvalidParameterValue")]}, None, (), False),
        (
            {"Errors": [_error("InsufficientInstanceCapacity"), _error("UnauthorizedOperation")]},
            None,
            (("m5.large", "us-east-1a", "spot"),),
            False,
        ),
        ({}, None, (), False),
    ],
    ids=["launched", "ice", "two-capacity-codes", "other-error", "mixed", "empty"],
)
def test_reading_the_fleet_answer(answer, launched, refused, capacity_only):
    outcome = F.read_fleet(answer, "spot")
    got = outcome.launched
    assert (None if got is None else (got.instance_id, got.instance_type, got.zone, got.capacity_type)) == launched
    assert outcome.refused == refused
    assert outcome.capacity_only is capacity_only


def test_offerings_described_briefly():
    offerings = [(f"t{i}", "z", "spot") for i in range(7)]
    assert F.describe_offerings(offerings) == "t0/z/spot, t1/z/spot, t2/z/spot, t3/z/spot, t4/z/spot and 2 more"


def test_the_offerings_the_cache_holds_are_left_out_of_a_launch():
    found = F.candidates(entries(), [], {})
    skipped = [("m5.large", "us-east-1a", "spot"), ("t3.micro", "us-east-1b", "on-demand")]
    kept = F.without(found, skipped)
    assert {(c.instance_type, c.zone, c.capacity_type) for c in kept} == {
        (c.instance_type, c.zone, c.capacity_type) for c in found
    } - set(skipped)
    assert len(kept) == len(found) - 2
