"""client-go's EventCorrelator as the recorder applies it (`shared.kube.correlator`): ten
different messages of one reason about one object within ten minutes, and the rest are one
combined Event; an object's flood past a burst of 25 is dropped, one more let through every five
minutes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.kube.correlator import AGGREGATE_WINDOW, COMBINED, SPAM_BURST, SPAM_REFILL, Correlator
from shared.ports.cluster import KubeEvent

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def event(message: str, key: str = "default/web-1", reason: str = "FailedScheduling") -> KubeEvent:
    return KubeEvent("Pod", key, "Warning", reason, message, "uid-1")


@pytest.mark.parametrize(
    ("spacing", "combined"),
    [
        (timedelta(seconds=1), [False] * 9 + [True] * 3),  # the tenth distinct message on: combined
        (AGGREGATE_WINDOW / 5, [False] * 12),  # spread over more than the window: never ten in one
    ],
)
def test_similar_events_are_combined_after_ten_in_the_window(spacing: timedelta, combined: list[bool]):
    correlator = Correlator()
    out = [correlator.correlate(event(f"pod {i} does not fit"), T0 + i * spacing) for i in range(12)]
    assert all(o is not None for o in out)
    assert [o.event.message.startswith(COMBINED) for o in out if o is not None] == combined
    keys = {o.key for o in out if o is not None and o.event.message.startswith(COMBINED)}
    assert len(keys) <= 1  # one combined Event, counted up


def test_the_same_message_again_is_not_a_new_similar_one():
    correlator = Correlator()
    out = [correlator.correlate(event("no nodepool fits"), T0 + timedelta(seconds=i)) for i in range(20)]
    assert {o.key for o in out if o is not None} == {("Pod", "default/web-1", "FailedScheduling", "no nodepool fits")}


def test_other_reasons_and_objects_are_counted_apart():
    correlator = Correlator()
    for i in range(9):
        correlator.correlate(event(f"m{i}"), T0)
    other_reason = correlator.correlate(event("m9", reason="Nominated"), T0)
    other_pod = correlator.correlate(event("m9", key="default/web-2"), T0)
    assert other_reason is not None and not other_reason.event.message.startswith(COMBINED)
    assert other_pod is not None and not other_pod.event.message.startswith(COMBINED)


def test_an_objects_flood_is_dropped_past_the_burst_then_one_let_through_per_refill():
    correlator = Correlator()
    sent = [correlator.correlate(event("same"), T0) for _ in range(SPAM_BURST + 5)]
    assert sum(o is not None for o in sent) == SPAM_BURST
    assert correlator.correlate(event("same"), T0 + SPAM_REFILL / 2) is None
    assert correlator.correlate(event("same"), T0 + SPAM_REFILL) is not None
    assert correlator.correlate(event("same", key="default/web-2"), T0) is not None  # per object
