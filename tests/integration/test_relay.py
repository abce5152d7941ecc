"""The outbox relay against real PostgreSQL and NATS JetStream: order, ids, republishing after a
crash, impostors, bounded waits, the fenced checkpoint, and the relay service's leadership."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nats
import pytest
from nats.js import JetStreamContext

from services.relay.service import RelayService
from shared.bus.connection import BusSettings
from shared.bus.names import MSG_ID, POSITION, STORE, BusNames
from shared.bus.relay import OutboxRelay, read_checkpoint
from shared.bus.streams import ensure_stream
from shared.outages import OUTAGES
from shared.store.eventstore import EventStore, NotLeader
from shared.store.leader import LeaderLock
from tests.factories import applied, created, insert_applied, new
from tests.integration.streams import stream_messages

pytestmark = pytest.mark.timeout(120)
NAMES = BusNames()


async def fill(store: EventStore, pools: int = 3, claims: int = 4) -> int:
    count = 0
    for p in range(pools):
        pool = applied(f"p{p}")
        await store.append(pool.stream_id, None, [new(pool)])
        await store.reserve_launch(
            [created(f"p{p}-c{i}", f"p{p}") for i in range(claims)], occurred_at=new(pool).occurred_at, producer="t"
        )
        count += 1 + claims
    return count


async def published_positions(js: JetStreamContext) -> list[int]:
    return [json.loads(m.data)["position"] for m in await stream_messages(js, NAMES)]


async def test_events_arrive_in_position_order_with_their_ids_and_positions(
    store: EventStore, jetstream: JetStreamContext
):
    total = await fill(store)
    relay = OutboxRelay(store, jetstream, batch_size=5)
    assert await relay.drain() == total
    checkpoint = await read_checkpoint(store)
    assert checkpoint.position == await store.head_position()
    messages = await stream_messages(jetstream, NAMES)
    bodies = [json.loads(m.data) for m in messages]
    assert [b["position"] for b in bodies] == list(range(1, total + 1))
    identity = await store.identity()
    assert [m.headers[MSG_ID] for m in messages] == [f"default:{identity}:{b['event_id']}" for b in bodies]
    assert [m.headers[POSITION] for m in messages] == [str(b["position"]) for b in bodies]
    assert {m.headers[STORE] for m in messages} == {identity}
    assert messages[0].subject == "default.events.nodepool.NodePoolApplied"
    assert messages[1].subject == "default.events.nodeclaim.NodeClaimCreated"
    assert checkpoint.sequence == messages[-1].metadata.sequence.stream  # where a consumer starts after it
    assert await relay.drain() == 0


async def test_a_relay_killed_after_publishing_republishes_once(store: EventStore, jetstream: JetStreamContext):
    total = await fill(store)

    async def crash(batch):
        raise RuntimeError("killed between publish and checkpoint")

    doomed = OutboxRelay(store, jetstream, batch_size=total, after_publish=crash)
    with pytest.raises(RuntimeError, match="killed"):
        await doomed.publish_batch()
    assert await doomed.checkpoint() == 0
    assert (await jetstream.stream_info(NAMES.stream)).state.messages == total
    again = OutboxRelay(store, jetstream)
    assert await again.drain() == total  # the restart sends all again...
    assert again.impostors == 0  # ...each duplicate is the very event on the stream...
    messages = await stream_messages(jetstream, NAMES)
    assert len(messages) == total  # ...and JetStream keeps one of each
    assert len({m.headers[MSG_ID] for m in messages}) == total


async def test_a_message_that_took_an_events_id_first_is_reported_not_counted(
    store: EventStore, jetstream: JetStreamContext
):
    """A PubAck marked duplicate for an event never published is an impostor: reported, and the
    event is not counted as published."""
    pool = applied("p")
    await store.append(pool.stream_id, None, [new(pool)])
    (event,) = [e async for page in store.read_all() for e in page]
    forged = await jetstream.publish(
        NAMES.event_subject(event.stream_id, event.type),
        b'{"forged": true}',
        headers={MSG_ID: NAMES.msg_id(event.event_id, await store.identity())},
        stream=NAMES.stream,
    )
    seen = []
    relay = OutboxRelay(store, jetstream)
    relay.on_impostor = lambda e, seq: seen.append((e.position, seq))
    assert await relay.drain() == 1
    assert relay.impostors == 1 and seen == [(1, forged.seq)]
    assert relay.published == 0
    assert await relay.checkpoint() == 1  # consumers read it from the store; the relay goes on


async def test_events_committed_while_no_relay_runs_are_published_later(store: EventStore, jetstream: JetStreamContext):
    relay = OutboxRelay(store, jetstream)
    first = await fill(store, pools=1)
    await relay.drain()
    pool = applied("late")
    await store.append(pool.stream_id, None, [new(pool)])
    assert await OutboxRelay(store, jetstream).drain() == 1
    assert (await jetstream.stream_info(NAMES.stream)).state.messages == first + 1


async def test_two_relays_at_once_put_each_event_on_the_stream_once(store: EventStore, jetstream: JetStreamContext):
    total = await fill(store, pools=5, claims=10)
    relays = [OutboxRelay(store, jetstream, batch_size=7) for _ in range(2)]
    await asyncio.gather(*(r.drain() for r in relays))
    messages = await stream_messages(jetstream, NAMES)
    assert len(messages) == total
    assert sorted(json.loads(m.data)["position"] for m in messages) == list(range(1, total + 1))


async def test_a_relay_that_lost_its_lock_cannot_move_the_checkpoint(store: EventStore, jetstream: JetStreamContext):
    total = await fill(store, pools=1)
    lock = LeaderLock(store, 0x7465_7374_7265)
    assert await lock.try_acquire()
    relay = OutboxRelay(store, jetstream, fence=lambda: lock.fence)
    assert await relay.drain() == total
    pool = applied("later")
    await store.append(pool.stream_id, None, [new(pool)])
    await lock.release()
    with pytest.raises(NotLeader):
        await relay.drain()
    assert await relay.checkpoint() == total


async def test_a_publish_that_gets_no_acknowledgement_fails_within_its_bound(store: EventStore, embedded_nats_factory):
    """The server goes away mid-run: the batch fails within `ack_timeout`, it does not hang."""
    server = embedded_nats_factory()
    nc = await BusSettings(server.url).connect("relay")
    try:
        js = nc.jetstream()
        await ensure_stream(js, NAMES)
        await fill(store, pools=1)
        relay = OutboxRelay(store, js, ack_timeout=1.0)
        server.kill()
        started = time.monotonic()
        with pytest.raises(OUTAGES):
            await relay.publish_batch()
        assert time.monotonic() - started < 3.0
        assert await relay.checkpoint() == 0
    finally:
        with contextlib.suppress(*OUTAGES):
            await nc.close()


async def test_only_the_leader_publishes(store: EventStore, bus: BusSettings, nats_server_url: str):
    total = await fill(store, pools=2)
    stop = asyncio.Event()
    relays = [RelayService(store, bus, batch_size=3) for _ in range(2)]
    tasks = [asyncio.create_task(r.run(stop)) for r in relays]
    nc = await nats.connect(nats_server_url)
    try:
        js = nc.jetstream()
        for _ in range(300):
            if sum(r.published for r in relays) == total:
                break
            await asyncio.sleep(0.02)
        assert sorted(r.published for r in relays) == [0, total]
        assert sorted(r.leading for r in relays) == [False, True]
        assert len(await stream_messages(js, bus.names)) == total
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        await nc.close()


async def test_the_relay_command_publishes_what_is_committed(
    store: EventStore, migrated_url: str, nats_server_url: str, jetstream: JetStreamContext
):
    total = await fill(store, pools=1)
    env = {**os.environ, "NODEWRIGHT_DATABASE_URL": migrated_url, "NODEWRIGHT_NATS_URL": nats_server_url}
    run = subprocess.run(
        [str(Path(sys.executable).parent / "nodewright"), "relay", "--once"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert f"published {total} events" in run.stdout
    assert (await jetstream.stream_info(NAMES.stream)).state.messages == total


async def _draw_position_without_commit(raw, pool: str = "slow") -> int:
    """An append caught between drawing its position and committing, as a slow writer is."""
    await raw.fetchval("SELECT pg_current_xact_id()")
    return await insert_applied(raw, pool)


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
async def test_the_relay_waits_at_a_position_still_being_written(
    store: EventStore, jetstream: JetStreamContext, outcome: str
):
    """Without a log-wide lock a later append can commit first: the relay must neither skip the
    earlier position while its transaction runs nor wait for it after a rollback."""
    before = await fill(store, pools=1, claims=1)
    relay = OutboxRelay(store, jetstream)
    async with store.driver_connection() as raw:
        transaction = raw.transaction()
        await transaction.start()
        slow = await _draw_position_without_commit(raw)
        late = applied("late")
        (after,) = await store.append(late.stream_id, None, [new(late)])
        assert after > slow
        assert await relay.drain() == before
        assert relay.waiting_on == slow
        assert await relay.drain() == 0  # still running: keep waiting
        assert await published_positions(jetstream) == list(range(1, before + 1))
        await (transaction.commit() if outcome == "commit" else transaction.rollback())
    assert await relay.drain() == 2
    assert relay.waiting_on is None
    kept = [slow] if outcome == "commit" else []
    assert await published_positions(jetstream) == [*range(1, before + 1), *kept, after]
    assert relay.published == before + len(kept) + 1
    assert await relay.checkpoint() == after


async def test_a_running_relay_publishes_every_commit_of_concurrent_writers_in_order(
    store: EventStore, bus: BusSettings, nats_server_url: str
):
    stop = asyncio.Event()
    service = RelayService(store, bus, batch_size=16)
    running = asyncio.create_task(service.run(stop))

    async def writer(w: int) -> None:
        for i in range(25):
            if i % 7 == 3:  # a writer that dies after drawing a position
                async with store.driver_connection() as raw:
                    transaction = raw.transaction()
                    await transaction.start()
                    await _draw_position_without_commit(raw, f"doomed-{w}-{i}")
                    await asyncio.sleep(0.01)
                    await transaction.rollback()
                continue
            pool = applied(f"w{w}-{i}")
            await store.append(pool.stream_id, None, [new(pool)])

    await asyncio.gather(*(writer(w) for w in range(6)))
    async with store.driver_connection() as raw:
        committed = [r[0] for r in await raw.fetch("SELECT position FROM events ORDER BY position")]
    for _ in range(500):
        if (await read_checkpoint(store)).position == committed[-1]:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await running
    nc = await nats.connect(nats_server_url)
    try:
        messages = await stream_messages(nc.jetstream(), bus.names)
    finally:
        await nc.close()
    assert [json.loads(m.data)["position"] for m in messages] == committed


async def test_a_commit_wakes_the_relay_without_a_poll(store: EventStore, bus: BusSettings):
    """The leader waits on LISTEN: an event committed while it idles is published long before
    its quiet timeout (5 s)."""
    stop = asyncio.Event()
    service = RelayService(store, bus)
    running = asyncio.create_task(service.run(stop))
    try:
        for _ in range(200):
            if service.leading:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # idle now
        pool = applied("woken")
        (position,) = await store.append(pool.stream_id, None, [new(pool)])
        started = time.monotonic()
        while (await read_checkpoint(store)).position < position:
            assert time.monotonic() - started < 1.0, "not woken by the commit"
            await asyncio.sleep(0.01)
    finally:
        stop.set()
        await running
