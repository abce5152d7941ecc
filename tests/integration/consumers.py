"""What the consumer tests share: a projection that records what it got, a shell run in a task,
the admin that sets a deployment up, and a relay's publishing, or a forger's in its name."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import nats
from nats.aio.client import Client

from shared.bus.connection import BusSettings
from shared.bus.names import MSG_ID, POSITION, STORE, BusNames
from shared.bus.projection import ProjectionConsumer
from shared.bus.service import ServiceShell
from shared.bus.setup import ensure_work_consumer
from shared.bus.streams import ensure_stream
from shared.bus.topology import Work
from shared.events import contracts as c
from shared.events.envelope import NewEvent, RecordedEvent
from shared.store.eventstore import EventStore, unit
from tests.factories import T0


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
