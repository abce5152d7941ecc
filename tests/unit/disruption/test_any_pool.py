"""Replacements in any NodePool (upstream's `SimulateScheduling`, `pkg/controllers/disruption/helpers.go`):
a drifted or consolidated node's replacement goes wherever the simulation puts it, the simulation
leaving each pool what its limits leave (the candidates' capacity back in their own pool), and
spot-to-spot consolidation behind its gate, its replacement pinned to spot."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from shared.api.labels import CAPACITY_TYPE_LABEL
from shared.disruption.consolidation import evaluate
from shared.disruption.drift import drift_command
from shared.disruption.multinode import multi_node
from shared.disruption.pricing import SPOT_TO_SPOT_DISABLED
from shared.disruption.simulation import ClusterView, Movable, Move
from shared.disruption.singlenode import single_node
from shared.scheduling.offerings import InstanceOption, Offer
from shared.scheduling.requirements import Requirements
from shared.scheduling.values import PoolTemplate
from tests.unit.disruption.fixtures import CATALOG, GI, cluster, node, pod

M8 = {"cpu": Decimal(8), "memory": 32 * GI, "pods": Decimal(110)}


def pools(hi: dict[str, int] | None, lo: dict[str, int] | None) -> tuple[PoolTemplate, ...]:
    """Two pools, weights 10 and 1, with what their limits leave (every claim counted)."""

    def left(values: dict[str, int] | None) -> dict[str, Decimal] | None:
        return None if values is None else {k: Decimal(v) for k, v in values.items()}

    return (PoolTemplate("hi", Requirements(), 10, (), left(hi)), PoolTemplate("lo", Requirements(), 1, (), left(lo)))


def candidate(name: str, pods: tuple, price: float = 8.0, capacity_type: str = "on-demand") -> Movable:
    """A node of the low-weight pool, of type m8."""
    return Movable(Move(name, name, pods, "lo", M8), "lo", price, capacity_type, "m8")


EXHAUSTED = "node limits have been exhausted for nodepool"
EXCEED = "all available instance types exceed limits for nodepool"


@pytest.mark.parametrize(
    ("hi", "lo", "target", "why"),
    [
        (None, None, "hi", None),  # the high-weight pool has room: the replacement goes there
        ({"nodes": 0}, None, "lo", None),  # its limits.nodes is reached: the candidate's own pool
        ({"cpu": 2}, None, "lo", None),  # its cpu limit leaves too little for the pod
        ({"nodes": 3, "cpu": 2}, {"cpu": 0, "nodes": 0}, "lo", None),  # the candidate's own room is given back
        ({"nodes": 0}, {"cpu": -8}, None, EXHAUSTED),  # both full: blocked with upstream's words
        ({"nodes": 0}, {"cpu": -8}, None, EXCEED),
    ],
)
def test_a_drifted_node_is_replaced_wherever_the_limits_allow(hi, lo, target, why):
    view = replace(cluster(node("moving", "0")), pools=pools(hi, lo))
    decision = drift_command([candidate("moving", (pod("p1", "4"),))], view, {"lo": None, "hi": None})
    if target is None:
        assert decision.command is None and why in decision.blocked["moving"]
    else:
        assert decision.command is not None and [c.nodepool for c in decision.new_claims] == [target]


def test_the_node_hard_limit_of_the_replacements_pool_refuses_it():
    view = replace(cluster(node("moving", "0")), pools=pools({"nodes": 0}, None))
    decision = drift_command(
        [candidate("moving", (pod("p1", "4"),))], view, {"lo": None}, replaceable=lambda pool, n: pool != "lo"
    )
    assert decision.command is None and decision.limited == ("lo",)


@pytest.mark.parametrize(
    ("hi", "lo", "target"),
    [
        (None, None, "hi"),  # a cheaper node of the other pool takes the pods
        ({"nodes": 0}, None, "lo"),
        ({"nodes": 1, "memory": 0}, None, "lo"),
        ({"nodes": 0}, {"cpu": -8}, None),
    ],
)
def test_a_consolidation_moves_pods_to_a_cheaper_node_of_any_pool(hi, lo, target):
    view = replace(cluster(node("c1", "0")), pools=pools(hi, lo))
    result = single_node([candidate("c1", (pod("p1"),))], view, {"lo": None, "hi": None}, spot_to_spot=False)
    if target is None:
        assert result.command is None and EXHAUSTED in (result.why_not or "")
    else:
        assert result.command is not None and result.planned is not None
        assert result.planned.nodepool == target and result.planned.options[0].instance.name == "m1"


def test_multi_node_consolidation_replaces_into_another_pool():
    view = replace(cluster(node("c0", "0"), node("c1", "0")), pools=pools(None, None))
    moves = [candidate(f"c{i}", (pod(f"p{i}"),)) for i in range(2)]
    result = multi_node(moves, view, {"lo": None}, spot_to_spot=False)
    assert result.command is not None and result.command.candidates == ("c0", "c1")
    assert result.planned is not None and result.planned.nodepool == "hi"


def spot_catalog(cheaper: int) -> tuple[InstanceOption, ...]:
    """`cheaper` types each with a spot and an on-demand offer, all cheaper than m8 spot (8.0)."""
    out = []
    for i in range(cheaper):
        capacity = {"cpu": Decimal(2), "memory": 8 * GI, "pods": Decimal(110)}
        labels = {"node.kubernetes.io/instance-type": f"s{i}"}
        offers = (Offer("a", "spot", 1.0 + i * 0.1), Offer("a", "on-demand", 2.0 + i * 0.1))
        out.append(InstanceOption(f"s{i}", capacity, capacity, labels, offers))
    return (*out, *CATALOG)


@pytest.mark.parametrize(
    ("cheaper", "gate", "current", "why", "kept"),
    [
        (20, False, "spot", SPOT_TO_SPOT_DISABLED, None),  # the gate is off (upstream's default)
        (10, True, "spot", "requires 15 cheaper instance type options", None),
        (20, True, "spot", None, 15),  # on: the 15 cheapest, spot only
        (10, False, "on-demand", None, 10),  # on-demand to spot needs no gate, pinned to spot
    ],
)
def test_spot_to_spot(cheaper, gate, current, why, kept):
    view = ClusterView((node("c1", "0"),), (PoolTemplate("lo", Requirements()),), spot_catalog(cheaper))
    result = evaluate([candidate("c1", (pod("p1"),), 8.0, current)], view.prepared(), spot_to_spot=gate, multi=False)
    if why is not None:
        assert result.command is None and why in (result.why_not or "")
        return
    assert result.command is not None and result.planned is not None
    assert len(result.planned.options) == kept
    assert {offer.capacity_type for o in result.planned.options for offer in o.offers} == {"spot"}
    assert result.planned.requirements[CAPACITY_TYPE_LABEL].values == frozenset({"spot"})


def test_multi_node_spot_to_spot_needs_no_fifteen_types():
    view = ClusterView((node("c0", "0"), node("c1", "0")), (PoolTemplate("lo", Requirements()),), spot_catalog(5))
    moves = [candidate(f"c{i}", (pod(f"p{i}"),), 8.0, "spot") for i in range(2)]
    assert multi_node(moves, view, {"lo": None}, spot_to_spot=False).why_not == SPOT_TO_SPOT_DISABLED
    result = multi_node(moves, view, {"lo": None}, spot_to_spot=True)
    assert result.command is not None and result.planned is not None and len(result.planned.options) == 5
