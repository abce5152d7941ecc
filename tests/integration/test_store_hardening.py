"""Redeliveries under races, malformed events and false replacements: the store refuses or
deduplicates them, and a batch still commits the units that are fine."""

from __future__ import annotations

import asyncio

import pytest

from shared.events.envelope import Metadata, NewEvent
from shared.policy.audit import LogEntry, replay
from shared.policy.counters import InvalidTransition
from shared.store.eventstore import NO_STREAM, Append, EventStore, InvalidEvent
from tests.factories import T0, applied, created, decided, live_nodes, new


async def seed(store: EventStore, *events) -> None:
    for event in events:
        await store.append(event.stream_id, None, [new(event)])


async def test_racing_redeliveries_of_a_reservation_return_the_same_positions(migrated_url: str):
    stores = [EventStore.connect(migrated_url) for _ in range(2)]
    try:
        await seed(stores[0], applied("p", {"nodes": "100"}))
        for i in range(10):
            event = new(created(f"c{i}", "p"))
            a, b = await asyncio.gather(*(s.append(event.stream_id, NO_STREAM, [event]) for s in stores))
            assert a == b
        assert (await stores[0].counters("p"))["p"].nodes == 10
    finally:
        for s in stores:
            await s.close()


async def test_the_same_unit_twice_in_one_batch_is_written_once(store: EventStore):
    await seed(store, applied("p", {"nodes": "5"}))
    event = new(created("a", "p"))
    unit = [Append(event.stream_id, NO_STREAM, [event])]
    first, second = await store.append_units([unit, unit])
    assert first == second
    assert (await store.counters("p"))["p"].nodes == 1


async def test_a_retried_reservation_is_recognised(store: EventStore):
    await seed(store, applied("p", {"nodes": "1"}))
    claim = created("a", "p")
    first = await store.reserve_launch([claim], occurred_at=T0, producer="scheduler-0")
    assert await store.reserve_launch([claim], occurred_at=T0, producer="scheduler-1") == first


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (
            NewEvent("nodeclaim-a", "NodeClaimCreated", {"nodeclaim": "a", "instance_types": []}, T0, Metadata("t")),
            "nodepool: Field required",
        ),
        (NewEvent("nodeclaim-a", "NodeClaimExploded", {}, T0, Metadata("t")), "unknown event type"),
        (new(created("b", "p")), "cannot be appended to stream nodeclaim-a"),
        (
            NewEvent("nodeclaim-a", "NodeClaimCreated", created("b", "p").payload(), T0, Metadata("t")),
            "NodeClaimCreated for nodeclaim-b cannot be appended to stream nodeclaim-a",
        ),
    ],
    ids=["missing-field", "unknown-type", "wrong-stream", "payload-of-another-stream"],
)
async def test_malformed_events_are_refused_and_change_nothing(store: EventStore, event, message):
    await seed(store, applied("p", {"nodes": "5"}))
    with pytest.raises(InvalidEvent, match=message):
        await store.append("nodeclaim-a", None, [event])
    assert await store.head_position() == 1


async def test_a_malformed_unit_does_not_sink_its_batch(store: EventStore):
    await seed(store, applied("p", {"nodes": "5"}))
    good = new(created("good", "p"))
    bad = NewEvent("nodeclaim-bad", "NodeClaimCreated", {"nodepool": "p", "nodeclaim": "bad"}, T0, Metadata("t"))
    ok, refused = await store.append_units(
        [[Append(good.stream_id, NO_STREAM, [good])], [Append(bad.stream_id, NO_STREAM, [bad])]]
    )
    assert isinstance(ok, list)
    assert isinstance(refused, InvalidEvent) and "instance_types" in str(refused)


async def test_only_planned_replacements_may_pass_a_soft_node_limit(store: EventStore):
    await seed(store, applied("p", {"nodes": "3"}, budgets=[{"nodes": "100%"}], mode="Soft"), *live_nodes("p", 3))
    with pytest.raises(InvalidTransition, match="no live decision"):
        await store.reserve_launch([created("sneaky", "p", replacement_for="made-up")], occurred_at=T0, producer="t")
    decision = decided("d", "p", "Drifted", ["p-n0"], replacements=["r0"])
    await store.reserve_disruption(decision, [created("r0", "p", replacement_for="d")], occurred_at=T0, producer="t")
    assert (await store.counters("p"))["p"].nodes == 4  # Soft: the planned replacement passes the limit
    with pytest.raises(InvalidTransition, match="no live decision"):
        await store.reserve_launch([created("r1", "p", replacement_for="d")], occurred_at=T0, producer="t")


def test_the_audit_reports_malformed_and_unplaced_events():
    log = [
        LogEntry(1, "nodepool-p", "NodePoolApplied", applied("p").payload(), T0),
        LogEntry(2, "nodeclaim-x", "NodeClaimCreated", {"nodeclaim": "x"}, T0),
        LogEntry(3, "nodeclaim-y", "NodeClaimCreated", {"nodeclaim": "y", "nodepool": "p"}, T0),
        LogEntry(4, "nodeclaim-z", "NodeClaimLaunched", ["not", "a", "dict"], T0),
    ]
    out = replay(log)
    assert [(v.position, v.rule) for v in out.violations] == [(2, "payload"), (3, "payload"), (4, "payload")]
