"""The two ways to consume the bus, over a real NATS JetStream and PostgreSQL: projection
consumers (every replica, each position once, gaps filled from the store, a restart resumes)
and work consumers (replicas share the work, redelivery, dead letters); and the shell's health,
readiness and metrics."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import aiohttp
import nats
import pytest
from nats.aio.client import Client

from shared.bus.connection import BusSettings
from shared.bus.dead import read_dead_letters
from shared.bus.names import MSG_ID, POSITION, STORE, BusNames
from shared.bus.projection import ProjectionConsumer
from shared.bus.relay import OutboxRelay
from shared.bus.service import ServiceShell
from shared.bus.setup import ensure_work_consumer
from shared.bus.streams import ensure_stream
from shared.bus.topology import Work
from shared.bus.work import WorkConsumer
from shared.events import contracts as c
from shared.events.envelope import NewEvent, RecordedEvent
from shared.store.eventstore import EventStore, unit
from shared.store.migrate import upgrade
from tests.factories import T0

pytestmark = pytest.mark.timeout(120)


class Projected:
    """A projection that records what it was given, and fails loudly on an event out of order."""

    def __init__(self, poison: int | None = None) -> None:
        self.positions: list[int] = []
        self.poison = poison

    def __call__(self, event: RecordedEvent) -> None:
        if event.position == self.poison:
            raise ValueError("a bug in the projection")
        assert not self.positions or event.position > self.positions[-1], (self.positions[-1], event.position)
        self.positions.append(event.position)


async def pods(store: EventStore, count: int, start: int = 0, batch: int = 500) -> list[int]:
    """`count` PodPending facts, appended `batch` at a time; their positions."""
    out: list[int] = []
    for first in range(start, start + count, batch):
        units = []
        for i in range(first, min(first + batch, start + count)):
            fact = c.PodPending(namespace="default", name=f"web-{i}", requests={"cpu": "1"})
            units.append(unit(fact.stream_id, None, [NewEvent.of(fact, occurred_at=T0, producer="test")]))
        for result in await store.append_units(units):
            out += result
    return out


INITIALIZED = Work("termination", "NodeInitialized")
"""The work consumer these tests provision, as `nodewright bus setup` does the deployment's own."""


async def admin(bus: BusSettings, duplicate_window: float = 600.0, ack_wait: float = 30.0) -> Client:
    nc = await nats.connect(bus.url)
    await ensure_stream(nc.jetstream(), bus.names, duplicate_window=duplicate_window)
    await ensure_work_consumer(nc.jetstream(), bus.names, INITIALIZED, ack_wait)
    return nc


async def until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


class Running:
    """A shell run in a task until `stop`."""

    def __init__(self, shell: ServiceShell) -> None:
        self.shell, self.stopping = shell, asyncio.Event()
        self.task = asyncio.create_task(shell.run(self.stopping))

    async def stop(self) -> None:
        self.stopping.set()
        await asyncio.wait_for(self.task, 30)


async def projection(store: EventStore, bus: BusSettings, **kwargs) -> tuple[Running, ProjectionConsumer, Projected]:
    seen = Projected(kwargs.pop("poison", None))
    shell = ServiceShell("scheduler", bus)
    consumer = ProjectionConsumer(shell, store, seen, **kwargs)
    running = Running(shell)
    await until(lambda: shell.started.is_set())
    return running, consumer, seen


def filled(consumer: ProjectionConsumer) -> float:
    """Events the consumer read from the store rather than the bus."""
    value = consumer.shell.registry.get_sample_value(
        "nodewright_projection_events_filled_total", {"consumer": consumer.name}
    )
    return value or 0.0


def envelope(event: RecordedEvent, **changes) -> bytes:
    return json.dumps({**event.to_json_dict(), **changes}).encode()


async def publish_as_relay(
    nc: Client,
    names: BusNames,
    store: EventStore,
    event: RecordedEvent,
    *,
    subject: str | None = None,
    body=None,
    store_id: str | None = None,
):
    """Put an event on the stream as the relay would (or something else in its name)."""
    identity = store_id or await store.identity()
    await nc.jetstream().publish(
        subject or names.event_subject(event.stream_id, event.type),
        body if body is not None else envelope(event),
        headers={MSG_ID: names.msg_id(event.event_id, identity), POSITION: str(event.position), STORE: identity},
        stream=names.stream,
    )


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
        assert "does not match the event" in reasons[0]
        assert "not JSON" in reasons[1]
        assert f"position {positions[0]} holds another event in the store (PodPending" in reasons[2]
        assert "Nodewright-Position" in reasons[3]
        assert "position 1000 is beyond the store's head (3)" in reasons[4]
        assert "an unknown store" in reasons[5]
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


# --- work consumers --------------------------------------------------------------------------------


async def initialized_events(store: EventStore, count: int) -> None:
    units = []
    for i in range(count):
        fact = c.NodeInitialized(node=f"node-{i}")
        units.append(unit(fact.stream_id, None, [NewEvent.of(fact, occurred_at=T0, producer="test")]))
    await store.append_units(units)


async def test_replicas_share_the_work_and_each_message_is_handled_once(store: EventStore, bus: BusSettings):
    nc = await admin(bus)
    seen: Counter[tuple[int, int]] = Counter()
    replicas = []
    for index in range(3):
        shell = ServiceShell("termination", bus)

        async def handle(recorded, event, index=index):
            await asyncio.sleep(0.01)
            seen[(index, recorded.position)] += 1

        WorkConsumer(shell, "NodeInitialized", handle, store=store)
        replicas.append(Running(shell))
    try:
        await pods(store, 20)  # other types: not this consumer's
        await initialized_events(store, 60)
        await OutboxRelay(store, nc.jetstream(), bus.names).drain()
        await until(lambda: sum(seen.values()) >= 60)
        await asyncio.sleep(0.5)
        positions = Counter(position for _, position in seen.elements())
        assert len(positions) == 60 and set(positions.values()) == {1}
        assert len({index for index, _ in seen}) >= 2  # the work was shared
        info = await nc.jetstream().consumer_info(bus.names.stream, "termination-NodeInitialized")
        assert info.num_ack_pending == 0 and info.num_pending == 0
    finally:
        for running in replicas:
            await running.stop()
        await nc.close()


async def test_a_message_whose_replica_died_goes_to_another(store: EventStore, bus: BusSettings):
    nc = await admin(bus, ack_wait=1.0)
    took: list[str] = []
    hang = asyncio.Event()

    async def dies(recorded, event):
        took.append("first")
        await hang.wait()  # never acknowledges: as a replica that died mid-work

    first = ServiceShell("termination", bus)
    WorkConsumer(first, "NodeInitialized", dies, store=store, ack_wait=1.0)
    running_first = Running(first)
    await until(lambda: first.started.is_set())
    await initialized_events(store, 1)
    await OutboxRelay(store, nc.jetstream(), bus.names).drain()
    await until(lambda: took == ["first"])
    await running_first.stop()

    async def finishes(recorded, event):
        took.append("second")

    second = ServiceShell("termination", bus)
    WorkConsumer(second, "NodeInitialized", finishes, store=store, ack_wait=1.0)
    running_second = Running(second)
    try:
        await until(lambda: "second" in took, timeout=15)
    finally:
        hang.set()
        await running_second.stop()
        await nc.close()


async def test_a_redelivered_message_has_one_effect_with_an_idempotent_handler(store: EventStore, bus: BusSettings):
    """Delivered three times (it fails twice after doing its work): one event in the log."""
    nc = await admin(bus)
    attempts = Counter()

    async def record(recorded, event):
        attempts[recorded.position] += 1
        fact = c.NodeDeleted(node=event.node)
        new = NewEvent.of(
            fact, occurred_at=T0, producer="test", event_id=uuid.uuid5(uuid.NAMESPACE_URL, recorded.stream_id)
        )
        await store.append(fact.stream_id, None, [new])
        if attempts[recorded.position] < 3:
            raise RuntimeError("lost the answer after the work was done")

    shell = ServiceShell("termination", bus)
    WorkConsumer(shell, "NodeInitialized", record, store=store, max_deliver=5)
    running = Running(shell)
    try:
        await initialized_events(store, 1)
        await OutboxRelay(store, nc.jetstream(), bus.names).drain()
        await until(lambda: sum(attempts.values()) == 3, timeout=20)
        assert [e.type for e in await store.read_stream("node-node-0")] == ["NodeInitialized", "NodeDeleted"]
    finally:
        await running.stop()
        await nc.close()


async def test_a_message_that_keeps_failing_ends_in_the_dead_letters_and_the_consumer_goes_on(
    store: EventStore, bus: BusSettings
):
    nc = await admin(bus)
    attempts: Counter[str] = Counter()

    async def fails_on_the_first(recorded, event):
        attempts[event.node] += 1
        if event.node == "node-0":
            raise RuntimeError("a bug")

    shell = ServiceShell("termination", bus)
    WorkConsumer(shell, "NodeInitialized", fails_on_the_first, store=store, max_deliver=3, fetch=1)
    running = Running(shell)
    try:
        await initialized_events(store, 3)
        await OutboxRelay(store, nc.jetstream(), bus.names).drain()
        await until(lambda: attempts["node-0"] == 3 and attempts["node-1"] == 1 and attempts["node-2"] == 1)
        for _ in range(100):
            letters = await read_dead_letters(nc.jetstream(), bus.names, "termination")
            if letters:
                break
            await asyncio.sleep(0.05)
        (letter,) = letters
        assert "failed 3 times" in letter.reason and "a bug" in letter.reason
        assert letter.event_type == "NodeInitialized"
    finally:
        await running.stop()
        await nc.close()


async def test_a_work_message_the_store_does_not_hold_goes_to_the_dead_letters_unhandled(
    store: EventStore, bus: BusSettings
):
    """Beyond the store's head, another event at a real position, an unknown store: refused
    before the handler runs; the real event is handled, as the store holds it."""
    nc = await admin(bus)
    handled: list[str] = []

    async def handle(recorded, event):
        handled.append(event.node)

    shell = ServiceShell("termination", bus)
    WorkConsumer(shell, "NodeInitialized", handle, store=store, fetch=1)
    running = Running(shell)
    try:
        await initialized_events(store, 1)
        (real,) = [e async for page in store.read_all() for e in page]
        other = dataclasses.replace(real, event_id=uuid.uuid4(), data={"node": "node-evil"})
        far = dataclasses.replace(other, position=500, event_id=uuid.uuid4())  # each id its own: no de-duplication
        await publish_as_relay(nc, bus.names, store, far)
        await publish_as_relay(nc, bus.names, store, other)
        await publish_as_relay(nc, bus.names, store, dataclasses.replace(other, position=2), store_id="elsewhere")
        await publish_as_relay(nc, bus.names, store, real)
        await until(lambda: handled == ["node-0"])
        for _ in range(100):
            letters = await read_dead_letters(nc.jetstream(), bus.names, "termination")
            if len(letters) == 3:
                break
            await asyncio.sleep(0.05)
        reasons = [d.reason for d in letters]
        assert "position 500 is beyond the store's head (1)" in reasons[0]
        assert "position 1 holds another event in the store (NodeInitialized" in reasons[1]
        assert "an unknown store" in reasons[2]
        await asyncio.sleep(0.3)
        assert handled == ["node-0"]
    finally:
        await running.stop()
        await nc.close()


async def test_a_work_consumer_not_set_up_is_not_made_by_the_service(store: EventStore, bus: BusSettings):
    """The service binds to its pull consumer only; without `nodewright bus setup` it says so
    on /readyz and makes nothing (its user may not)."""
    shell = ServiceShell("termination", bus)
    WorkConsumer(shell, "NodeClaimLaunched", lambda recorded, event: asyncio.sleep(0), store=store)
    running = Running(shell)
    try:
        await until(lambda: "run `nodewright bus setup`" in (shell.starting or ""))
        status, text = await _get(shell, "/readyz")
        assert status == 503 and "consumer termination-NodeClaimLaunched" in json.loads(text)["reasons"][0]
        nc = await nats.connect(bus.url)
        try:
            with pytest.raises(nats.js.errors.NotFoundError):
                await nc.jetstream().consumer_info(bus.names.stream, "termination-NodeClaimLaunched")
        finally:
            await nc.close()
    finally:
        await running.stop()


# --- the shell ----------------------------------------------------------------------------------------


async def test_health_and_readiness_answer_on_the_services_own_port(bus: BusSettings):
    database_up = True

    async def database() -> str | None:
        return None if database_up else "PostgreSQL does not answer"

    shell = ServiceShell("sim", bus, readiness=[database])
    running = Running(shell)
    try:
        await until(lambda: shell.started.is_set())
        assert shell.port > 0
        assert (await _get(shell, "/healthz"))[0] == 200
        status, text = await _get(shell, "/readyz")
        assert status == 200 and json.loads(text)["ready"] is True
        database_up = False
        status, text = await _get(shell, "/readyz")
        assert status == 503 and json.loads(text)["reasons"] == ["PostgreSQL does not answer"]
        status, text = await _get(shell, "/metrics")
        assert status == 200 and "nodewright_bus_messages_total" in text
    finally:
        await running.stop()


async def _get(shell: ServiceShell, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{shell.port}{path}") as response:
        return response.status, await response.text()
