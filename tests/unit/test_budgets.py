"""Upstream's budget semantics: the worked examples B1-B26 of docs/budgets.md, one row each."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from shared.api.nodepool import Budget, DisruptionReason
from shared.policy.budgets import BudgetNode, DisruptionBudgets, budget_counts

EMPTY, UNDER, DRIFTED = DisruptionReason.EMPTY, DisruptionReason.UNDERUTILIZED, DisruptionReason.DRIFTED
ALL = (EMPTY, UNDER, DRIFTED)
T0 = datetime(2000, 6, 15, 12, 30, 30, tzinfo=UTC)  # the NBT fixture's instant, a Thursday


def b(nodes: str, schedule: str | None = None, duration: str | None = None, reasons=None, tz=None) -> Budget:
    """Unvalidated, as upstream's tests build Go structs without the API server's schema check."""
    return Budget.model_construct(nodes=nodes, schedule=schedule, duration=duration, reasons=reasons, time_zone=tz)


def fixture(**changes) -> list[Budget]:
    """The NBT fixture's budgets b0..b5, with some replaced."""
    budgets = {
        "b0": b("10", "* * * * *", "1h"),
        "b1": b("100", "* * * * *", "1h"),
        "b2": b("100%", "* * * * *", "1h"),
        "b3": b("15", "* * * * *", "1h", [DRIFTED, UNDER]),
        "b4": b("5", "* * * * *", "1h", [DRIFTED]),
        "b5": b("0", "@weekly", "1h", [EMPTY, DRIFTED, UNDER]),
    }
    budgets.update(changes)
    return [v for v in budgets.values() if v is not None]


def allowed(budgets, at=T0, nodes=100, disrupting=0):
    status = DisruptionBudgets(budgets).status(at, nodes, disrupting)
    return {r: status.allowed(r) for r in ALL}, status


@pytest.mark.parametrize(("nodes", "expected"), [(10, 1), (11, 2), (5, 1), (0, 0)])
def test_b1_percent_rounds_up(nodes, expected):
    got, _ = allowed([b("10%")], nodes=nodes)
    assert set(got.values()) == {expected}


def _emptiness_deletes(budget: str, pools: int, nodes_per_pool: int) -> int:
    """Emptiness takes every empty candidate its pool's budget allows in one command."""
    deleted = 0
    for _ in range(pools):
        status = DisruptionBudgets([b(budget)]).status(T0, nodes_per_pool, 0)
        deleted += min(status.remaining(EMPTY), nodes_per_pool)
    return deleted


def test_b2_fifty_percent_across_ten_pools():
    got, _ = allowed([b("50%")], nodes=3)
    assert got[EMPTY] == 2
    assert _emptiness_deletes("50%", pools=10, nodes_per_pool=3) == 20


@pytest.mark.parametrize(("budget", "deleted"), [("30%", 3), ("0%", 0), ("100%", 10)])
def test_b3_b4_b5_empty_nodes_deleted(budget, deleted):
    assert _emptiness_deletes(budget, pools=1, nodes_per_pool=10) == deleted


def test_b6_integer_is_not_capped_by_node_count():
    got, _ = allowed([b("5")], nodes=3)
    assert got == {r: 5 for r in ALL}


def test_b7_inactive_reason_budgets_are_ignored():
    got, _ = allowed(fixture(b3=b("15", "@yearly", "1h", [DRIFTED, UNDER]), b4=b("5", "@yearly", "1h", [DRIFTED])))
    assert got == {r: 10 for r in ALL}


def test_b8_minimum_per_reason():
    got, _ = allowed([*fixture(), b("4", "* * * * *", "1h", [EMPTY])])
    assert got == {EMPTY: 4, DRIFTED: 5, UNDER: 10}


def test_b9_reasonless_budget_applies_to_all():
    got, _ = allowed([fixture()[0]])
    assert got == {r: 10 for r in ALL}


def test_b10_zero_budget_for_every_reason():
    got, _ = allowed(fixture(b5=b("0", "* * * * *", "1h", [EMPTY, DRIFTED, UNDER])))
    assert got == {r: 0 for r in ALL}


def test_b11_no_active_budget_is_unbounded():
    budgets = [b(x.nodes, "@yearly", "1h", x.reasons) for x in fixture()]
    got, status = allowed(budgets)
    assert got == {r: None for r in ALL}
    assert status.remaining(EMPTY) is None


@pytest.mark.parametrize("bad", [b("10", "@wrongly", "1h"), b("1000a%", "* * * * *", "1h")])
def test_b12_unparseable_budget_fails_closed(bad):
    got, status = allowed(fixture(b0=bad))
    assert got == {r: 0 for r in ALL}
    assert status.errors


def test_b13_percent_of_all_nodes():
    got, _ = allowed([b("100%", "* * * * *", "1h")])
    assert got == {r: 100 for r in ALL}


def test_b14_schedules_are_utc():
    at = datetime(2000, 5, 31, 0, 0, tzinfo=timezone(timedelta(hours=1)))
    got, _ = allowed([b("0", "@daily", "30m")], at=at)
    assert got == {r: None for r in ALL}


@pytest.mark.parametrize(
    ("schedule", "duration", "at", "active"),
    [
        ("@yearly", "24h", datetime(1000, 1, 1, 12, 0, tzinfo=UTC), True),  # B15
        ("@daily", "48h", datetime(2024, 1, 7, 0, 0, tzinfo=UTC), True),  # B16
        ("30 6 * * SUN", "6h", datetime(2024, 1, 7, 0, 0, tzinfo=UTC), False),  # B17
        ("@daily", "30m", datetime(2024, 1, 7, 0, 0, 0, tzinfo=UTC), True),  # B19
        ("@daily", "30m", datetime(2024, 1, 7, 0, 29, 59, tzinfo=UTC), True),
        ("@daily", "30m", datetime(2024, 1, 7, 0, 30, 0, tzinfo=UTC), False),
        ("@daily", "30m", datetime(2024, 1, 6, 23, 59, 59, 999999, tzinfo=UTC), False),
    ],
)
def test_b15_to_b19_active_window(schedule, duration, at, active):
    got, _ = allowed([b("0", schedule, duration)], at=at)
    assert got[EMPTY] == (0 if active else None)


def test_b18_reversed_range_reports_why():
    got, status = allowed([b("10", "0 0 * * tue-mon", "1h")])
    assert got == {r: 0 for r in ALL}
    assert "beginning of range (2) beyond end of range (1)" in status.errors[0]


def _status(budget: str, nodes: list[BudgetNode]):
    counted, disrupting = budget_counts(nodes)
    return DisruptionBudgets([b(budget)]).status(T0, counted, disrupting)


def test_b20_deleting_and_marked_nodes_consume_budget():
    nodes = [BudgetNode()] * 8 + [BudgetNode(marked_for_deletion=True)] * 2
    assert _status("100%", nodes).remaining(EMPTY) == 8


def test_b21_not_ready_nodes_consume_budget():
    nodes = [BudgetNode()] * 8 + [BudgetNode(ready=False)] * 2
    assert _status("100%", nodes).remaining(EMPTY) == 8


def test_b22_remaining_is_never_negative():
    assert _status("10%", [BudgetNode(marked_for_deletion=True)] * 10).remaining(EMPTY) == 0


@pytest.mark.parametrize(
    "extra", [BudgetNode(managed=False), BudgetNode(initialized=False), BudgetNode(instance_terminating=True)]
)
def test_b23_uncounted_nodes(extra):
    status = _status("100%", [BudgetNode()] * 10 + [extra])
    assert status.nodes == 10 and status.allowed(EMPTY) == 10 and status.remaining(EMPTY) == 10


def test_b24_gauges_for_ten_drifted_nodes():
    status = _status("30%", [BudgetNode()] * 10)
    assert status.allowed(DRIFTED) == 3  # karpenter_nodepools_allowed_disruptions
    assert status.disrupting == 0  # karpenter_nodepools_nodes_consuming_budgets


def test_b25_one_drift_command_per_pool_over_many_passes():
    """Drift takes one node per command; the marked node then counts as disrupting."""
    pools = {f"pool-{i}": [BudgetNode() for _ in range(3)] for i in range(10)}
    commands = 0
    for _ in range(30):
        for nodes in pools.values():
            counted, disrupting = budget_counts(nodes)
            status = DisruptionBudgets([b("1")]).status(T0, counted, disrupting)
            candidates = [i for i, n in enumerate(nodes) if not n.marked_for_deletion]
            if candidates and status.remaining(DRIFTED):
                nodes[candidates[0]] = BudgetNode(marked_for_deletion=True)
                commands += 1
    assert commands == 10
    assert sum(not n.marked_for_deletion for nodes in pools.values() for n in nodes) == 20


def test_b26_one_bad_budget_blocks_every_reason():
    got, status = allowed([b("10"), b("10", "not a cron", "1h", [DRIFTED])])
    assert got[EMPTY] == 0
    assert status.errors


def test_bad_nodes_of_an_inactive_budget_is_not_evaluated():
    got, status = allowed([b("10"), b("1000a%", "@yearly", "1h")])
    assert got == {r: 10 for r in ALL} and not status.errors


def test_explicit_empty_reasons_match_nothing():
    got, _ = allowed([b("10"), b("0", reasons=[])])
    assert got == {r: 10 for r in ALL}


def test_seed004_backend1a_weekday_block():
    budgets = [b("0", "0 15 * * mon-fri", "9h", [UNDER]), b("1", reasons=[EMPTY, DRIFTED])]
    monday_16 = datetime(2026, 11, 23, 16, 0, tzinfo=UTC)
    saturday_16 = datetime(2026, 11, 28, 16, 0, tzinfo=UTC)
    monday_2359 = datetime(2026, 11, 23, 23, 59, 59, tzinfo=UTC)  # Monday's 15:00 + 9h ends at midnight
    tuesday_0000 = datetime(2026, 11, 24, 0, 0, tzinfo=UTC)
    assert allowed(budgets, monday_16, 20)[0] == {UNDER: 0, EMPTY: 1, DRIFTED: 1}
    assert allowed(budgets, monday_2359, 20)[0][UNDER] == 0
    assert allowed(budgets, tuesday_0000, 20)[0][UNDER] is None
    assert allowed(budgets, saturday_16, 20)[0] == {UNDER: None, EMPTY: 1, DRIFTED: 1}
