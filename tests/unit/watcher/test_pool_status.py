"""A NodePool's status as the watcher writes it: conditions after validation, nodes and resources."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from services.watcher.pool_status import conditions, counted, same_conditions
from shared.policy.pool_state import PoolCounters

NOW = datetime(2026, 11, 23, 9, tzinfo=UTC)


@pytest.mark.parametrize(
    ("errors", "expected"),
    [
        (None, {"ValidationSucceeded": "True", "NodeClassReady": "True", "Ready": "True"}),
        ([], {"ValidationSucceeded": "True", "NodeClassReady": "True", "Ready": "True"}),
        (
            [{"path": "spec.limits.nodes", "message": "must be at least 0"}],
            {"ValidationSucceeded": "False", "NodeClassReady": "True", "Ready": "False"},
        ),
    ],
)
def test_ready_follows_validation(errors, expected):
    written = conditions(errors, NOW)
    assert {c["type"]: c["status"] for c in written} == expected
    validation = written[0]
    if errors:
        assert validation["reason"] == "ValidationFailed"
        assert validation["message"] == "spec.limits.nodes: must be at least 0"
        assert written[2]["reason"] == "UnhealthyDependents"


def test_an_unchanged_status_keeps_its_transition_time():
    before = conditions(None, NOW)
    later = NOW + timedelta(hours=1)
    again = conditions(None, later, before)
    assert all(c["lastTransitionTime"] == NOW.isoformat() for c in again)
    failed = conditions([{"path": "spec", "message": "x"}], later, before)
    times = {c["type"]: c["lastTransitionTime"] for c in failed}
    assert times == {
        "ValidationSucceeded": later.isoformat(),
        "NodeClassReady": NOW.isoformat(),
        "Ready": later.isoformat(),
    }
    assert same_conditions(before, again) and not same_conditions(before, failed)


def test_counts_carry_the_node_count_among_the_resources():
    counters = PoolCounters("web", nodes=3, resources={"cpu": Decimal(12), "memory": Decimal(48 * 2**30)})
    assert counted(counters) == {"nodes": 3, "resources": {"cpu": "12", "memory": "48Gi", "nodes": "3"}}
