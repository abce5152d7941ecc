"""A consolidation's replacement price rules (upstream's `pkg/controllers/disruption/consolidation.go`), table by table."""

from __future__ import annotations

from decimal import Decimal

import pytest

from shared.disruption.pricing import (
    NOT_CHEAPER,
    SPOT_TO_SPOT_DISABLED,
    Replacement,
    cheaper,
    filter_out_same_instance_type,
    replacement,
    worst_price,
)
from shared.scheduling.offerings import ON_DEMAND, SPOT, InstanceOption, Offer, Option

ROOM = {"cpu": Decimal(4), "memory": Decimal(16 * 2**30), "pods": Decimal(110)}


def option(name: str, *prices: tuple[str, float]) -> Option:
    offers = tuple(sorted((Offer("zone-a", kind, price) for kind, price in prices), key=lambda o: o.price))
    return Option(InstanceOption(name, ROOM, ROOM, {}, offers), offers, ROOM)


def names(options) -> list[str]:
    return [o.instance.name for o in options]


def test_the_worst_offer_must_be_strictly_cheaper():
    a = option("a", (SPOT, 0.03), (ON_DEMAND, 0.10))
    b = option("b", (ON_DEMAND, 0.09))
    c = option("c", (ON_DEMAND, 0.08))
    assert worst_price(a) == 0.10
    assert names(cheaper([c, b, a], 0.10)) == ["c", "b"]  # a's on-demand offer costs as much
    assert names(cheaper([c, b, a], 0.08)) == []


def test_filter_out_same_instance_type_drops_the_candidates_type_and_dearer():
    options = [option("small", (ON_DEMAND, 0.05)), option("m5", (ON_DEMAND, 0.10)), option("big", (ON_DEMAND, 0.2))]
    assert names(filter_out_same_instance_type(options, {"m5", "other"})) == ["small"]
    assert names(filter_out_same_instance_type(options, {"other"})) == ["small", "m5", "big"]


def test_no_cheaper_type_is_upstreams_message():
    assert replacement([], {ON_DEMAND}, spot_to_spot=False) == NOT_CHEAPER


def test_on_demand_to_spot_is_pinned_to_spot_and_on_demand_stays_on_demand():
    mixed = [option("a", (SPOT, 0.03), (ON_DEMAND, 0.05))]
    assert replacement(mixed, {ON_DEMAND}, spot_to_spot=False) == Replacement(tuple(mixed), SPOT)
    plain = [option("a", (ON_DEMAND, 0.05))]
    assert replacement(plain, {ON_DEMAND}, spot_to_spot=False) == Replacement(tuple(plain), ON_DEMAND)


@pytest.mark.parametrize(
    ("count", "enabled", "expected"),
    [
        (20, False, SPOT_TO_SPOT_DISABLED),
        (
            14,
            True,
            "SpotToSpotConsolidation requires 15 cheaper instance type options than the current candidate"
            " to consolidate, got 14",
        ),
        (15, True, 15),
        (20, True, 15),  # the 15 cheapest
    ],
)
def test_spot_to_spot(count, enabled, expected):
    options = [option(f"t{i:02d}", (SPOT, 0.01 + i / 1000)) for i in range(count)]
    result = replacement(options, {SPOT}, spot_to_spot=enabled)
    if isinstance(expected, str):
        assert result == expected
    else:
        assert isinstance(result, Replacement) and result.capacity_type == SPOT
        assert names(result.options) == [f"t{i:02d}" for i in range(expected)]


def test_a_spot_candidate_may_go_to_on_demand_without_the_gate():
    plain = [option("a", (ON_DEMAND, 0.02))]
    assert replacement(plain, {SPOT}, spot_to_spot=False) == Replacement(tuple(plain), ON_DEMAND)
