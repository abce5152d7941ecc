"""What a NodePool may launch now: requirements, offerings, the spot preference, the
insufficient-capacity cache, DaemonSet overhead and limits (upstream's `pkg/controllers/provisioning/scheduling/`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from shared.api.core import Requirement, Taint, Toleration
from shared.scheduling.offerings import (
    DaemonSetPods,
    InstanceOption,
    Offer,
    UnavailableOfferings,
    daemon_overhead,
    pool_options,
)
from shared.scheduling.requirements import Requirements

T0 = datetime(2026, 11, 23, 9, tzinfo=UTC)
GI = Decimal(2**30)


def instance(cpu: int, *, arch: str = "amd64", spot: float = 0.5, od: float = 1.0, zones=("a", "b")) -> InstanceOption:
    resources = {"cpu": Decimal(cpu), "memory": cpu * 2 * GI, "pods": Decimal(10 * cpu)}
    offers = tuple(Offer(z, ct, price * cpu) for z in zones for ct, price in (("spot", spot), ("on-demand", od)))
    labels = {"node.kubernetes.io/instance-type": f"t{cpu}", "kubernetes.io/arch": arch, "example.com/cpu": str(cpu)}
    return InstanceOption(f"t{cpu}-{arch}", resources, resources, labels, offers)


CATALOG = [instance(c) for c in (1, 2, 4, 8)] + [instance(4, arch="arm64")]


def req(key: str, op: str, *values: str) -> Requirement:
    return Requirement(key=key, operator=op, values=list(values) or None)


def names(options) -> list[str]:
    return [o.instance.name for o in options]


def test_the_pools_requirements_choose_the_types_and_custom_template_labels_do_not_rule_any_out():
    template = Requirements.of([req("kubernetes.io/arch", "In", "arm64"), req("team", "In", "a")])
    assert names(pool_options(template, [], CATALOG)) == ["t4-arm64"]
    assert names(pool_options(Requirements(), [], CATALOG)) == [
        "t1-amd64",
        "t2-amd64",
        "t4-amd64",
        "t4-arm64",
        "t8-amd64",
    ]


def test_offerings_follow_the_zone_and_capacity_type_requirements_cheapest_first():
    template = Requirements.of(
        [req("topology.kubernetes.io/zone", "In", "b"), req("karpenter.sh/capacity-type", "In", "on-demand")]
    )
    (first, *_) = pool_options(template, [], CATALOG)
    assert [(o.zone, o.capacity_type) for o in first.offers] == [("b", "on-demand")]


def test_spot_dearer_than_the_cheapest_on_demand_is_dropped():
    odd = instance(2, spot=1.5, od=1.0)  # spot priced above on-demand
    (option,) = pool_options(Requirements(), [], [odd])
    assert {o.capacity_type for o in option.offers} == {"on-demand"}
    (cheap,) = pool_options(Requirements(), [], [instance(2)])
    assert cheap.offers[0].capacity_type == "spot"


def test_a_failed_offering_is_skipped_for_three_minutes_then_tried_again():
    cache = UnavailableOfferings()
    for zone in ("a", "b"):
        cache.mark("t2-amd64", zone, "spot", T0)
    (option,) = pool_options(Requirements(), [], [instance(2)], unavailable=cache, now=T0 + timedelta(minutes=1))
    assert {o.capacity_type for o in option.offers} == {"on-demand"}
    (later,) = pool_options(Requirements(), [], [instance(2)], unavailable=cache, now=T0 + timedelta(minutes=3))
    assert later.offers[0].capacity_type == "spot"


def test_daemonset_overhead_counts_what_tolerates_the_pool_and_fits_the_type():
    tolerant = DaemonSetPods({"cpu": Decimal(2), "memory": 2 * GI}, (Toleration(operator="Exists"),))
    intolerant = DaemonSetPods({"cpu": Decimal(1)})
    arm_only = DaemonSetPods(
        {"cpu": Decimal(1)},
        (Toleration(operator="Exists"),),
        Requirements.of([req("kubernetes.io/arch", "In", "arm64")]),
    )
    taints = [Taint(key="dedicated", effect="NoSchedule")]
    amd = instance(4)
    assert daemon_overhead([tolerant, intolerant, arm_only], taints, Requirements(), amd) == {
        "cpu": 2,
        "memory": 2 * GI,
        "pods": 1,
    }
    # the reference's case: a 2-cpu DaemonSet leaves room for a 1-cpu pod only on the 4-cpu type and up
    options = pool_options(Requirements(), taints, CATALOG, daemonsets=[tolerant])
    assert names(options)[0] == "t2-amd64" and options[0].room["cpu"] == 0
    assert next(o.instance.name for o in options if o.room["cpu"] >= 1) == "t4-amd64"


def test_types_larger_than_what_the_limits_leave_are_dropped():
    remaining = {"cpu": Decimal("4"), "memory": 100 * GI, "nodes": Decimal(1)}
    assert names(pool_options(Requirements(), [], CATALOG, remaining=remaining)) == [
        "t1-amd64",
        "t2-amd64",
        "t4-amd64",
        "t4-arm64",
    ]
    assert names(pool_options(Requirements(), [], CATALOG, remaining={"cpu": Decimal("0.5")})) == []
