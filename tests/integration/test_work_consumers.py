"""Work consumers over a real NATS JetStream and PostgreSQL (replicas share the work, redelivery,
dead letters, every message checked against the store); and the shell's health, readiness and
metrics."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections import Counter

import aiohttp
import nats
import pytest

from shared.bus.connection import BusSettings
from shared.bus.dead import read_dead_letters
from shared.bus.relay import OutboxRelay
from shared.bus.service import ServiceShell
from shared.bus.work import WorkConsumer
from shared.events import contracts as c
from shared.events.envelope import NewEvent
from shared.store.eventstore import EventStore, unit
from tests.factories import T0
from tests.integration.consumers import (
    Running,
    admin,
    pods,
    publish_as_relay,
    until,
)

pytestmark = pytest.mark.timeout(120)


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
