"""Node limits (seed 001): headroom, hard and soft modes, and the two blocking messages."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from shared.api.nodepool import Budget, DisruptionReason, NodeLimitMode
from shared.policy.budgets import DisruptionBudgets
from shared.policy.gates import BlockCause, check_disruption
from shared.policy.limits import NodeLimit, exceeded_limits, remaining_resources

AT = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
UNDER = DisruptionReason.UNDERUTILIZED


def budgets(nodes="100%", count=10, disrupting=0):
    return DisruptionBudgets([Budget(nodes=nodes)]).status(AT, count, disrupting)


@pytest.mark.parametrize(
    ("limit", "nodes", "headroom", "excess", "provision"),
    [(None, 50, None, 0, True), (10, 7, 3, 0, True), (10, 10, 0, 0, False), (10, 13, 0, 3, False), (0, 0, 0, 0, False)],
)
def test_headroom(limit, nodes, headroom, excess, provision):
    node_limit = NodeLimit(limit, nodes)
    assert node_limit.headroom == headroom
    assert node_limit.excess == excess
    assert node_limit.can_provision() is provision


@pytest.mark.parametrize(
    ("mode", "limit", "nodes", "replacements", "candidates", "allowed", "cause"),
    [
        # Hard: a replacement must fit under the limit while the old node still counts.
        (NodeLimitMode.HARD, 10, 9, 1, 1, True, None),
        (NodeLimitMode.HARD, 10, 10, 1, 1, False, BlockCause.NODE_HARD_LIMIT),
        (NodeLimitMode.HARD, 10, 8, 3, 1, False, BlockCause.NODE_HARD_LIMIT),
        # A pure delete never needs headroom, even at or over the limit.
        (NodeLimitMode.HARD, 10, 10, 0, 1, True, None),
        (NodeLimitMode.HARD, 10, 12, 0, 3, True, None),
        # Soft ignores the node limit in disruption.
        (NodeLimitMode.SOFT, 10, 10, 1, 1, True, None),
        (NodeLimitMode.HARD, None, 500, 5, 1, True, None),
    ],
)
def test_node_limit_gate(mode, limit, nodes, replacements, candidates, allowed, cause):
    result = check_disruption(
        UNDER, budgets(count=nodes), NodeLimit(limit, nodes, mode), candidates=candidates, replacements=replacements
    )
    assert result.allowed is allowed
    assert result.cause == cause
    if cause == BlockCause.NODE_HARD_LIMIT:
        assert result.message == "No allowed disruptions for disruption reason Underutilized due to node hard limit"


def test_budget_blocks_with_upstream_message():
    result = check_disruption(UNDER, budgets("0"), NodeLimit(None, 10))
    assert not result.allowed and result.cause == BlockCause.BUDGET
    assert result.message == "No allowed disruptions for disruption reason Underutilized due to blocking budget"


def test_budget_counts_before_limit():
    result = check_disruption(UNDER, budgets("1", disrupting=1), NodeLimit(10, 10), replacements=1)
    assert result.cause == BlockCause.BUDGET


def test_forceful_expiration_passes_both():
    assert check_disruption(UNDER, budgets("0"), NodeLimit(10, 10), replacements=1, forceful=True).allowed


def test_candidates_need_that_much_budget():
    assert check_disruption(UNDER, budgets("2"), NodeLimit(None, 10), candidates=2).allowed
    assert not check_disruption(UNDER, budgets("2"), NodeLimit(None, 10), candidates=3).allowed


def test_resource_limits():
    limits = {"cpu": Decimal(100), "memory": Decimal(1000), "nodes": Decimal(3)}
    usage = {"cpu": Decimal(96), "memory": Decimal(100), "nodes": Decimal(2)}
    assert remaining_resources(limits, usage) == {"cpu": Decimal(4), "memory": Decimal(900), "nodes": Decimal(1)}
    assert exceeded_limits(limits, usage, {"cpu": Decimal(4), "memory": Decimal(8)}) == {}
    assert exceeded_limits(limits, usage, {"cpu": Decimal(8)}) == {"cpu": (Decimal(104), Decimal(100))}
    full = {**usage, "nodes": Decimal(3)}
    assert exceeded_limits(limits, full, {"cpu": Decimal(1)}) == {"nodes": (Decimal(4), Decimal(3))}
