"""NodeOverlays applied to catalogs (`shared.scheduling.overlays`), by upstream's rules: the
order (weight, then later names first), selection by requirements, price arithmetic and its
clamp, capacity added, and conflicts left applied nowhere."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.api.nodeoverlay import NodeOverlay
from shared.scheduling.offerings import InstanceOption, Offer
from shared.scheduling.overlays import PoolLabels, adjusted_price, ordered, resolve

FAMILY = "karpenter.k8s.aws/instance-family"


def instance(name: str, family: str, price: float, zones: tuple[str, ...] = ("a",)) -> InstanceOption:
    resources = {"cpu": Decimal(2), "memory": Decimal(2**33), "pods": Decimal(110)}
    labels = {"node.kubernetes.io/instance-type": name, FAMILY: family}
    offers = tuple(Offer(z, ct, price) for z in zones for ct in ("on-demand", "spot"))
    return InstanceOption(name, resources, resources, labels, offers)


CATALOG = (instance("m5.large", "m5", 1.0, ("a", "b")), instance("c5.large", "c5", 2.0))


def overlay(
    name: str, *requirements: tuple[str, str, list[str]], weight: int | None = None, **spec: Any
) -> NodeOverlay:
    reqs = [{"key": k, "operator": op, **({"values": v} if v else {})} for k, op, v in requirements]
    body: dict[str, Any] = {"requirements": reqs, **spec}
    if weight is not None:
        body["weight"] = weight
    return NodeOverlay.model_validate({"metadata": {"name": name}, "spec": body})


def prices(resolution: Any, pool: str = "p", catalog: tuple[InstanceOption, ...] = CATALOG) -> dict:
    options = resolution.catalogs.get(pool, catalog)
    return {(o.name, offer.zone, offer.capacity_type): offer.price for o in options for offer in o.offers}


def run(*overlays: NodeOverlay, labels: dict[str, str] | None = None, pools: tuple[str, ...] = ("p",)) -> Any:
    return resolve(overlays, [PoolLabels(p, labels or {}) for p in pools], {p: CATALOG for p in pools})


@pytest.mark.parametrize(
    ("price", "change", "expected"),
    [
        (1.0, "0.3", 0.3),  # price: the new price
        (1.0, "0", 0.0),
        (1.0, "+0.5", 1.5),
        (1.0, "-0.25", 0.75),
        (1.0, "-2", 0.0),  # never below 0
        (2.0, "-50%", 1.0),
        (2.0, "+10%", 2.2),
        (2.0, "-100%", 0.0),
        (2.0, "+.5%", 2.01),
        (2.0, "", 2.0),
    ],
)
def test_price_arithmetic(price: float, change: str, expected: float) -> None:
    assert adjusted_price(price, change) == pytest.approx(expected)


@given(st.floats(0, 1000), st.floats(-1000, 1000), st.floats(0, 100))
def test_an_adjusted_price_is_never_negative(price: float, amount: float, percent: float) -> None:
    assert adjusted_price(price, f"{amount:+f}") >= 0
    assert adjusted_price(price, f"-{percent:f}%") >= 0


@pytest.mark.parametrize(
    ("overlays", "expected"),
    [
        ([("a", None), ("b", 5), ("c", None)], ["b", "c", "a"]),
        ([("a", 1), ("b", 1), ("z", 1)], ["z", "b", "a"]),  # equal weights: later names first
        ([("x", 10000), ("y", 1)], ["x", "y"]),
    ],
)
def test_order_is_weight_then_later_names_first(overlays: list, expected: list) -> None:
    made = [overlay(n, (FAMILY, "Exists", []), weight=w) for n, w in overlays]
    assert [o.name for o in ordered(made)] == expected


@pytest.mark.parametrize(
    ("requirements", "labels", "changed"),
    [
        ([(FAMILY, "In", ["m5"])], {}, {"m5.large"}),
        ([(FAMILY, "NotIn", ["m5"])], {}, {"c5.large"}),
        ([("node.kubernetes.io/instance-type", "In", ["c5.large"])], {}, {"c5.large"}),
        ([("karpenter.sh/nodepool", "In", ["p"])], {}, {"m5.large", "c5.large"}),
        ([("karpenter.sh/nodepool", "In", ["q"])], {}, set()),
        ([("team", "In", ["x"])], {"team": "x"}, {"m5.large", "c5.large"}),  # the pool's template labels
        ([("team", "In", ["x"])], {}, set()),  # a key nothing defines does not match
        ([("team", "DoesNotExist", [])], {}, {"m5.large", "c5.large"}),
        ([("topology.kubernetes.io/zone", "In", ["b"])], {}, {"m5.large"}),  # only m5 offers zone b
        ([], {}, {"m5.large", "c5.large"}),
    ],
)
def test_selection_by_requirements(requirements: list, labels: dict, changed: set) -> None:
    result = run(overlay("o", *requirements, price="0.1"), labels=labels)
    before, after = prices(run()), prices(result)
    assert {k[0] for k in after if after[k] != before[k]} == changed


def test_an_offering_requirement_changes_only_those_offerings() -> None:
    spot = overlay(
        "spot",
        ("karpenter.sh/capacity-type", "In", ["spot"]),
        ("topology.kubernetes.io/zone", "In", ["a"]),
        priceAdjustment="-50%",
    )
    after = prices(run(spot))
    assert after[("m5.large", "a", "spot")] == 0.5 and after[("c5.large", "a", "spot")] == 1.0
    assert after[("m5.large", "b", "spot")] == 1.0 and after[("m5.large", "a", "on-demand")] == 1.0


def test_the_heaviest_price_wins_and_prices_do_not_stack() -> None:
    heavy = overlay("heavy", (FAMILY, "In", ["m5"]), weight=10, price="0.2")
    light = overlay("light", (FAMILY, "Exists", []), weight=1, priceAdjustment="-50%")
    result = run(light, heavy)
    after = prices(result)
    assert after[("m5.large", "a", "on-demand")] == 0.2  # not 0.1
    assert after[("c5.large", "a", "on-demand")] == 1.0  # the lighter one reaches what the heavy did not
    assert result.applied == {"heavy", "light"} and not result.conflicting


def test_capacity_adds_extended_resources_the_first_in_order_winning() -> None:
    gpu = overlay("gpu", (FAMILY, "In", ["m5"]), weight=2, capacity={"example.com/gpu": "1"})
    more = overlay("more", (FAMILY, "Exists", []), weight=1, capacity={"example.com/gpu": "4", "example.com/fpga": "2"})
    result = run(more, gpu)
    by_name = {o.name: o for o in result.catalogs["p"]}
    assert by_name["m5.large"].capacity["example.com/gpu"] == 1
    assert by_name["m5.large"].allocatable["example.com/fpga"] == 2
    assert by_name["c5.large"].capacity["example.com/gpu"] == 4
    assert by_name["m5.large"].capacity["cpu"] == 2  # what was there stays


@pytest.mark.parametrize(
    ("first", "second", "conflicting"),
    [
        ({"price": "0.1"}, {"price": "0.2"}, {"a"}),  # the later name goes first: "a" is the one that conflicts
        ({"price": "0.1"}, {"priceAdjustment": "-10%"}, {"a"}),
        ({"capacity": {"example.com/gpu": "1"}}, {"capacity": {"example.com/gpu": "2"}}, {"a"}),
        ({"capacity": {"example.com/gpu": "1"}}, {"capacity": {"example.com/fpga": "2"}}, set()),
        ({"price": "0.1"}, {"capacity": {"example.com/gpu": "2"}}, set()),
    ],
)
def test_same_weight_overlaps_conflict(first: dict, second: dict, conflicting: set) -> None:
    a = overlay("a", (FAMILY, "Exists", []), weight=5, **first)
    b = overlay("b", (FAMILY, "In", ["m5"]), weight=5, **second)
    result = run(a, b)
    assert result.conflicting == conflicting
    if conflicting:  # applied nowhere: c5, which only "a" selects, keeps its price
        assert prices(result)[("c5.large", "a", "on-demand")] == 2.0


def test_different_weights_or_disjoint_selections_do_not_conflict() -> None:
    a = overlay("a", (FAMILY, "In", ["c5"]), weight=5, price="0.1")
    b = overlay("b", (FAMILY, "In", ["m5"]), weight=5, price="0.2")
    c = overlay("c", (FAMILY, "Exists", []), weight=4, price="0.3")
    assert run(a, b, c).conflicting == frozenset()


def test_a_conflict_in_one_pool_leaves_the_overlay_applied_in_none() -> None:
    a = overlay("a", ("karpenter.sh/nodepool", "In", ["p", "q"]), weight=3, price="0.1")
    b = overlay("b", ("karpenter.sh/nodepool", "In", ["q"]), weight=3, price="0.2")
    result = run(a, b, pools=("p", "q"))
    assert result.conflicting == {"a"} and "p" not in result.catalogs


def test_an_overlay_failing_runtime_validation_is_not_applied() -> None:
    bad = overlay(
        "bad",
        ("node.kubernetes.io/instance-type", "In", ["m5.large"]),
        ("karpenter.sh/capacity-type", "In", ["nope"]),
        price="0.1",
    )
    result = run(bad)
    assert "bad" in result.invalid and "no valid values found" in result.invalid["bad"]
    assert result.invalid["bad"].startswith("invalid value: ") and result.catalogs == {}


@given(
    st.lists(
        st.tuples(st.sampled_from(["m5", "c5"]), st.integers(1, 3), st.sampled_from(["-50%", "+1", "0.4", "-3"])),
        max_size=6,
    )
)
def test_every_price_stays_non_negative_and_unselected_types_untouched(specs: list) -> None:
    made = [
        overlay(f"o{i}", (FAMILY, "In", [f]), weight=w, priceAdjustment=ch)
        if ch[0] in "+-"
        else overlay(f"o{i}", (FAMILY, "In", [f]), weight=w, price=ch)
        for i, (f, w, ch) in enumerate(specs)
    ]
    result = run(*made)
    after = prices(result)
    assert all(p >= 0 for p in after.values())
    touched = {f for f, _, _ in specs}
    before = prices(run())
    for key, price in after.items():
        family = "m5" if key[0].startswith("m5") else "c5"
        if family not in touched:
            assert price == before[key]
