"""Each service connects as its own NATS user and may publish only what it owns; nobody is
anonymous. Against an embedded nats-server started with the generated configuration (always:
an open server given by URL could not show a refusal)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import nats.errors
import pytest

from services.sim.journal import Journal, Step
from services.sim.service import SimService
from shared.adapters.sim import SimClient
from shared.api.scenario import parse_scenario
from shared.bus.connection import BusSettings
from shared.bus.dead import read_dead_letters
from shared.bus.identity import SERVICES, permissions
from shared.bus.names import MSG_ID, POSITION, BusNames
from shared.bus.projection import ProjectionConsumer
from shared.bus.relay import OutboxRelay
from shared.bus.service import ServiceShell
from shared.bus.streams import ensure_stream, forget_sim_world
from shared.clock import ManualClock
from shared.events import contracts as c
from shared.events.envelope import NewEvent
from shared.store.eventstore import EventStore
from tests.factories import T0, scenario_doc
from tests.integration.conftest import SessionBus, secured_nats

pytestmark = pytest.mark.timeout(90)
NAMES = BusNames()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionBus]:
    server, bus = secured_nats(tmp_path_factory.mktemp("secured-nats"))
    with server:
        probe = server.probe or {}
        bus.url = f"nats://{probe['user']}:{probe['password']}@{server.host}:{server.port}"
        yield bus


@pytest.fixture
async def stream(secured: SessionBus) -> AsyncIterator[BusSettings]:
    """The default deployment's stream, made (afresh) by the relay, as the relay."""
    relay = secured.acting_as("relay")
    nc = await relay.connect("relay", persistent=False)
    js = nc.jetstream()
    admin = await nats.connect(secured.url)
    with contextlib.suppress(nats.js.errors.NotFoundError):
        await admin.jetstream().delete_stream(NAMES.stream)
    await ensure_stream(js, NAMES)
    yield relay
    await nc.close()
    await admin.close()


async def as_service(bus: BusSettings, service: str) -> tuple[nats.aio.client.Client, list[str]]:
    """A connection as `service`, and what the server says to it (permission violations arrive
    as asynchronous errors)."""
    said: list[str] = []

    async def heard(error: Exception) -> None:
        said.append(str(error))

    options = {**bus.nats_options(service, persistent=False), "error_cb": heard}
    return await nats.connect(**options), said


async def messages(secured: SessionBus) -> int:
    admin = await nats.connect(secured.url)
    try:
        return (await admin.jetstream().stream_info(NAMES.stream)).state.messages
    finally:
        await admin.close()


async def test_nobody_anonymous(secured: SessionBus):
    with pytest.raises(nats.errors.Error):
        await nats.connect(secured.plain_url, max_reconnect_attempts=0, allow_reconnect=False)
    wrong = BusSettings(secured.plain_url, NAMES, user="default-relay", password="not-its-password")
    with pytest.raises(nats.errors.Error):
        await wrong.connect("relay", persistent=False)


@pytest.mark.parametrize("service", [s for s in SERVICES if s != "relay"])
async def test_only_the_relay_may_publish_events(secured: SessionBus, stream: BusSettings, service: str):
    before = await messages(secured)
    nc, said = await as_service(secured.acting_as(service), service)
    try:
        fact = c.PodPending(namespace="default", name="forged")
        with pytest.raises((nats.errors.Error, TimeoutError)):
            await nc.jetstream().publish(
                NAMES.event_subject(fact.stream_id, fact.TYPE),
                b"{}",
                headers={MSG_ID: NAMES.msg_id("forged", "any-store")},
                stream=NAMES.stream,
                timeout=1.0,
            )
        await asyncio.sleep(0.2)
        assert any("permissions violation for publish" in e.lower() for e in said), said
    finally:
        await nc.close()
    assert await messages(secured) == before


async def test_the_relay_publishes_the_store_as_itself(secured: SessionBus, stream: BusSettings, store: EventStore):
    fact = c.PodPending(namespace="default", name="web-1")
    await store.append(fact.stream_id, None, [NewEvent.of(fact, occurred_at=T0, producer="test")])
    nc = await stream.connect("relay", persistent=False)
    try:
        assert await OutboxRelay(store, nc.jetstream(), NAMES).drain() == 1
    finally:
        await nc.close()
    assert await messages(secured) == 1


async def test_a_forged_cloud_create_is_refused_and_the_schedulers_goes_through(secured: SessionBus):
    document = scenario_doc("t", duration="1h", cloud={"instanceTypes": 5})
    sim = SimService(parse_scenario(document), ManualClock(T0), secured.acting_as("sim"))
    stopping = asyncio.Event()
    running = asyncio.create_task(sim.run(stopping))
    try:
        await asyncio.wait_for(sim.shell.started.wait(), 20)
        forger = await SimClient.connect(secured.acting_as("watcher"), "watcher")
        forger.timeout = 1.0
        scheduler = await SimClient.connect(secured.acting_as("scheduler"), "scheduler")
        spec = {"nodeclaim": "c1", "nodepool": "p", "requirements": []}
        try:
            with pytest.raises((nats.errors.Error, TimeoutError)):  # the server refuses to carry it
                await forger.create(spec)
            assert sim.world.cloud.instances == {}
            assert await forger.snapshot() is not None  # a read it is allowed
            instance = await scheduler.create(spec)
            assert instance["nodeclaim"] == "c1" and len(sim.world.cloud.instances) == 1
        finally:
            await forger.close()
            await scheduler.close()
    finally:
        stopping.set()
        await running


async def test_an_event_on_the_wrong_subject_is_dead_lettered(
    secured: SessionBus, stream: BusSettings, store: EventStore
):
    """Published with the relay's own credentials, but on another type's subject: the
    scheduler's projection (as the scheduler) refuses it and goes on."""
    fact = c.PodPending(namespace="default", name="web-1")
    (position,) = await store.append(fact.stream_id, None, [NewEvent.of(fact, occurred_at=T0, producer="test")])
    (event,) = await store.read_stream(fact.stream_id)
    shell = ServiceShell("scheduler", secured.acting_as("scheduler"))
    seen: list[int] = []
    consumer = ProjectionConsumer(shell, store, lambda e: seen.append(e.position))
    stopping = asyncio.Event()
    running = asyncio.create_task(shell.run(stopping))
    nc = await stream.connect("relay", persistent=False)
    try:
        await asyncio.wait_for(shell.started.wait(), 20)
        await nc.jetstream().publish(
            NAMES.event_subject("node-x", "NodeDeleted"),
            json.dumps(event.to_json_dict()).encode(),
            headers={MSG_ID: NAMES.msg_id("another", await store.identity()), POSITION: str(position)},
            stream=NAMES.stream,
        )
        await OutboxRelay(store, nc.jetstream(), NAMES).drain()
        for _ in range(200):
            if consumer.position == position:
                break
            await asyncio.sleep(0.05)
        assert seen == [position]
        letters = await read_dead_letters(nc.jetstream(), NAMES)
        assert [d.service for d in letters] == ["scheduler"] and "does not match the event" in letters[0].reason
    finally:
        await nc.close()
        stopping.set()
        await running


def test_each_service_may_send_only_its_own_sim_requests():
    """The table itself, read as a reviewer would: who acts on the world."""
    sends = {s: {p for p in permissions(NAMES, s).publish if ".sim." in p} for s in SERVICES}
    assert sends["relay"] == sends["cli"] == sends["sim"] - {NAMES.sim_watch, NAMES.sim_journal("*")} == set()
    assert NAMES.sim("cloud.create") in sends["scheduler"]
    assert not any("cloud.create" in p or "cluster.evict" in p for p in sends["watcher"] | sends["disruption"])
    assert NAMES.sim("cluster.evict") in sends["termination"] and NAMES.sim("cloud.delete") in sends["termination"]
    publishes_events = [s for s in SERVICES if NAMES.events in permissions(NAMES, s).publish]
    assert publishes_events == ["relay"]


def test_the_generated_configuration_leaves_out_a_user_without_a_password(tmp_path: Path):
    from shared.bus.identity import generate, server_config

    identities = generate([NAMES])
    del identities["default-cli"]
    assert "default-cli" not in server_config([NAMES], identities)
    assert "default-relay" in server_config([NAMES], identities)


async def test_the_sim_keeps_reads_and_purges_its_journal_as_itself(secured: SessionBus):
    """Everything the journal does, as the sim's user: the stream made, steps written and read
    back by a consumer of its own (a restart's replay), and `up`'s purge at the end of a run."""
    bus = secured.acting_as("sim")
    nc, said = await as_service(bus, "sim")
    try:
        js = nc.jetstream()
        inbox = f"{NAMES.inbox('sim')}.".encode()
        first = Journal(js, NAMES, "identity", inbox=inbox)
        await first.ensure()
        await first.write([Step(T0), Step(T0, "cloud.create", {"nodeclaim": "a"})])
        again = Journal(js, NAMES, "identity", inbox=inbox)
        assert [s.request for s in await again.read()] == [None, "cloud.create"]
        await forget_sim_world(bus, "identity")
        assert await Journal(js, NAMES, "identity", inbox=inbox).read() == []
        assert said == []
    finally:
        await nc.close()
