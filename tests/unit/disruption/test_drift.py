"""Drift detection (upstream's `pkg/controllers/nodeclaim/disruption/drift.go`), table by table: the template hash, the requirements, and the
order drifted claims go in."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from shared.api.nodepool import Requirement
from shared.disruption.command import Decision
from shared.disruption.drift import (
    NODEPOOL_DRIFTED,
    REQUIREMENTS_DRIFTED,
    DriftedClaim,
    Stamp,
    drift_command,
    drift_order,
    drift_reason,
)
from shared.scheduling.requirements import Requirements
from shared.scheduling.values import PoolTemplate
from tests.unit.disruption.fixtures import cluster, movable, node, pod

T0 = datetime(2026, 11, 24, 12, tzinfo=UTC)
LABELS = {"team": "a", "karpenter.sh/capacity-type": "spot", "topology.kubernetes.io/zone": "zone-a"}
SAME = Stamp("111", "nw1")


def req(key: str, operator: str, *values: str) -> Requirement:
    return Requirement.model_validate({"key": key, "operator": operator, "values": list(values) or None})


def reason(pool_stamp=SAME, *requirements: Requirement, launched=True, claim_stamp=SAME, labels=LABELS):
    return drift_reason(
        launched=launched,
        claim=claim_stamp,
        pool=pool_stamp,
        claim_labels=labels,
        pool_requirements=Requirements.of(requirements),
    )


@pytest.mark.parametrize(
    ("pool", "claim", "expected"),
    [
        (SAME, SAME, None),
        (Stamp("222", "nw1"), SAME, NODEPOOL_DRIFTED),
        (Stamp("222", "nw2"), SAME, None),  # another hashing scheme: compare only equals
        (Stamp(None, None), SAME, None),  # unknown on one side
        (Stamp("222", "nw1"), Stamp(None, None), None),
    ],
)
def test_the_template_hash(pool, claim, expected):
    assert reason(pool, claim_stamp=claim) == expected


@pytest.mark.parametrize(
    ("requirements", "expected", "note"),
    [
        ((req("team", "In", "a"),), None, "still satisfied"),
        ((req("team", "In", "a", "b"),), None, "broadened values"),
        ((req("team", "Exists"),), None, "loosened to Exists"),
        ((req("team", "In", "b"),), REQUIREMENTS_DRIFTED, "narrowed past the claim's value"),
        ((req("owner", "In", "x"),), REQUIREMENTS_DRIFTED, "a new required key the claim lacks"),
        ((req("team", "DoesNotExist"),), REQUIREMENTS_DRIFTED, "DoesNotExist on a key it has"),
        ((req("owner", "DoesNotExist"),), None, "DoesNotExist on a key it lacks"),
        ((req("karpenter.sh/capacity-type", "In", "on-demand"),), REQUIREMENTS_DRIFTED, "capacity type narrowed"),
        ((req("topology.kubernetes.io/zone", "NotIn", "zone-b"),), None, "another zone excluded"),
        ((req("topology.kubernetes.io/zone", "NotIn", "zone-a"),), REQUIREMENTS_DRIFTED, "its zone excluded"),
    ],
)
def test_the_requirements(requirements, expected, note):
    assert reason(SAME, *requirements) == expected, note


def test_the_hash_comes_first_and_an_unlaunched_claim_never_drifts():
    assert reason(Stamp("222", "nw1"), req("team", "In", "b")) == NODEPOOL_DRIFTED
    assert reason(Stamp("222", "nw1"), req("team", "In", "b"), launched=False) is None


def test_empty_claims_go_first_then_the_longest_drifted():
    claims = [
        DriftedClaim("busy-old", False, T0),
        DriftedClaim("empty-new", True, T0 + timedelta(hours=1)),
        DriftedClaim("busy-new", False, T0 + timedelta(hours=2)),
        DriftedClaim("empty-old", True, T0),
    ]
    assert drift_order(claims) == ["empty-old", "empty-new", "busy-old", "busy-new"]


def test_a_drifted_node_is_replaced_by_as_many_claims_as_its_pods_need_whatever_they_cost():
    view = cluster(node("c1", "0"))
    big = movable("c1", (pod("p1", "8"), pod("p2", "8")), price=0.5)  # two 8-cpu pods: two new claims, dearer
    decision = drift_command([big], view, {"a": 1})
    assert decision.command is not None and decision.command.reason == "Drifted"
    assert decision.command.candidates == ("c1",) and decision.command.replacements == 2
    assert decision.command.decision is Decision.REPLACE


def test_an_empty_drifted_node_is_deleted_and_one_whose_pods_fit_nowhere_is_passed_over():
    view = cluster(node("stuck", "0"), node("empty", "8"))
    stuck = movable("stuck", (pod("huge", "64"),), price=8.0)
    empty = movable("empty", (), price=8.0)
    decision = drift_command([stuck, empty], view, {"a": None})
    assert decision.command is not None and decision.command.candidates == ("empty",)
    assert decision.command.decision is Decision.DELETE
    assert decision.blocked["stuck"].startswith("pod huge would not schedule")


def test_a_drifted_budget_of_zero_moves_nothing():
    view = cluster(node("c1", "0"))
    assert drift_command([movable("c1", (), price=1.0)], view, {"a": 0}).command is None


def test_a_drifted_node_is_replaced_in_the_pool_the_simulation_chooses():
    # "web" is tried first (names descending): the drifted node's replacement goes there, as upstream's
    pools = (PoolTemplate("a", Requirements()), PoolTemplate("web", Requirements()))
    view = replace(cluster(node("moving", "0"), node("empty", "2")), pools=pools)
    moving = movable("moving", (pod("p1", "4"),), price=8.0)  # fits on no node that stays
    decision = drift_command([moving], view, {"a": None, "web": None})
    assert decision.command is not None and decision.command.candidates == ("moving",)
    assert [c.nodepool for c in decision.new_claims] == ["web"]
