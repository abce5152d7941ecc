"""`explain`'s verdicts on worlds built as the disruption service builds them, under its feature
gates: a static pool's claim in the Overprovisioned surplus (in upstream's order), not in it
(count <= replicas), drifted (StaticDrift, not Drift), never consolidated; node repair's
Unhealthy with its toleration and 20% threshold; and a gate off weighs nothing of them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from services.whatif.instant import Gates, Instant
from shared.events import contracts as c
from shared.explain import model as m
from shared.explain.answer import answer
from shared.runtime.catalogs import Loaded
from tests.factories import T0, applied
from tests.unit.disruption.test_service_world import CATALOG, bound, fold, node
from tests.unit.disruption.test_static_pools import static_applied

LATER = T0 + timedelta(hours=1)
MATCHING = {"karpenter.sh/nodepool": "p", "kubernetes.io/arch": "amd64", "team": "a"}
"""The labels the fixture pool's template asks for: a node with them is not drifted."""


def told(events: list[c.Event], claim: str, gates: Gates, at: Any = LATER) -> Any:
    projection, counters = fold(events)
    world = Instant(at, 0, projection, counters, Loaded(CATALOG)).world(gates)
    said = answer(world, claim, projection.pools["p"], len(counters["p"].disrupting))
    assert said is not None
    return said


def verdict(said: Any, method: str) -> m.Verdict:
    return next(v for v in said.methods if v.method == method)


STATIC = Gates(static_capacity=True)
SURPLUS = [static_applied(3), *node("a"), *node("b"), *node("c"), bound("w", "a"), static_applied(1)]
AT_REPLICAS = [static_applied(2), *node("a", MATCHING), *node("b", MATCHING)]
DRIFTED = [static_applied(1), *node("a"), bound("w", "a")]


@pytest.mark.parametrize(
    ("events", "claim", "method", "disrupts", "cause", "says"),
    [
        # in the surplus: the empty nodes first, in upstream's order
        (SURPLUS, "b", "StaticScaleDown", True, None, "the surplus of 2 goes now, in upstream's order"),
        (SURPLUS, "b", "StaticScaleDown", True, None, "this claim is 1 of 2 (empty): forceful, no budget applies"),
        (SURPLUS, "c", "StaticScaleDown", True, None, "this claim is 2 of 2 (empty)"),
        # over its replicas, but the one holding a pod stays: the empty ones go first
        (SURPLUS, "a", "StaticScaleDown", False, m.NOT_CHOSEN, "b, c come(s) before this claim (with pods)"),
        (SURPLUS, "a", "StaticDrift", False, m.OVER_REPLICAS, "has 3 claim(s), replicas 1: its scale-down comes"),
        # not in surplus: count <= replicas
        (AT_REPLICAS, "a", "StaticScaleDown", False, m.WITHIN_REPLICAS, "has 2 NodeClaim(s) not being deleted"),
        (AT_REPLICAS, "a", "StaticDrift", False, m.NOT_DRIFTED, "not drifted"),
        (AT_REPLICAS, "a", "Emptiness", False, m.STATIC_POOL, "is static (replicas 2): consolidation never takes"),
        (AT_REPLICAS, "a", "Consolidation", False, m.STATIC_POOL, "its consolidationPolicy and consolidateAfter"),
        # drifted: StaticDrift replaces it one-for-one, Drift leaves it
        (DRIFTED, "a", "StaticDrift", True, None, "drifted (RequirementsDrifted): replaced one-for-one"),
        (DRIFTED, "a", "Drift", False, m.STATIC_POOL, "StaticDrift replaces its drifted nodes, not Drift"),
        (DRIFTED, "a", "StaticScaleDown", False, m.WITHIN_REPLICAS, "replicas 1: not over its replicas"),
    ],
)
def test_a_static_pools_claim(events, claim, method, disrupts, cause, says):
    got = verdict(told(events, claim, STATIC), method)
    assert (got.disrupts, got.cause) == (disrupts, cause), got.message
    assert says in got.message


def test_a_static_pools_claims_in_the_passs_order_and_the_pass_takes_the_surplus():
    said = told(SURPLUS, "b", STATIC)
    assert [v.method for v in said.methods] == [
        "Expiration",
        "StaticScaleDown",
        "OverLimit",
        "Emptiness",
        "StaticDrift",
        "Drift",
        "Consolidation",
    ]
    assert said.taken and said.causes == []
    assert "the pass at 2026-11-23T13:00:00+00:00 takes it: Overprovisioned of [b, c] in nodepool p" in said.verdict
    assert verdict(said, "StaticScaleDown").details == {"replicas": 1, "count": 3, "surplus": 2, "order": ["b", "c"]}
    kept = told(SURPLUS, "a", STATIC)
    assert not kept.taken and kept.causes == [m.NOT_CHOSEN, m.OVER_REPLICAS]


def test_at_its_replicas_a_static_claim_has_no_cause_but_its_pool():
    said = told(AT_REPLICAS, "a", STATIC)
    assert not said.taken and said.causes == [] and said.verdict.endswith("no method applies to it")


def test_with_the_gate_off_the_surplus_is_not_weighed():
    """As the disruption service with `StaticCapacity` off: no scale-down, nothing taken."""
    said = told(SURPLUS, "b", Gates())
    assert "StaticScaleDown" not in [v.method for v in said.methods]
    assert not any(c.reason == "Overprovisioned" for c in said.passed)
    assert not said.taken


def unhealthy(claim: str, minutes: int) -> c.NodeClaimNotReady:
    since = (LATER - timedelta(minutes=minutes)).isoformat()
    return c.NodeClaimNotReady(nodeclaim=claim, nodepool="p", node=f"{claim}-node", status="False", since=since)


def pool(n: int) -> list[c.Event]:
    return [applied("p"), *(e for i in range(n) for e in node(f"n{i}", MATCHING))]


REPAIR = Gates(node_repair=True)


@pytest.mark.parametrize(
    ("sick", "nodes", "disrupts", "cause", "says"),
    [
        ({"n0": 31}, 10, True, None, "Ready False since 2026-11-23T12:29:00+00:00, tolerated 30m, past it since"),
        ({"n0": 31}, 10, True, None, "1 of 10 node(s) of nodepool p unhealthy, at most 2 (20%, rounded up)"),
        (
            {"n0": 10},
            10,
            False,
            m.WITHIN_TOLERATION,
            "since 2026-11-23T12:50:00+00:00, tolerated 30m: repaired from 2026-11-23T13:20:00+00:00 if it lasts",
        ),
        ({"n0": 31, "n1": 31, "n2": 5}, 10, False, "NodeRepairBlocked", "more than 20% nodes are unhealthy"),
        ({"n0": 31, "n1": 31, "n2": 5}, 10, False, "NodeRepairBlocked", "3 of 10 node(s) of nodepool p unhealthy"),
        ({"n1": 31}, 10, False, m.HEALTHY, "no condition of its node matches a repair policy"),
    ],
)
def test_node_repair(sick, nodes, disrupts, cause, says):
    events = [*pool(nodes), *(unhealthy(name, minutes) for name, minutes in sick.items())]
    said = told(events, "n0", REPAIR)
    got = verdict(said, "NodeRepair")
    assert (got.disrupts, got.cause, got.reason) == (disrupts, cause, "Unhealthy"), got.message
    assert says in got.message
    assert said.taken == disrupts, "the whole pass, repair included, agrees"


def test_node_repair_is_not_weighed_with_its_gate_off():
    said = told([*pool(10), unhealthy("n0", 31)], "n0", Gates())
    assert "NodeRepair" not in [v.method for v in said.methods] and not said.taken


@pytest.mark.parametrize(
    ("text", "spot_to_spot", "repair", "static", "on"),
    [
        ("", False, False, False, []),
        ("SpotToSpotConsolidation=true", True, False, False, ["SpotToSpotConsolidation"]),
        ("NodeRepair=true,StaticCapacity=true", False, True, True, ["NodeRepair", "StaticCapacity"]),
        ("NodeOverlay=true,StaticCapacity=false", False, False, False, []),
    ],
)
def test_the_gates_reach_the_world_as_the_service_builds_it(monkeypatch, text, spot_to_spot, repair, static, on):
    monkeypatch.setenv("NODEWRIGHT_FEATURE_GATES", text)
    gates = Gates.now()
    assert gates.on() == on
    projection, counters = fold(pool(1))
    world = Instant(LATER, 0, projection, counters, Loaded(CATALOG)).world(gates)
    assert (world.spot_to_spot, bool(world.repair_policies), world.static_capacity) == (spot_to_spot, repair, static)
