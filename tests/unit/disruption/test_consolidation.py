"""Consolidation (upstream's `pkg/controllers/disruption/consolidation.go`) over the real scheduling core: delete when the pods fit
elsewhere, replace with one strictly cheaper node, nothing when a pod fits nowhere or would land
on a node still starting; single-node takes the first that works; multi-node the longest prefix."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest

from shared.api.nodepool import Requirement
from shared.disruption.command import Decision
from shared.disruption.multinode import multi_node
from shared.disruption.pricing import NOT_CHEAPER
from shared.disruption.simulation import Move, simulate
from shared.disruption.singlenode import single_node
from shared.scheduling.offerings import InstanceOption
from shared.scheduling.requirements import Requirements
from shared.scheduling.rules import MinValuesPolicy
from shared.scheduling.values import PoolTemplate
from tests.unit.disruption.fixtures import CATALOG, cluster, movable, node, pod


def test_pods_that_fit_on_the_other_nodes_make_a_delete():
    view = cluster(node("c1", "7"), node("n2", "3"))
    result = single_node([movable("c1", (pod("p1"), pod("p2")), 8.0)], view, {"a": 1}, spot_to_spot=False)
    assert result.command is not None and result.command.decision is Decision.DELETE
    assert result.command.candidates == ("c1",) and result.command.reason == "Underutilized"


def test_one_strictly_cheaper_node_makes_a_replace():
    view = cluster(node("c1", "7"))  # nowhere else to go
    result = single_node([movable("c1", (pod("p1"),), 8.0)], view, {"a": None}, spot_to_spot=False)
    assert result.command is not None and result.command.decision is Decision.REPLACE
    assert result.replacement is not None and result.replacement.options[0].instance.name == "m1"
    assert all(o.price < 8.0 for o in result.replacement.options)


def test_a_replacement_that_costs_as_much_is_no_command():
    view = cluster(node("c1", "0"))
    result = single_node([movable("c1", (pod("p1", "1"),), 1.0, size=1)], view, {"a": None}, spot_to_spot=False)
    assert result.command is None and result.why_not == NOT_CHEAPER


def test_a_pod_that_fits_nowhere_or_needing_two_nodes_is_no_command():
    view = cluster(node("c1", "0"))
    huge = single_node([movable("c1", (pod("p1", "16"),), 16.0)], view, {"a": None}, spot_to_spot=False)
    assert huge.command is None and huge.why_not is not None and huge.why_not.startswith("pod p1 would not schedule")
    two = single_node([movable("c1", (pod("p1", "8"), pod("p2", "8")), 20.0)], view, {"a": None}, spot_to_spot=False)
    assert two.command is None and two.why_not == "Can't remove without creating 2 candidates"


def test_a_plan_leaning_on_a_node_still_starting_is_no_command():
    view = cluster(node("c1", "7"), node("young", "8", initialized=False))
    simulation = simulate([Move("c1", "c1", (pod("p1"),))], view)
    assert not simulation.valid and simulation.why_not() == "would schedule against uninitialized nodeclaim/young"


def test_a_node_inside_its_consolidate_after_window_takes_no_candidate_pods():
    view = cluster(node("c1", "7"), node("busy", "3"), waiting=frozenset({"busy"}))
    result = single_node([movable("c1", (pod("p1"),), 8.0)], view, {"a": None}, spot_to_spot=False)
    assert result.command is not None and result.command.decision is Decision.REPLACE  # not a delete onto busy


def test_single_node_skips_pools_without_budget_and_takes_the_first_that_works():
    view = cluster(node("c1", "0"), node("c2", "0"), node("n3", "2"))
    first = movable("c1", (pod("p1", "4"),), 8.0)  # too big for n3: replaced
    second = movable("c2", (pod("p2", "1"),), 8.0)  # fits on n3: deleted
    result = single_node([second, first], view, {"a": 1}, spot_to_spot=False)
    assert result.command is not None and result.command.candidates == ("c2",)
    assert single_node([first], view, {"a": 0}, spot_to_spot=False).command is None


def test_pending_pods_compete_for_the_room_in_queue_order():
    view = cluster(node("c1", "7"), node("n2", "1"), pending=(pod("older", "1"),))  # before p1 in the queue
    result = single_node([movable("c1", (pod("p1", "1"),), 8.0)], view, {"a": None}, spot_to_spot=False)
    assert (
        result.command is not None and result.command.decision is Decision.REPLACE
    )  # n2's room went to the pending pod


def test_multi_node_finds_the_longest_prefix_that_consolidates():
    # four nodes each with one 1-cpu pod: all four fit on one 4-cpu node, cheaper than 4 x 8
    candidates = [movable(f"c{i}", (pod(f"p{i}"),), 8.0) for i in range(4)]
    view = cluster(*(node(f"c{i}", "7") for i in range(4)))
    result = multi_node(candidates, view, {"a": None}, spot_to_spot=False)
    assert result.command is not None and result.command.candidates == ("c0", "c1", "c2", "c3")
    assert result.command.decision is Decision.REPLACE and result.replacement is not None
    assert result.replacement.options[0].instance.name == "m4"


def test_multi_node_stays_within_each_pools_budget_and_needs_two():
    candidates = [movable(f"c{i}", (pod(f"p{i}"),), 8.0) for i in range(4)]
    view = cluster(*(node(f"c{i}", "7") for i in range(4)))
    two = multi_node(candidates, view, {"a": 2}, spot_to_spot=False)
    assert two.command is not None and two.command.candidates == ("c0", "c1")
    assert multi_node(candidates, view, {"a": 1}, spot_to_spot=False).command is None


def test_multi_node_filters_out_the_candidates_own_type():
    # two m2 nodes, each with a 1-cpu pod: one m2 would hold both, but that is a candidate's own
    # type, so the replacement must be cheaper than m2 itself, and m1 cannot hold 2 cpu
    candidates = [movable(f"c{i}", (pod(f"p{i}"),), 2.0, size=2) for i in range(2)]
    view = cluster(*(node(f"c{i}", "1") for i in range(2)))
    result = multi_node(candidates, view, {"a": None}, spot_to_spot=False)
    assert result.command is None and result.why_not == NOT_CHEAPER


def test_a_replacement_goes_to_the_pool_the_simulation_puts_it_in():
    # flagship-day, backend1a: the candidate's pod tolerates its pool's taint but needs no pool, so
    # the simulation plans it in the pool the scheduler tries first (names descending: "web"),
    # whose node is cheaper than anything the candidate's own pool offers: as upstream, the
    # replacement is launched there (it was no command while replacements had to stay home).
    pools = (PoolTemplate("a", _types("m8")), PoolTemplate("web", _types("m1", "m2")))
    view = replace(cluster(node("c1", "7")), pools=pools)
    result = single_node([movable("c1", (pod("p1"),), 8.0)], view, {"a": None, "web": None}, spot_to_spot=False)
    assert result.command is not None and result.command.decision is Decision.REPLACE
    assert result.planned is not None and result.planned.nodepool == "web"
    multi = [movable(f"c{i}", (pod(f"p{i}"),), 8.0) for i in range(2)]
    view = replace(cluster(node("c0", "7"), node("c1", "7")), pools=pools)
    both = multi_node(multi, view, {"a": None, "web": None}, spot_to_spot=False)
    assert both.command is not None and both.command.candidates == ("c0", "c1")
    assert both.planned is not None and both.planned.nodepool == "web"


def test_a_replacement_in_the_candidates_own_pool_still_goes_ahead():
    pools = (PoolTemplate("a", _types("m1")), PoolTemplate("web", _types("m8"), weight=-1))
    view = replace(cluster(node("c1", "7")), pools=pools)
    result = single_node([movable("c1", (pod("p1"),), 8.0)], view, {"a": None, "web": None}, spot_to_spot=False)
    assert result.command is not None and result.command.decision is Decision.REPLACE
    assert result.planned is not None and result.planned.nodepool == "a"


def _types(*names: str) -> Requirements:
    return Requirements.of([Requirement(key="node.kubernetes.io/instance-type", operator="In", values=list(names))])


@pytest.mark.parametrize("prepared", [False, True])
def test_a_replacement_is_planned_with_the_pods_its_pools_class_admits(prepared: bool):
    """Four small pods leave a candidate: by the catalog one 4-cpu node holds them, but the pool's
    class admits 2 pods a node (its kubelet's maxPods), so the simulation needs two."""
    admitting_two = tuple(
        InstanceOption(
            o.name, {**o.capacity, "pods": Decimal(2)}, {**o.allocatable, "pods": Decimal(2)}, o.labels, o.offers
        )
        for o in CATALOG
    )
    pods = tuple(pod(f"p{i}") for i in range(4))
    for own, claims in (({}, 1), ({"a": admitting_two}, 2)):
        view = cluster(pool_catalogs=own)
        simulation = simulate([Move("c1", "c1", pods)], view.prepared() if prepared else view)
        assert simulation.valid and len(simulation.new_claims) == claims


def test_single_node_says_why_it_keeps_each_candidate_it_looked_at():
    """Upstream's `Unconsolidatable`: each candidate single-node consolidation looked at and kept,
    with why; the one that yields the command, and those after it, are not said."""
    view = cluster(node("n2", "1"))
    kept = single_node(
        [movable("c1", (pod("p1", "16"),), 16.0), movable("c2", (pod("p2", "8"), pod("p3", "8")), 20.0)],
        view,
        {"a": None},
        spot_to_spot=False,
    )
    assert kept.command is None
    assert kept.unconsolidatable["c1"].startswith("pod p1 would not schedule")
    assert kept.unconsolidatable["c2"] == "Can't remove without creating 2 candidates"
    found = single_node(
        [movable("c1", (pod("p1", "16"),), 16.0), movable("c3", (pod("p4"),), 8.0), movable("c4", (pod("p5"),), 8.0)],
        view,
        {"a": None},
        spot_to_spot=False,
    )
    assert found.command is not None and found.command.candidates == ("c3",)
    assert set(found.unconsolidatable) == {"c1"}


@pytest.mark.parametrize(("policy", "valid"), [(MinValuesPolicy.STRICT, False), (MinValuesPolicy.BEST_EFFORT, True)])
def test_a_replacement_is_planned_under_the_schedulers_min_values_policy(policy: MinValuesPolicy, valid: bool):
    """minValues 10 over a catalog of 4 types: strict, no replacement can be planned; BestEffort
    relaxes it, as the scheduler would for a launch."""
    wanted = Requirements.of([Requirement(key="node.kubernetes.io/instance-type", operator="Exists", min_values=10)])
    view = replace(cluster(), pools=(PoolTemplate("a", wanted),), min_values_policy=policy)
    simulation = simulate([Move("c1", "c1", (pod("p1"),))], view)
    assert simulation.valid is valid
