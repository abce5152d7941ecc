"""Projection consumers over a real NATS JetStream and PostgreSQL: every replica, each position
once, every message checked against the store, gaps filled from it, a restart resumes."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from shared.bus.connection import BusSettings
from shared.bus.dead import read_dead_letters
from shared.bus.names import BusNames
from shared.bus.projection import ProjectionConsumer
from shared.bus.relay import OutboxRelay
from shared.bus.service import ServiceShell
from shared.bus.streams import ensure_stream
from shared.events import contracts as c
from shared.events.envelope import NewEvent, RecordedEvent
from shared.store.eventstore import EventStore, unit
from shared.store.migrate import upgrade
from tests.factories import T0
from tests.integration.consumers import (
    Running,
    admin,
    envelope,
    filled,
    pods,
    projection,
    publish_as_relay,
    until,
)

pytestmark = pytest.mark.timeout(120)


# --- projection consumers -------------------------------------------------------------------------


async def named_pods(store: EventStore, prefix: str, count: int) -> None:
    """PodPending facts whose event ids are the same in every store (as a replayed scenario's are)."""
    units = []
    for i in range(count):
        fact = c.PodPending(namespace="default", name=f"{prefix}-{i}", requests={"cpu": "1"})
        event_id = uuid.uuid5(uuid.NAMESPACE_URL, f"pod-{i}")
        units.append(
            unit(fact.stream_id, None, [NewEvent.of(fact, occurred_at=T0, producer="test", event_id=event_id)])
        )
    await store.append_units(units)


async def test_a_stream_that_outlived_its_database_feeds_the_new_store_its_own_events_only(
    store: EventStore, bus: BusSettings, temporary_database
):
    """The database is replaced and the deployment's stream kept: the old store's messages are
    dead-lettered as of an unknown store (never applied at the new store's positions), and the new
    store's events, with the same ids, are not dropped by JetStream as duplicates of the old ones."""
    nc = await admin(bus)
    names: list[str] = []
    shell = ServiceShell("scheduler", bus)
    consumer = ProjectionConsumer(shell, store, lambda e: names.append(e.data["name"]))
    running = Running(shell)
    try:
        await until(lambda: shell.started.is_set())
        async with temporary_database() as old_url:
            await upgrade(old_url)
            old = EventStore.connect(old_url, pool_size=2)
            try:
                await named_pods(old, "old", 5)
                assert await OutboxRelay(old, nc.jetstream(), bus.names).drain() == 5
            finally:
                await old.close()
        await named_pods(store, "new", 5)
        relay = OutboxRelay(store, nc.jetstream(), bus.names)
        assert await relay.drain() == 5 and relay.impostors == 0
        await until(lambda: consumer.position == 5)
        await until(lambda: outcome(shell, consumer, "dead") == 5)
        assert names == [f"new-{i}" for i in range(5)]
        letters = await read_dead_letters(nc.jetstream(), bus.names, "scheduler")
        assert len(letters) == 5 and all("an unknown store" in d.reason for d in letters)
    finally:
        await running.stop()
        await nc.close()


def outcome(shell: ServiceShell, consumer: ProjectionConsumer, what: str) -> float:
    labels = {"service": shell.name, "consumer": consumer.name, "outcome": what}
    return shell.registry.get_sample_value("nodewright_bus_messages_total", labels) or 0.0


async def test_a_consumer_started_after_10000_events_catches_up_then_follows(store: EventStore, bus: BusSettings):
    nc = await admin(bus)
    relay = OutboxRelay(store, nc.jetstream(), bus.names)
    before = await pods(store, 10_000)
    await relay.drain()
    running, consumer, seen = await projection(store, bus)
    try:
        assert seen.positions == before  # from the store, to the relay's checkpoint
        after = await pods(store, 300, start=10_000)
        await relay.drain()
        await until(lambda: consumer.position == after[-1])
        assert seen.positions == before + after  # each once, in order
        assert len(before) <= filled(consumer) < len(before) + len(after)  # the rest came by the bus
    finally:
        await running.stop()
        await nc.close()


async def test_a_message_delivered_three_times_is_applied_once(store: EventStore, bus: BusSettings):
    """Three copies on the stream (as relays publishing it once the duplicate window passed)."""
    nc = await admin(bus, duplicate_window=0.1)
    running, consumer, seen = await projection(store, bus)
    try:
        (position,) = await pods(store, 1)
        (event,) = await store.read_stream("pod-default/web-0")
        for _ in range(3):
            await publish_as_relay(nc, bus.names, store, event)
            await asyncio.sleep(0.25)
        await until(lambda: consumer.position == position)
        await asyncio.sleep(0.3)
        assert seen.positions == [position]
        samples = running.shell.outcomes.collect()[0].samples
        outcomes = {s.labels["outcome"]: s.value for s in samples if s.name.endswith("_total")}
        assert outcomes.get("handled") == 1 and outcomes.get("skipped") == 2
    finally:
        await running.stop()
        await nc.close()


async def test_a_gap_in_the_positions_is_filled_from_the_store(store: EventStore, bus: BusSettings):
    """Positions the bus never brought here (published before the subscription, or lost) come
    from the store as soon as a later one arrives."""
    nc = await admin(bus)
    running, consumer, seen = await projection(store, bus)
    try:
        positions = await pods(store, 5)
        last = (await store.read_stream("pod-default/web-4"))[0]
        await publish_as_relay(nc, bus.names, store, last)  # only the fifth travels
        await until(lambda: consumer.position == positions[-1])
        assert seen.positions == positions
    finally:
        await running.stop()
        await nc.close()


async def test_a_restarted_replica_resumes_without_a_gap_or_a_second_application(store: EventStore, bus: BusSettings):
    nc = await admin(bus)
    relay = OutboxRelay(store, nc.jetstream(), bus.names)
    first = await pods(store, 200)
    await relay.drain()
    running, consumer, seen = await projection(store, bus)
    await until(lambda: consumer.position == first[-1])
    await running.stop()
    later = await pods(store, 200, start=200)
    await relay.drain()  # published while no replica runs
    again, consumer, seen = await projection(store, bus)
    try:
        more = await pods(store, 50, start=400)
        await relay.drain()
        await until(lambda: consumer.position == more[-1])
        assert seen.positions == first + later + more
    finally:
        await again.stop()
        await nc.close()


async def test_messages_that_are_not_what_they_say_go_to_the_dead_letters(store: EventStore, bus: BusSettings):
    """Each forgery is checked against the store and dead-lettered with its reason; the real
    events are applied, each once, in order, and nothing is skipped to reach a forged position."""
    nc = await admin(bus)
    running, consumer, seen = await projection(store, bus, validate={"PodPending"})
    try:
        positions = await pods(store, 3)
        events = [e async for page in store.read_all() for e in page]

        def forged(**changes) -> RecordedEvent:  # an id of its own: JetStream keeps it beside the real one
            return dataclasses.replace(events[0], event_id=uuid.uuid4(), **changes)

        await publish_as_relay(nc, bus.names, store, forged(), subject=bus.names.event_subject("node-x", "NodeDeleted"))
        await publish_as_relay(nc, bus.names, store, forged(), body=b"{not json")
        collides = forged(data={"namespace": "default", "name": "evil", "requests": {"cpu": "1"}})
        await publish_as_relay(nc, bus.names, store, collides)  # at a real event's position
        moved = forged()
        await publish_as_relay(nc, bus.names, store, moved, body=envelope(moved, position=99))
        await publish_as_relay(nc, bus.names, store, forged(position=1000))  # far past the head
        await publish_as_relay(nc, bus.names, store, forged(position=2), store_id="another-store")
        for event in events:
            await publish_as_relay(nc, bus.names, store, event)
        await until(lambda: consumer.position == positions[-1])
        await until(lambda: outcome(running.shell, consumer, "dead") == 6)
        more = await pods(store, 2, start=3)  # the consumer goes on with the real events after them
        for event in [e async for page in store.read_all(positions[-1]) for e in page]:
            await publish_as_relay(nc, bus.names, store, event)
        await until(lambda: consumer.position == more[-1])
        assert seen.positions == positions + more
        letters = await read_dead_letters(nc.jetstream(), bus.names, "scheduler")
        reasons = [d.reason for d in letters]
        assert len(reasons) == 6, reasons
        expected = [
            "does not match the event",
            "not JSON",
            f"position {positions[0]} holds another event in the store (PodPending",
            "Nodewright-Position",
            "position 1000 is beyond the store's head (3)",
            "an unknown store",
        ]  # each forgery's letter; two sent back to back may be dead-lettered in either order
        assert sorted(next(i for i, e in enumerate(expected) if e in r) for r in reasons) == list(range(6)), reasons
        assert all(d.service == "scheduler" for d in letters)
        listed = await asyncio.to_thread(dead_command, bus, "--service", "scheduler", "--output", "json")
        assert [d["reason"] for d in json.loads(listed)] == reasons
        assert "no dead letters" in await asyncio.to_thread(dead_command, bus, "--service", "termination")
        assert "does not match the event" in await asyncio.to_thread(dead_command, bus)
    finally:
        await running.stop()
        await nc.close()


async def test_an_event_the_projection_cannot_apply_goes_to_the_dead_letters_after_its_tries(
    store: EventStore, bus: BusSettings
):
    """The projection's own failure (its assertion, a bug) is not swallowed: tried max_deliver
    times, then dead-lettered and counted, and the events after it are applied."""
    nc = await admin(bus)
    relay = OutboxRelay(store, nc.jetstream(), bus.names)
    running, consumer, seen = await projection(store, bus, poison=2, max_deliver=3)
    try:
        positions = await pods(store, 4)
        await relay.drain()
        await until(lambda: consumer.position == positions[-1])
        assert seen.positions == [positions[0], *positions[2:]]
        assert outcome(running.shell, consumer, "failed") == 3 and outcome(running.shell, consumer, "dead") == 1
        (letter,) = await read_dead_letters(nc.jetstream(), bus.names, "scheduler")
        assert letter.position == positions[1] and "the projection failed 3 times" in letter.reason
        assert "a bug in the projection" in letter.reason
    finally:
        await running.stop()
        await nc.close()


def dead_command(bus: BusSettings, *args: str) -> str:
    """`nodewright events dead ...` as a user runs it, on this test's deployment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEWRIGHT_")}
    env |= {"NODEWRIGHT_NATS_URL": bus.url, "NODEWRIGHT_DEPLOYMENT": bus.names.deployment}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "nodewright"), "events", "dead", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_events_whose_messages_were_lost_come_from_the_store_at_the_next_tick(
    store: EventStore, bus: BusSettings
):
    """The relay's checkpoint moved past events that never reached this subscription (published
    elsewhere here, as messages a plain subscription missed): the tick folds them in."""
    nc = await admin(bus)
    running, consumer, seen = await projection(store, bus)
    try:
        elsewhere = BusNames(f"{bus.names.deployment}x")
        await ensure_stream(nc.jetstream(), elsewhere)
        first = await pods(store, 20)
        await OutboxRelay(store, nc.jetstream(), elsewhere).drain()
        await until(lambda: consumer.position == first[-1], timeout=20)
        assert seen.positions == first and filled(consumer) == len(first)
    finally:
        await running.stop()
        await nc.jetstream().delete_stream(elsewhere.stream)
        await nc.close()
