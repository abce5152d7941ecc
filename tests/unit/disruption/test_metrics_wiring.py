"""Disruption's upstream metrics where the decisions happen: each graceful method's evaluation
timed under its reason and consolidation type, the claims handed to termination counted with
upstream's labels and their reschedulable pods, a failed command's replacements as queue
failures, a failed validation's candidates."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry

from services.disruption.commands import Commands
from services.disruption.metrics import DisruptionMetrics
from services.disruption.world import build, reschedulable_on
from shared.disruption.passes import graceful
from shared.events import contracts as c
from shared.runtime.catalogs import Loaded
from tests.factories import T0, applied, decided
from tests.unit.disruption.test_service_world import CATALOG, bound, fold, node

NOW = T0 + timedelta(hours=1)


def ticking() -> Callable[[], float]:
    """A clock that moves one second each time it is read."""
    reads = iter(range(1_000_000))
    return lambda: float(next(reads))


@pytest.mark.parametrize(
    ("events", "asked"),
    [
        # an empty node: Emptiness finds it and ends the pass
        ([applied("p"), *node("a")], [("Empty", "empty")]),
        # a busy node whose labels no longer meet its pool's requirements: Drift takes it (static
        # drift, asked first, has no static pool to look at)
        ([applied("p"), *node("a"), bound("w", "a")], [("Empty", "empty"), ("Drifted", ""), ("Drifted", "")]),
        # no candidates: every method is asked, in upstream's order, and timed all the same
        (
            [applied("p")],
            [
                ("Empty", "empty"),
                ("Drifted", ""),
                ("Drifted", ""),
                ("Underutilized", "multi"),
                ("Underutilized", "single"),
            ],
        ),
    ],
)
def test_each_method_asked_is_timed_under_its_reason_and_consolidation_type(events, asked):
    projection, counters = fold(events)
    result = graceful(build(projection, counters, Loaded(CATALOG), NOW), ticking())
    assert [(str(r), t) for r, t, _ in result.durations] == asked
    assert all(seconds == 1.0 for _, _, seconds in result.durations)
    assert graceful(build(projection, counters, Loaded(CATALOG), NOW)).durations == []  # no clock, no times


def commands(projection) -> tuple[Commands, CollectorRegistry]:
    registry = CollectorRegistry()
    metrics = DisruptionMetrics.on(registry)
    return Commands(
        None, projection, None, catalog=lambda: Loaded(CATALOG), spot_to_spot=False, metrics=metrics
    ), registry  # type: ignore[arg-type]


def with_type(event: c.DisruptionDecided, consolidation_type: str) -> c.DisruptionDecided:
    return event.model_copy(update={"consolidation_type": consolidation_type, "decision": "delete"})


@pytest.mark.parametrize(
    ("reason", "consolidation_type", "policy"),
    [
        ("Underutilized", "single", "when_empty_or_underutilized"),
        ("Empty", "empty", "when_empty_or_underutilized"),
        ("Drifted", "", ""),  # drift reports no consolidation policy, as upstream's queue
        ("Expired", "", ""),
    ],
)
def test_claims_handed_to_termination_are_counted_with_upstreams_labels(reason, consolidation_type, policy):
    events = [
        applied("p"),
        *node("a"),
        bound("w", "a"),
        with_type(decided("d", "p", reason, ["a"]), consolidation_type),
    ]
    projection, _ = fold(events)
    (command,) = projection.live_commands()
    runner, registry = commands(projection)
    runner._count_disrupted(command, ["a"])
    labels = {
        "reason": reason.lower(),
        "nodepool": "p",
        "capacity_type": "on-demand",
        "consolidation_policy": policy,
        "termination_mode": "graceful",
    }
    assert registry.get_sample_value("karpenter_nodeclaims_disrupted_total", labels) == 1
    assert registry.get_sample_value("karpenter_pods_disruption_initiated_total", labels) == 1


def test_reschedulable_pods_are_those_needing_a_place_elsewhere():
    projection, _ = fold([applied("p"), *node("a"), bound("w", "a"), bound("v", "a"), *node("b")])
    assert [reschedulable_on(projection, n) for n in ("a-node", "b-node", None)] == [2, 0, 0]


def test_a_failed_commands_replacements_not_initialized_are_queue_failures():
    decision = decided("d", "p", "Underutilized", ["a"], ["r1", "r2"]).model_copy(
        update={"consolidation_type": "single", "decision": "replace"}
    )
    projection, _ = fold([applied("p"), *node("a"), decision, *node("r1")])
    (command,) = projection.live_commands()
    runner, registry = commands(projection)
    runner._queue_failed(command)
    labels = {"decision": "replace", "reason": "underutilized", "consolidation_type": "single"}
    assert registry.get_sample_value("karpenter_voluntary_disruption_queue_failures_total", labels) == 1  # r2 only


class Ledger:
    """The store's counters as the re-check reads them; cancellations recorded, never refused."""

    def __init__(self, counters) -> None:
        self.counters = counters
        self.store = self
        self.units: list = []

    async def append_unit(self, appends) -> None:
        self.units.append(appends)


class Recorder:
    async def publish(self, events, now) -> None:
        return None


def test_a_consolidation_command_whose_candidate_changed_counts_a_failed_validation():
    decision = decided("d", "p", "Underutilized", ["a"]).model_copy(
        update={"consolidation_type": "single", "decision": "delete", "observed_position": 1}
    )
    projection, counters = fold([applied("p"), *node("a"), decision, bound("late", "a")])
    (command,) = projection.live_commands()
    metrics = DisruptionMetrics.on(registry := CollectorRegistry())

    async def counted() -> dict[str, dict[str, int]]:
        return counters

    ledger = Ledger(counters)
    ledger.counters = counted  # type: ignore[method-assign]
    runner = Commands(
        ledger, projection, Recorder(), catalog=lambda: Loaded(CATALOG), spot_to_spot=False, metrics=metrics
    )  # type: ignore[arg-type]
    moved, result = asyncio.run(runner._recheck([command], NOW))
    assert (moved, result) == (True, "cancelled")
    sample = registry.get_sample_value(
        "karpenter_voluntary_disruption_failed_validations_total", {"consolidation_type": "single"}
    )
    assert sample == 1
