"""Balanced consolidation's score (shared/disruption/balanced.py) against the worked examples of
upstream's design (designs/balanced-consolidation.md), its churn bound, and the pass through the
disruption service's world: a within-family replace goes ahead with its score, a cross-family one
that scores too low is kept and `Unconsolidatable` says why, with the score."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from cli.summary import summarise
from services.disruption.world import build
from services.whatif.runner import Runner
from shared.api.nodepool import ConsolidationPolicy, NodePool
from shared.api.scenario import parse_scenario
from shared.disruption.balanced import (
    BALANCED_K,
    PoolTotals,
    Score,
    best_case,
    judge,
    node_disruption_cost,
    score,
)
from shared.disruption.passes import graceful
from shared.disruption.simulation import Movable, Move
from shared.events import contracts as c
from shared.policy.audit import LogEntry, Replay
from shared.runtime.catalogs import Loaded
from shared.scheduling.offerings import InstanceOption, Offer
from tests.factories import T0, created, initialized, launched, pool_object
from tests.unit.disruption.test_multi_pool import fold, two_pool_day

# upstream's example pool: eight m7i.xlarge ($4.84/day) and two m7i.2xlarge ($9.68/day), 80 pods
EXAMPLE = PoolTotals(58.08, 80)
UNIFORM = PoolTotals(48.40, 80)  # ten m7i.xlarge

# name, savings, move disruption, pool totals, score, approved
DESIGN_CASES = [
    ("oversized m7i.2xlarge replaced by an m7i.large (within family)", 7.26, 3, EXAMPLE, 3.33, True),
    ("spare-capacity delete of an m7i.xlarge", 4.84, 4, EXAMPLE, 1.67, True),
    ("marginal replace of an 8-pod m7i.xlarge", 2.42, 8, EXAMPLE, 0.42, False),
    ("well-packed: the only fit is the same type", 0.0, 10, EXAMPLE, 0.0, False),
    ("uniform pool: a replace at half the price is the boundary", 2.42, 8, UNIFORM, 0.50, True),
    ("the oversized node in a 100-node pool scores alike", 7.26, 3, PoolTotals(580.80, 800), 3.33, True),
    # the design rounds its shares first and prints 2.24
    ("heterogeneous: node A, four stateless pods", 4.84, 4, PoolTotals(58.08, 107), 2.23, True),
    ("heterogeneous: node B, three model-serving pods", 4.84, 31, PoolTotals(58.08, 107), 0.29, False),
    ("on-demand pool delete", 4.84, 3, PoolTotals(48.40, 80), 2.67, True),
    ("spot pool delete", 1.45, 3, PoolTotals(14.50, 80), 2.67, True),
    ("spot pool delete of an 8-pod node", 1.45, 8, PoolTotals(14.50, 80), 1.0, True),
    ("spot pool delete of 8 pods of cost 2", 1.45, 16, PoolTotals(14.50, 80), 0.50, True),
    ("single-node pool delete", 4.84, 5, PoolTotals(4.84, 5), 1.0, True),
    # c7i.large ($0.0892/h) -> m7i.medium ($0.0504/h) in a uniform c7i.large pool: 43% saved of a
    # node that is a tenth of the pool's cost and disruption (k = 3 would take it, k = 2 does not)
    ("cross-family c7i.large -> m7i.medium", 0.0388, 4, PoolTotals(0.892, 40), 0.43, False),
    ("a replace dearer than the node", -0.5, 2, EXAMPLE, 0.0, False),
]


@pytest.mark.parametrize(
    ("savings", "disruption", "totals", "expected", "approved"),
    [case[1:] for case in DESIGN_CASES],
    ids=[case[0] for case in DESIGN_CASES],
)
def test_the_design_examples_score_as_upstream_worked_them(
    savings: float, disruption: float, totals: PoolTotals, expected: float, approved: bool
) -> None:
    result = score(savings, disruption, totals)
    assert round(result.value, 2) == expected and result.approved is approved
    assert result.threshold == 0.5 and result.k == BALANCED_K == 2


def test_a_lower_score_refuses_what_a_larger_k_would_take() -> None:
    cross_family = score(0.0388, 4, PoolTotals(0.892, 40))
    assert not cross_family.approved and Score(cross_family.savings_share, cross_family.disruption_share, 3).approved


def test_a_nodes_disruption_cost_is_one_plus_its_pods_none_below_zero() -> None:
    assert node_disruption_cost([]) == 1.0
    assert node_disruption_cost([1.0, 1.0, 1.0]) == 4.0
    assert node_disruption_cost([-10.0, 10.0, 1.0]) == 12.0  # a pod free to disrupt is no credit


def test_a_pool_with_nothing_to_weigh_against_scores_nothing() -> None:
    assert score(1.0, 1.0, PoolTotals(0.0, 5.0)).value == 0.0
    assert not score(1.0, 1.0, PoolTotals(2.0, 0.0)).approved


def _movable(name: str, pool: str, price: float, disruption: float) -> Movable:
    return Movable(Move(name, name, ()), pool, price, "on-demand", "m7i.xlarge", disruption)


def test_a_move_across_pools_is_scored_in_each_balanced_pool_on_its_share() -> None:
    moves = [_movable("a", "od", 4.84, 3), _movable("b", "spot", 1.45, 3), _movable("c", "plain", 4.84, 50)]
    balanced = {"od": PoolTotals(48.40, 80), "spot": PoolTotals(14.50, 80)}
    verdict = judge(moves, 11.13, balanced)  # every node deleted: the net is the three prices
    assert sorted(verdict.scores) == ["od", "spot"]  # the WhenEmptyOrUnderutilized pool is not scored
    assert round(verdict.scores["od"].value, 2) == 2.67 and round(verdict.scores["spot"].value, 2) == 2.67
    assert verdict.approved and verdict.why_not("delete") == ""
    refused = judge(moves[:2], 11.13 - 10.0, balanced)  # a dear replacement leaves 1.13 to share
    assert not refused.approved and refused.why_not("replace").startswith('NodePool "od" is Balanced')
    assert judge(moves[2:], 4.84, balanced).scores == {}


def test_the_best_case_is_a_delete() -> None:
    balanced = {"p": PoolTotals(58.08, 107)}
    model_serving = best_case(_movable("b", "p", 4.84, 31), balanced)
    assert model_serving is not None and not model_serving.approved
    assert best_case(_movable("b", "q", 4.84, 31), balanced) is None


# upstream's price table (on-demand, us-east-1, $/h x 10,000): c7i, m7i and r7i, medium to 4xlarge
PRICES = sorted([446, 892, 1785, 3570, 7140, 504, 1008, 2016, 4032, 8064, 661, 1323, 2646, 5292, 10584])


def _longest_chain(k: int, price: int, start: int, nodes: int, disruption: int) -> int:
    """The longest run of replaces each approved at k, one node of a uniform pool of `nodes`
    replaced again and again while the others stay at `start`."""
    others = (nodes - 1) * start
    longest = 0
    for cheaper in (p for p in PRICES if p < price):
        totals = PoolTotals(price + others, disruption * nodes)
        if score(price - cheaper, disruption, totals, k).approved:
            longest = max(longest, 1 + _longest_chain(k, cheaper, start, nodes, disruption))
    return longest


@pytest.mark.parametrize(("k", "bound"), [(1, 0), (2, 4), (3, 4), (4, 9)])
def test_k_two_bounds_churn_chains_to_four_steps(k: int, bound: int) -> None:
    """The design's "Bounded churn": at k = 2 a chain of approved replaces ends within 4 steps;
    k = 4 lets it zigzag across the families for 9."""
    longest = max(
        _longest_chain(k, start, start, nodes, disruption)
        for start in PRICES
        for nodes in range(1, 5)
        for disruption in (1, 2, 4, 10, 40)
    )
    assert longest == bound


# --- through the service's world --------------------------------------------------------------


def _type(name: str, cpu: int, price: float) -> InstanceOption:
    capacity = {"cpu": Decimal(cpu), "memory": Decimal(cpu * 4 * 2**30), "pods": Decimal(110)}
    labels = {"node.kubernetes.io/instance-type": name}
    return InstanceOption(name, capacity, capacity, labels, (Offer("a", "on-demand", price),))


def _balanced_pool(name: str) -> c.NodePoolApplied:
    doc = pool_object(name, budgets=[{"nodes": "100%"}])
    doc["spec"]["disruption"]["consolidationPolicy"] = "Balanced"
    assert NodePool.model_validate(doc).spec.disruption.consolidation_policy == ConsolidationPolicy.BALANCED
    return c.NodePoolApplied(nodepool=name, nodepool_object=doc)


def _node(
    claim: str, pool: str, kind: InstanceOption, pods: list[str], annotations: dict[str, str] | None = None
) -> list[c.Event]:
    """A node of `kind` running pods of the given cpu requests (each with `annotations`)."""
    cpu = str(kind.capacity["cpu"])
    node = f"{claim}-node"
    return [
        created(claim, pool),
        launched(claim, pool, cpu=cpu, zone="a").model_copy(
            update={"instance_type": kind.name, "labels": {"kubernetes.io/arch": "amd64", "team": "a"}}
        ),
        c.NodeRegistered(
            node=node,
            provider_id=f"sim:///{claim}",
            nodeclaim=claim,
            nodepool=pool,
            labels={"karpenter.sh/nodepool": pool},
            allocatable={"cpu": cpu, "memory": f"{int(cpu) * 4}Gi", "pods": "110"},
        ),
        c.NodeClaimRegistered(nodeclaim=claim, nodepool=pool, node=node),
        initialized(claim, pool),
        c.NodeInitialized(node=node, nodeclaim=claim, nodepool=pool),
        *(
            c.PodBound(
                namespace="default",
                name=f"{claim}-pod-{i}",
                node=node,
                requests={"cpu": request},
                annotations=annotations or {},
            )
            for i, request in enumerate(pods)
        ),
    ]


LATER = T0 + timedelta(hours=1)


def test_a_within_family_replace_goes_ahead_with_its_score() -> None:
    """m-large (4 cpu, 1.0/h) with one 1-cpu pod beside a full one: an m-medium (2 cpu, 0.5/h)
    holds the pod. Saves 0.5 of 2.0 an hour for 2 of 7 of the pool's disruption: score 0.88."""
    large, medium = _type("m-large", 4, 1.0), _type("m-medium", 2, 0.5)
    events = [_balanced_pool("p"), *_node("a", "p", large, ["1"]), *_node("b", "p", large, ["1"] * 4)]
    projection, counters = fold(events)
    world = build(projection, counters, Loaded([large, medium]), LATER)
    assert world.pools["p"].balanced == PoolTotals(2.0, 7.0)
    (found,) = graceful(world).found
    assert found.command.candidates == ("a",) and found.command.replacements == 1
    assert found.new_claims[0].options[0].instance.name == "m-medium"
    assert round(found.scores["p"].value, 2) == 0.88 and found.scores["p"].approved


def test_a_cross_family_replace_that_scores_too_low_is_kept_and_says_why() -> None:
    """Two c-large nodes (2 cpu, 0.0892/h), two pods each: one holds two 500m pods an m-medium
    (1 cpu, 0.0504/h) would take. 43% of a node saved, half the pool's disruption: score 0.43."""
    c_large, m_medium = _type("c-large", 2, 0.0892), _type("m-medium", 1, 0.0504)
    events = [_balanced_pool("p"), *_node("a", "p", c_large, ["500m"] * 2), *_node("b", "p", c_large, ["1"] * 2)]
    projection, counters = fold(events)
    world = build(projection, counters, Loaded([c_large, m_medium]), LATER)
    result = graceful(world)
    assert result.found == []
    why = result.unconsolidatable["a"]
    assert why.startswith('NodePool "p" is Balanced and refuses this replace: score 0.43 < threshold 0.50')
    # the same node under WhenEmptyOrUnderutilized is replaced
    plain = pool_object("p", budgets=[{"nodes": "100%"}])
    events[0] = c.NodePoolApplied(nodepool="p", nodepool_object=plain)
    projection, counters = fold(events)
    world = build(projection, counters, Loaded([c_large, m_medium]), LATER)
    (found,) = graceful(world).found
    assert found.command.candidates == ("a",) and found.scores == {}


def test_a_node_whose_pods_cost_too_much_to_move_is_kept_without_a_simulation() -> None:
    """Two pods of the highest deletion cost (10 each, clamped) on a node a third of the pool's
    cost: even deleting it saves 33% for 84% of the disruption (21 of 25): score 0.40."""
    large, medium = _type("m-large", 4, 1.0), _type("m-medium", 2, 0.5)
    dear = {"controller.kubernetes.io/pod-deletion-cost": "2147483647"}
    events = [
        _balanced_pool("p"),
        *_node("a", "p", large, ["500m"] * 2, dear),
        *_node("b", "p", large, ["4"]),
        *_node("c", "p", large, ["4"]),
    ]
    projection, counters = fold(events)
    world = build(projection, counters, Loaded([large, medium]), LATER)
    assert world.pools["p"].balanced == PoolTotals(3.0, 25.0)
    result = graceful(world)
    assert result.found == []
    assert result.unconsolidatable["a"] == (
        'NodePool "p" is Balanced and even a delete would not do: score 0.40 < threshold 0.50 '
        "(k 2; saves 33.3% of the pool's cost, disrupts 84.0%)"
    )


def test_the_services_record_each_pools_score_on_its_decision() -> None:
    """The offline runner's day of two Balanced pools: multi-node consolidation replaces a node of
    each with one, and each pool's part of the decision carries its score."""
    doc = two_pool_day({"cpu": "4"})
    for pool in doc["spec"]["nodePools"]:
        pool["spec"]["disruption"]["consolidationPolicy"] = "Balanced"
    log = Runner(parse_scenario(doc), seed=11).play().log
    decided = [e.data for e in log if e.type == "DisruptionDecided"]
    assert [(d["nodepool"], d["consolidation_type"]) for d in decided] == [("a", "multi"), ("b", "multi")]
    assert all(d["score"] is not None and d["score"] >= 0.5 for d in decided)
    assert "DisruptionCompleted" in {e.type for e in log}
    entries = [LogEntry(e.position, e.stream_id, e.type, e.data, e.occurred_at) for e in log]
    replay = Replay()
    replay.feed(entries)
    summary, _ = summarise("balanced", entries, replay, [], True)
    assert [d["score"] for d in summary["decisions"]] == [d["score"] for d in decided]
    plain = Runner(parse_scenario(two_pool_day({"cpu": "4"})), seed=11).play().log
    assert all(e.data.get("score") is None for e in plain if e.type == "DisruptionDecided")


def _consolidation_verdict(events: list[c.Event], types: list[InstanceOption], claim: str):
    from shared.explain.answer import answer

    projection, counters = fold(events)
    world = build(projection, counters, Loaded(types), LATER)
    pool = NodePool.model_validate(events[0].nodepool_object)
    told = answer(world, claim, pool, 0)
    assert told is not None
    return next(v for v in told.methods if v.method == "Consolidation"), told


def test_explain_shows_the_score_of_a_move_balanced_takes_and_of_one_it_refuses() -> None:
    large, medium = _type("m-large", 4, 1.0), _type("m-medium", 2, 0.5)
    taken = [_balanced_pool("p"), *_node("a", "p", large, ["1"]), *_node("b", "p", large, ["1"] * 4)]
    verdict, told = _consolidation_verdict(taken, [large, medium], "a")
    assert verdict.disrupts and "nodepool p is Balanced: score 0.88 >= threshold 0.50" in verdict.message
    assert verdict.details["scores"]["p"].startswith("score 0.88") and told.taken
    c_large, m_medium = _type("c-large", 2, 0.0892), _type("m-medium", 1, 0.0504)
    kept = [_balanced_pool("p"), *_node("a", "p", c_large, ["500m"] * 2), *_node("b", "p", c_large, ["1"] * 2)]
    verdict, told = _consolidation_verdict(kept, [c_large, m_medium], "a")
    assert not verdict.disrupts and verdict.cause == "BalancedScore"
    assert "score 0.43 < threshold 0.50" in verdict.message and told.causes == ["BalancedScore"]
