"""Each service connects as its own NATS user and may publish only what it owns; nobody is
anonymous; no service may make a stream or a consumer (only `setup` may), and the sim answers a
request only as its caller's own. Against an embedded nats-server started with the generated
configuration (always: an open server given by URL could not show a refusal)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import nats.errors
import orjson
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, RePublish, StreamConfig
from nats.js.errors import NotFoundError

from services.sim.journal import Journal, Step
from services.sim.service import SimService
from shared.adapters.sim import DELETE, SimClient
from shared.api.scenario import parse_scenario
from shared.bus.connection import BusSettings
from shared.bus.dead import read_dead_letters
from shared.bus.identity import SERVICES, permissions
from shared.bus.names import MSG_ID, POSITION, BusNames
from shared.bus.projection import ProjectionConsumer
from shared.bus.relay import OutboxRelay
from shared.bus.service import ServiceShell
from shared.bus.setup import provision
from shared.bus.streams import forget_sim_world, stream_config
from shared.bus.topology import SIM_CALLERS, WORK
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
    """The default deployment's streams (events, the sim's journal) and its work consumers, made
    afresh by the `setup` identity, as `nodewright bus setup` does; the relay's settings."""
    admin = await nats.connect(secured.url)
    for name in (NAMES.stream, NAMES.sim_journal_stream):
        with contextlib.suppress(NotFoundError):
            await admin.jetstream().delete_stream(name)
    nc = await secured.acting_as("setup").connect("setup", persistent=False)
    try:
        await provision(nc.jetstream(), NAMES)
    finally:
        await nc.close()
    yield secured.acting_as("relay")
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


ACTORS = [s for s in SERVICES if s != "setup"]
"""Every identity but `setup`: none may make, change or delete a stream or a consumer."""
SPEC = {"nodeclaim": "c1", "nodepool": "p", "requirements": []}


async def refused(call, said: list[str], what: str) -> None:
    """`call` never reaches the server's API: it fails (no answer comes), and the server says why."""
    before = len(said)
    with pytest.raises((nats.errors.Error, TimeoutError)):
        await call
    for _ in range(20):
        if len(said) > before:
            break
        await asyncio.sleep(0.05)
    assert any("permissions violation for publish" in e.lower() for e in said[before:]), (what, said)


@pytest.mark.parametrize("service", ACTORS)
async def test_no_service_may_make_a_consumer_or_a_stream(secured: SessionBus, stream: BusSettings, service: str):
    """A push consumer could have the server deliver to any subject, past the publish
    permissions: nobody but `setup` may make one, on either stream, ephemeral or named, nor make,
    change or delete a stream."""
    nc, said = await as_service(secured.acting_as(service), service)
    admin = await nats.connect(secured.url)
    try:
        js, seen = nc.jetstream(timeout=0.5), admin.jetstream()
        before = {s: (await seen.stream_info(s)).state.consumer_count for s in (NAMES.stream, NAMES.sim_journal_stream)}
        aimed = NAMES.sim_request("termination", DELETE)
        for name in before:
            push = ConsumerConfig(deliver_subject=aimed, ack_policy=AckPolicy.NONE)
            await refused(js.add_consumer(name, push), said, f"ephemeral push consumer on {name}")
            named = ConsumerConfig(name="evil", durable_name="evil", deliver_subject=f"{NAMES.inbox(service)}.x")
            await refused(js.add_consumer(name, named), said, f"durable push consumer on {name}")
            await refused(js.subscribe(NAMES.events, stream=name), said, f"push subscription on {name}")
        await refused(js.add_stream(StreamConfig(name="default_EVIL", subjects=["evil.>"])), said, "a new stream")
        await refused(js.add_stream(stream_config(NAMES)), said, "its deployment's stream again")
        await refused(js.update_stream(StreamConfig(name=NAMES.stream, subjects=["evil.>"])), said, "an update")
        await refused(js.delete_stream(NAMES.stream), said, "a delete")
        await refused(js.delete_stream(NAMES.sim_journal_stream), said, "the journal's delete")
        after = {s: (await seen.stream_info(s)).state.consumer_count for s in before}
        assert after == before
        assert (await seen.stream_info(NAMES.stream)).config.subjects == stream_config(NAMES).subjects
        with pytest.raises(NotFoundError):
            await seen.stream_info("default_EVIL")
    finally:
        await nc.close()
        await admin.close()


async def test_setup_makes_the_streams_and_the_pull_consumers(secured: SessionBus):
    """What no service may do, `setup` does: both streams, and each work consumer as a pull
    consumer (no deliver subject)."""
    admin = await nats.connect(secured.url)
    for name in (NAMES.stream, NAMES.sim_journal_stream):
        with contextlib.suppress(NotFoundError):
            await admin.jetstream().delete_stream(name)
    nc, said = await as_service(secured.acting_as("setup"), "setup")
    try:
        made = await provision(nc.jetstream(), NAMES)
        assert made.streams == (NAMES.stream, NAMES.sim_journal_stream)
        for work in WORK:
            info = await admin.jetstream().consumer_info(NAMES.stream, work.durable)
            assert info.config.deliver_subject is None and info.config.ack_policy == AckPolicy.EXPLICIT
        await provision(nc.jetstream(), NAMES)  # again: nothing to change, nothing refused
        assert said == []
    finally:
        await nc.close()
        await admin.close()


class RunningSim:
    """A sim on the secured server, as the sim's user, with a scheduler that launched one instance
    (a request of its own, answered) for the forgeries to aim at."""

    def __init__(self, secured: SessionBus) -> None:
        self.secured = secured
        self.sim = SimService(
            parse_scenario(scenario_doc("t", duration="1h", cloud={"instanceTypes": 5})),
            ManualClock(T0),
            secured.acting_as("sim"),
        )
        self.stopping = asyncio.Event()

    async def __aenter__(self) -> RunningSim:
        self.running = asyncio.create_task(self.sim.run(self.stopping))
        await asyncio.wait_for(self.sim.shell.started.wait(), 20)
        scheduler = await SimClient.connect(self.secured.acting_as("scheduler"), "scheduler")
        try:
            self.instance = (await scheduler.create(SPEC))["providerID"]
        finally:
            await scheduler.close()
        assert self.instances() == {self.instance}
        return self

    def instances(self) -> set[str]:
        return {i.provider_id for i in self.sim.world.cloud.running()}

    def refusals(self, caller: str, request: str, reason: str) -> float:
        labels = {"caller": caller, "request": request, "reason": reason}
        return self.sim.shell.registry.get_sample_value("nodewright_sim_requests_refused_total", labels) or 0.0

    async def refused(self, caller: str, request: str, reason: str, before: float) -> None:
        for _ in range(100):
            if self.refusals(caller, request, reason) > before:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the sim did not refuse {caller} {request} ({reason})")

    async def __aexit__(self, *exc: object) -> None:
        self.stopping.set()
        await self.running


async def test_a_service_sends_only_its_own_requests_on_its_own_subjects(secured: SessionBus, stream: BusSettings):
    """The server carries a request only on the sender's own subject, and only one SIM_CALLERS
    lets it send: the disruption may not delete an instance, neither as the termination nor as
    itself; the watcher may not launch one. The termination's own delete goes through."""
    async with RunningSim(secured) as running:
        for service, caller, request in [
            ("disruption", "termination", DELETE),
            ("disruption", "disruption", DELETE),
            ("watcher", "scheduler", "cloud.create"),
            ("watcher", "watcher", "cloud.create"),
        ]:
            nc, said = await as_service(secured.acting_as(service), service)
            try:
                forger = SimClient(nc, caller, NAMES, timeout=0.5)
                body = {"providerID": running.instance} if request == DELETE else SPEC
                await refused(forger.call(request, body), said, f"{service} as {caller}: {request}")
            finally:
                await nc.close()
        assert running.instances() == {running.instance}
        disruption = await SimClient.connect(secured.acting_as("disruption"), "disruption")
        termination = await SimClient.connect(secured.acting_as("termination"), "termination")
        try:
            assert [i["providerID"] for i in await disruption.list()] == [running.instance]  # a read it may send
            assert (await termination.delete(running.instance))["providerID"] == running.instance
        finally:
            await disruption.close()
            await termination.close()
        assert running.instances() == set()


async def test_the_sim_refuses_a_jetstream_delivery(secured: SessionBus, stream: BusSettings):
    """Whoever may make a push consumer (an admin here; no service may) can have the server
    deliver a stored `cloud.delete` onto the termination's subject, past every publish permission,
    or republish one there: the sim sees whose it is not, answers nothing and deletes nothing."""
    async with RunningSim(secured) as running:
        admin = await nats.connect(secured.url)
        js = admin.jetstream()
        aimed = NAMES.sim_request("termination", DELETE)
        body = orjson.dumps({"providerID": running.instance})
        try:
            await js.add_stream(StreamConfig(name="ATTACK", subjects=["attack.>"]))
            await js.add_stream(
                StreamConfig(name="REPUBLISH", subjects=["again"], republish=RePublish(src="again", dest=aimed))
            )
            delivered = running.refusals("termination", DELETE, "jetstream")
            await js.add_consumer("ATTACK", ConsumerConfig(deliver_subject=aimed, ack_policy=AckPolicy.EXPLICIT))
            await js.publish("attack.delete", body, stream="ATTACK")
            await running.refused("termination", DELETE, "jetstream", delivered)
            republished = running.refusals("termination", DELETE, "jetstream")
            await js.publish("again", body, stream="REPUBLISH")
            await running.refused("termination", DELETE, "jetstream", republished)
            await asyncio.sleep(0.3)
            assert running.instances() == {running.instance}
            assert (await js.stream_info("ATTACK")).state.messages == 1  # no ack either: the sim answered nothing
        finally:
            for name in ("ATTACK", "REPUBLISH"):
                with contextlib.suppress(NotFoundError):
                    await js.delete_stream(name)
            await admin.close()


async def test_the_sim_answers_only_the_callers_own_inbox(secured: SessionBus, stream: BusSettings):
    """A request on the termination's subject whose reply is another service's inbox (what a
    forwarded or replayed message would carry), or that wants no reply, is refused and not acted
    on; nothing is sent to the inbox named."""
    async with RunningSim(secured) as running:
        admin = await nats.connect(secured.url)
        body = orjson.dumps({"providerID": running.instance})
        aimed = NAMES.sim_request("termination", DELETE)
        try:
            elsewhere = f"{NAMES.inbox('disruption')}.x"
            answers = await admin.subscribe(elsewhere)
            for reply, reason in [
                (elsewhere, "foreign-inbox"),
                (f"{NAMES.inbox('termination')}x.y", "foreign-inbox"),
                ("", "no-reply"),
            ]:
                before = running.refusals("termination", DELETE, reason)
                await admin.publish(aimed, body, reply=reply)
                await running.refused("termination", DELETE, reason, before)
            with pytest.raises(TimeoutError):
                await answers.next_msg(timeout=0.3)
            assert running.instances() == {running.instance}
        finally:
            await admin.close()


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
    """The table itself, read as a reviewer would: who acts on the world, each on its own subjects;
    the sim listens to exactly those and may make no stream or consumer."""
    sends = {s: {p for p in permissions(NAMES, s).publish if ".sim." in p} for s in SERVICES}
    assert sends["relay"] == sends["cli"] == sends["setup"] == set()
    assert sends["sim"] == {NAMES.sim_journal("*")}
    for service in SERVICES:
        own = {NAMES.sim_request(service, r) for r in SIM_CALLERS.get(service, ())}
        assert sends[service] - {NAMES.sim_journal("*")} == own
    assert NAMES.sim_request("scheduler", "cloud.create") in sends["scheduler"]
    # it reads the cluster from the Kubernetes API, not the sim's bus; it asks the cloud only for the
    # instance types a NodeOverlay's status is resolved against
    assert sends["watcher"] == {NAMES.sim_request("watcher", "cloud.instance-types")}
    assert not any("cloud.create" in p for p in sends["disruption"])
    assert NAMES.sim_request("termination", "cloud.delete") in sends["termination"]
    assert not any(".cluster." in p for s in SERVICES for p in sends[s])  # the cluster is not on the bus
    heard = set(permissions(NAMES, "sim").subscribe) - {f"{NAMES.inbox('sim')}.>"}
    assert heard == {NAMES.sim_request(c, r) for c, asks in SIM_CALLERS.items() for r in asks}
    assert not any("CONSUMER" in p or "STREAM.CREATE" in p for p in permissions(NAMES, "sim").publish)
    publishes_events = [s for s in SERVICES if NAMES.events in permissions(NAMES, s).publish]
    assert publishes_events == ["relay"]


def test_the_generated_configuration_leaves_out_a_user_without_a_password(tmp_path: Path):
    from shared.bus.identity import generate, server_config

    identities = generate([NAMES])
    del identities["default-cli"]
    assert "default-cli" not in server_config([NAMES], identities)
    assert "default-relay" in server_config([NAMES], identities)


async def test_the_sim_keeps_reads_and_purges_its_journal_as_itself(secured: SessionBus, stream: BusSettings):
    """Everything the journal does, as the sim's user, on the stream `setup` made: steps written
    and read back without a consumer (a restart's replay), and `up`'s purge at the end of a run."""
    bus = secured.acting_as("sim")
    nc, said = await as_service(bus, "sim")
    try:
        js = nc.jetstream()
        first = Journal(js, NAMES, "identity")
        await first.require()
        await first.write([Step(T0), Step(T0, "cloud.create", {"nodeclaim": "a"})])
        again = Journal(js, NAMES, "identity")
        assert [s.request for s in await again.read()] == [None, "cloud.create"]
        assert again.last == first.last
        await forget_sim_world(bus, "identity")
        assert await Journal(js, NAMES, "identity").read() == []
        assert said == []
    finally:
        await nc.close()


@pytest.mark.parametrize("identity", ["cli", "setup"])
def test_bus_setup_as_the_setup_user_only(secured: SessionBus, identity: str, tmp_path: Path):
    """`nodewright bus setup` as a user that may not (the cli's) exits 2 naming the user that
    may; as the setup user it makes the deployment's streams and consumers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEWRIGHT_")}
    env |= secured.acting_as(identity, "green").environment() | {"NODEWRIGHT_CONNECT_TIMEOUT": "5"}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "nodewright"), "bus", "setup"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if identity == "cli":
        assert done.returncode == 2, done.stdout + done.stderr
        assert "could not provision deployment 'green' as green-cli" in done.stderr
        assert "connect as the deployment's setup user (green-setup) or an admin" in done.stderr
        assert "Traceback" not in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == (
            "streams green_NODEWRIGHT, green_SIM; pull consumers termination-NodeClaimDeletionRequested: set up"
        )
