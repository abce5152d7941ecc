"""The outbox relay: committed events, in position order, onto the deployment's stream.

The events table is the outbox. The relay reads past its checkpoint, publishes each event with
`<deployment>:<store id>:<event id>` as `Nats-Msg-Id` and its position and store id in headers
(a stream that outlived its database carries another store's events), waits (a bounded time)
for every acknowledgement, then advances the checkpoint to the last position and the stream
sequence that carried it. A crash between publishing and checkpointing republishes that batch
on restart, and JetStream's duplicate window drops the copies. A `PubAck` marked duplicate is
checked against the message the stream holds under that id: the same event is a republish; any
other message is an impostor that took the event's id first, which the relay reports (metric and
log) and never counts as delivered. Concurrent appends commit their positions out of order, so
the relay stops at the first missing position until it appears or is known lost to a rollback
(`shared.store.gaps`). The service around it (`services/relay`) leads through the fenced
`LeaderLock`, so the checkpoint of a relay that lost the lock is never written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass

import orjson
import structlog
from nats.js import JetStreamContext
from nats.js.api import PubAck

from shared.bus.names import MSG_ID, POSITION, STORE, BusNames
from shared.events.envelope import RecordedEvent
from shared.store.eventstore import EventStore, NotLeader
from shared.store.fence import Fence, fence_arguments, fence_ctes
from shared.store.gaps import GapWatch

log = structlog.get_logger("outbox-relay")

ACK_TIMEOUT = 5.0
"""Seconds to wait for the acknowledgements of one batch; past that the batch goes again."""
GAP_POLL = 0.002
"""Seconds between looks at a missing position: its commit is usually imminent."""

Published = Callable[[list[RecordedEvent]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Every position up to `position` is on the stream (or lost to a rollback), the message
    carrying `position` at `sequence` (0 before the first)."""

    position: int = 0
    sequence: int = 0


async def read_checkpoint(store: EventStore, relay: str = "relay") -> Checkpoint:
    async with store.driver_connection() as raw:
        row = await raw.fetchrow("SELECT position, stream_sequence FROM outbox_checkpoint WHERE relay = $1", relay)
    return Checkpoint(row[0], row[1]) if row else Checkpoint()


_UPSERT = (
    " ON CONFLICT (relay) DO UPDATE SET position = greatest(outbox_checkpoint.position, $2),"
    " stream_sequence = CASE WHEN $2 >= outbox_checkpoint.position THEN $4"
    " ELSE outbox_checkpoint.stream_sequence END,"
    " published = outbox_checkpoint.published + $3, updated_at = clock_timestamp()"
    " RETURNING position"
)
_ADVANCE = (
    "INSERT INTO outbox_checkpoint (relay, position, published, stream_sequence) VALUES ($1, $2, $3, $4)" + _UPSERT
)
# One statement (its own transaction): the checkpoint moves only while the fence holds.
_ADVANCE_FENCED = (
    f"WITH {fence_ctes(5)} INSERT INTO outbox_checkpoint (relay, position, published, stream_sequence)"
    " SELECT $1, $2, $3, $4 FROM fence_held WHERE ok" + _UPSERT
)


class ImpostorError(RuntimeError):
    """A message with an event's id was on the stream before the relay published the event."""


async def _nothing(_: list[RecordedEvent]) -> None:
    return None


class OutboxRelay:
    def __init__(
        self,
        store: EventStore,
        js: JetStreamContext,
        names: BusNames | None = None,
        *,
        name: str = "relay",
        batch_size: int = 1000,
        ack_timeout: float = ACK_TIMEOUT,
        fence: Callable[[], Fence] | None = None,
        after_publish: Published = _nothing,
    ) -> None:
        """`fence`: the leader lock's current fence; with it, the checkpoint is written only while
        that lock is held (else `NotLeader`, and nothing written)."""
        self.store = store
        self.js = js
        self.names = names or BusNames()
        self.name = name
        self.batch_size = batch_size
        self.ack_timeout = ack_timeout
        self.fence = fence
        self.after_publish = after_publish
        self.published = 0
        self.impostors = 0
        self.gaps = GapWatch(store)
        self.waiting_on: int | None = None
        self._known: Checkpoint | None = None
        self.on_impostor: Callable[[RecordedEvent, int], None] | None = None
        self.store_id: str | None = None

    async def checkpoint(self) -> int:
        return (await read_checkpoint(self.store, self.name)).position

    async def _start(self) -> Checkpoint:
        """Where to go on from. A fenced relay is the checkpoint's only writer, so it reads it once
        and then knows it; an unfenced one (beside others) reads it every batch."""
        if self.fence is None or self._known is None:
            self._known = await read_checkpoint(self.store, self.name)
        return self._known

    async def _advance(self, position: int, count: int, sequence: int) -> None:
        async with self.store.driver_connection() as raw:
            if self.fence is None:
                await raw.execute(_ADVANCE, self.name, position, count, sequence)
            elif (
                await raw.fetchval(
                    _ADVANCE_FENCED, self.name, position, count, sequence, *fence_arguments(self.fence())
                )
                is None
            ):
                self._known = None
                raise NotLeader(self.fence())
        self._known = Checkpoint(position, sequence)

    async def publish_batch(self) -> int:
        """Publish the consecutive positions after the checkpoint; how many positions it moved
        past (one lost to a rollback counts). 0 when nothing is new, or while `waiting_on` a
        position whose transaction has not ended."""
        start = await self._start()
        async with aclosing(self.store.read_all(start.position, batch_size=self.batch_size)) as pages:
            page = await anext(pages, [])
        batch = _consecutive(page, start.position)
        self.waiting_on = None
        if page and not batch:
            if await self.gaps.lost(start.position + 1):
                log.info(
                    "position lost to a rolled-back append; skipping it", relay=self.name, position=start.position + 1
                )
                await self._advance(start.position + 1, 0, start.sequence)
                return 1
            self.waiting_on = start.position + 1
        if not batch:
            return 0
        acks, delivered = await self._publish(batch)
        await self.after_publish(delivered)
        await self._advance(batch[-1].position, len(delivered), acks[-1].seq)
        self.published += len(delivered)
        return len(batch)

    async def _publish(self, batch: list[RecordedEvent]) -> tuple[list[PubAck], list[RecordedEvent]]:
        """The acknowledgements, and the events now on the stream (an impostor's is not)."""
        futures = []
        payloads = []
        if self.store_id is None:
            self.store_id = await self.store.identity()
        store = self.store_id
        for event in batch:
            payload = orjson.dumps(event.to_json_dict())
            headers = {MSG_ID: self.names.msg_id(event.event_id, store), POSITION: str(event.position), STORE: store}
            subject = self.names.event_subject(event.stream_id, event.type)
            futures.append(await self.js.publish_async(subject, payload, headers=headers, stream=self.names.stream))
            payloads.append(payload)
        try:
            acks: list[PubAck] = await asyncio.wait_for(asyncio.gather(*futures), self.ack_timeout)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        delivered = [
            event
            for event, payload, ack in zip(batch, payloads, acks, strict=True)
            if not ack.duplicate or await self._republished(event, payload, ack.seq)
        ]
        return acks, delivered

    async def _republished(self, event: RecordedEvent, payload: bytes, sequence: int) -> bool:
        """Whether a duplicate is this very event (a republish after a crash); else an impostor,
        reported."""
        stored = await self.js.get_msg(self.names.stream, seq=sequence)
        headers = stored.headers or {}
        ours = headers.get(POSITION) == str(event.position) and headers.get(STORE) == self.store_id
        if stored.data == payload and ours:
            return True
        self.impostors += 1
        if self.on_impostor is not None:
            self.on_impostor(event, sequence)
        log.error(
            "another message took this event's id on the stream before it was published:"
            " the event is not on the stream, consumers read it from the store",
            relay=self.name,
            event_id=str(event.event_id),
            position=event.position,
            impostor_sequence=sequence,
        )
        return False

    async def drain(self) -> int:
        """Publish until nothing is left, or until a gap whose writer is still running; how many
        positions it moved past."""
        total = 0
        while n := await self.publish_batch():
            total += n
        return total


def _consecutive(page: list[RecordedEvent], after: int) -> list[RecordedEvent]:
    """The leading events of `page` whose positions follow `after` without a hole."""
    for i, event in enumerate(page):
        if event.position != after + 1 + i:
            return page[:i]
    return page
