"""The outbox relay against real PostgreSQL and NATS JetStream."""

from __future__ import annotations

import asyncio
import json

import pytest
from nats.js import JetStreamContext

from shared.bus.relay import OutboxRelay
from shared.bus.streams import MSG_ID, STREAM
from shared.store.eventstore import EventStore
from tests.factories import applied, created, insert_applied, new


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


async def stream_messages(js: JetStreamContext) -> list:
    info = await js.stream_info(STREAM)
    if not info.state.messages:
        return []
    sub = await js.pull_subscribe("nodewright.>", stream=STREAM)
    out = []
    while len(out) < info.state.messages:
        out += await sub.fetch(info.state.messages - len(out), timeout=5)
    await sub.unsubscribe()
    return out


async def test_events_arrive_in_position_order_with_their_ids(store: EventStore, jetstream: JetStreamContext):
    total = await fill(store)
    relay = OutboxRelay(store, jetstream, batch_size=5)
    assert await relay.drain() == total
    assert await relay.checkpoint() == await store.head_position()
    messages = await stream_messages(jetstream)
    bodies = [json.loads(m.data) for m in messages]
    assert [b["position"] for b in bodies] == list(range(1, total + 1))
    assert [m.headers[MSG_ID] for m in messages] == [b["event_id"] for b in bodies]
    assert messages[0].subject == "nodewright.events.nodepool.NodePoolApplied"
    assert messages[1].subject == "nodewright.events.nodeclaim.NodeClaimCreated"
    assert await relay.drain() == 0


async def test_a_relay_killed_after_publishing_republishes_once(store: EventStore, jetstream: JetStreamContext):
    total = await fill(store)

    async def crash(batch):
        raise RuntimeError("killed between publish and checkpoint")

    doomed = OutboxRelay(store, jetstream, batch_size=total, after_publish=crash)
    with pytest.raises(RuntimeError, match="killed"):
        await doomed.publish_batch()
    assert await doomed.checkpoint() == 0
    assert (await jetstream.stream_info(STREAM)).state.messages == total
    assert await OutboxRelay(store, jetstream).drain() == total  # the restart sends all again...
    messages = await stream_messages(jetstream)
    assert len(messages) == total  # ...and JetStream keeps one of each
    assert len({m.headers[MSG_ID] for m in messages}) == total


async def test_events_committed_while_no_relay_runs_are_published_later(store: EventStore, jetstream: JetStreamContext):
    relay = OutboxRelay(store, jetstream)
    first = await fill(store, pools=1)
    await relay.drain()
    pool = applied("late")
    await store.append(pool.stream_id, None, [new(pool)])
    assert await OutboxRelay(store, jetstream).drain() == 1
    assert (await jetstream.stream_info(STREAM)).state.messages == first + 1


async def test_two_relays_at_once_put_each_event_on_the_stream_once(store: EventStore, jetstream: JetStreamContext):
    total = await fill(store, pools=5, claims=10)
    relays = [OutboxRelay(store, jetstream, batch_size=7, exclusive=False) for _ in range(2)]
    await asyncio.gather(*(r.drain() for r in relays))
    messages = await stream_messages(jetstream)
    assert len(messages) == total
    assert sorted(json.loads(m.data)["position"] for m in messages) == list(range(1, total + 1))


async def test_only_the_leader_publishes(store: EventStore, jetstream: JetStreamContext):
    total = await fill(store, pools=2)
    stop = asyncio.Event()
    relays = [OutboxRelay(store, jetstream, batch_size=3) for _ in range(2)]
    tasks = [asyncio.create_task(r.run(stop, idle=0.01)) for r in relays]
    for _ in range(200):
        if (await jetstream.stream_info(STREAM)).state.messages == total:
            break
        await asyncio.sleep(0.02)
    stop.set()
    await asyncio.gather(*tasks)
    assert sorted(r.published for r in relays) == [0, total]


async def test_the_relay_command_publishes_what_is_committed(
    store: EventStore, migrated_url: str, nats_server_url: str, jetstream: JetStreamContext
):
    import os
    import subprocess
    import sys
    from pathlib import Path

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
    assert (await jetstream.stream_info(STREAM)).state.messages == total


async def _draw_position_without_commit(raw, pool: str = "slow") -> int:
    """An append caught between drawing its position and committing, as a slow writer is."""
    await raw.fetchval("SELECT pg_current_xact_id()")
    return await insert_applied(raw, pool)


async def published_positions(js: JetStreamContext) -> list[int]:
    return [json.loads(m.data)["position"] for m in await stream_messages(js)]


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
    store: EventStore, jetstream: JetStreamContext
):
    stop = asyncio.Event()
    relay = OutboxRelay(store, jetstream, batch_size=16)
    running = asyncio.create_task(relay.run(stop, idle=0.005))

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
        if await relay.checkpoint() == committed[-1]:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await running
    assert await published_positions(jetstream) == committed
