"""The outbox relay: committed events, in position order, onto JetStream.

The events table is the outbox. The relay reads past its checkpoint, publishes each event with
its event id as `Nats-Msg-Id`, waits for every acknowledgement, then advances the checkpoint.
A crash between publishing and checkpointing republishes that batch on restart, and JetStream's
duplicate window drops the copies; so does a second relay running at the same time. Concurrent
appends commit their positions out of order, so the relay stops at the first missing position
until it appears or is known lost to a rollback (`shared.store.gaps`). Normally
only one relay works: the leader holds a PostgreSQL session lock, and a standby takes over when
the leader's connection goes away.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from contextlib import aclosing

import nats
import nats.errors
import structlog
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.bus.streams import MSG_ID, POSITION, STREAM, ensure_stream
from shared.events.envelope import RecordedEvent
from shared.store.eventstore import EventStore
from shared.store.gaps import GapWatch

log = structlog.get_logger("outbox-relay")

LEADER_LOCK = 0x72656C61  # pg_try_advisory_lock key held by the active relay
GAP_POLL = 0.002  # seconds between looks at a missing position: its commit is usually imminent

Published = Callable[[list[RecordedEvent]], Awaitable[None]]


async def _nothing(_: list[RecordedEvent]) -> None:
    return None


class OutboxRelay:
    def __init__(
        self,
        store: EventStore,
        js: JetStreamContext,
        *,
        name: str = "relay",
        batch_size: int = 1000,
        exclusive: bool = True,
        after_publish: Published = _nothing,
    ) -> None:
        self.store = store
        self.js = js
        self.name = name
        self.batch_size = batch_size
        self.exclusive = exclusive
        self.after_publish = after_publish
        self.published = 0
        self.gaps = GapWatch(store)
        self.waiting_on: int | None = None

    async def checkpoint(self) -> int:
        async with self.store.engine.connect() as conn:
            value = await conn.scalar(
                text("SELECT position FROM outbox_checkpoint WHERE relay = :name"), {"name": self.name}
            )
        return int(value or 0)

    async def _advance(self, position: int, count: int) -> None:
        async with self.store.engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO outbox_checkpoint (relay, position, published) VALUES (:name, :position, :count) "
                    "ON CONFLICT (relay) DO UPDATE SET position = greatest(outbox_checkpoint.position, :position), "
                    "published = outbox_checkpoint.published + :count, updated_at = clock_timestamp()"
                ),
                {"name": self.name, "position": position, "count": count},
            )

    async def publish_batch(self) -> int:
        """Publish the consecutive positions after the checkpoint; how many positions it moved
        past (one lost to a rollback counts). 0 when nothing is new, or while `waiting_on` a
        position whose transaction has not ended."""
        start = await self.checkpoint()
        async with aclosing(self.store.read_all(start, batch_size=self.batch_size)) as pages:
            page = await anext(pages, [])
        batch = _consecutive(page, start)
        self.waiting_on = None
        if page and not batch:
            if await self.gaps.lost(start + 1):
                log.info("position lost to a rolled-back append; skipping it", relay=self.name, position=start + 1)
                await self._advance(start + 1, 0)
                return 1
            self.waiting_on = start + 1
        if not batch:
            return 0
        acks = []
        for event in batch:
            payload = json.dumps(event.to_json_dict(), separators=(",", ":")).encode()
            headers = {MSG_ID: str(event.event_id), POSITION: str(event.position)}
            acks.append(await self.js.publish_async(event.subject, payload, headers=headers, stream=STREAM))
        await asyncio.gather(*acks)
        await self.after_publish(batch)
        await self._advance(batch[-1].position, len(batch))
        self.published += len(batch)
        return len(batch)

    async def drain(self) -> int:
        """Publish until nothing is left, or until a gap whose writer is still running; how many
        positions it moved past."""
        total = 0
        while n := await self.publish_batch():
            total += n
        return total

    async def run(self, stop: asyncio.Event, *, idle: float = 0.05) -> None:
        """Publish until `stop` is set: as leader when `exclusive`, else alongside others."""
        async with self.store.engine.connect() as leader:
            leading = not self.exclusive
            try:
                while not stop.is_set():
                    if not leading:
                        leading = await _lead(leader)
                        if not leading:
                            await _wait(stop, 1.0)
                            continue
                    try:
                        published = await self.publish_batch()
                    except (nats.errors.Error, OSError, TimeoutError) as exc:
                        # NATS hiccup: the checkpoint did not move, so the batch goes again
                        log.warning("relay batch failed; retrying", relay=self.name, error=repr(exc))
                        await _wait(stop, 1.0)
                        continue
                    if not published:
                        await _wait(stop, idle if self.waiting_on is None else min(idle, GAP_POLL))
            finally:
                if leading and self.exclusive:
                    await leader.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": LEADER_LOCK})
                    await leader.commit()


def _consecutive(page: list[RecordedEvent], after: int) -> list[RecordedEvent]:
    """The leading events of `page` whose positions follow `after` without a hole."""
    for i, event in enumerate(page):
        if event.position != after + 1 + i:
            return page[:i]
    return page


async def _lead(conn: AsyncConnection) -> bool:
    """Whether this relay holds the leader lock (a session lock: it goes with the connection)."""
    held = await conn.scalar(text("SELECT pg_try_advisory_lock(:key)"), {"key": LEADER_LOCK})
    await conn.commit()
    return bool(held)


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return


async def _log_nats_error(error: Exception) -> None:
    """One log line per connection error (nats-py's default prints a traceback each time)."""
    log.warning("nats connection error", error=repr(error))


async def connect(url: str) -> tuple[NATS, JetStreamContext]:
    nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=3, error_cb=_log_nats_error)
    js = nc.jetstream()
    await ensure_stream(js)
    return nc, js
