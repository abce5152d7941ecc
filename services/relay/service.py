"""The relay service: the one reader of the outbox.

Replicas elect a leader with the fenced `LeaderLock` (`shared.store.leader`); only the leader
publishes (`shared.bus.relay.OutboxRelay`), and its checkpoint is written only while it still
holds the lock. It is woken by PostgreSQL's LISTEN/NOTIFY when events commit (a trigger on the
events table, migration 0003), not by a poll of the table. NATS or PostgreSQL out of reach is
ridden out for ever with backoff: the leader lets its lock go (a standby may take over), the
service says why it is not ready, and it starts again from the checkpoint once both answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import asyncpg
from prometheus_client import Counter, Gauge

from shared.bus.connection import BusSettings
from shared.bus.relay import GAP_POLL, OutboxRelay
from shared.bus.service import ServiceShell
from shared.bus.setup import NotSetUp, require_stream
from shared.events.envelope import RecordedEvent
from shared.outages import OUTAGES, Backoff
from shared.store.eventstore import EventStore, NotLeader
from shared.store.leader import LeaderLock
from shared.store.sql import EVENTS_CHANNEL

NAME = "relay"
LEADER_LOCK = 0x6E77_7265_6C61  # "nwrela"
STANDBY_SECONDS = 1.0
"""How often a standby tries the leader lock."""
LOCK_CHECK_SECONDS = 2.0
QUIET_SECONDS = 5.0
"""The longest the leader waits for a commit's notification before it looks anyway (a
notification is lost when its listening connection breaks)."""
BACKLOG = 1000
"""The leader is ready while fewer committed events than this wait to be published."""

log = logging.getLogger("nodewright.relay")


class RelayService:
    def __init__(
        self,
        store: EventStore,
        bus: BusSettings | str,
        *,
        port: int = 0,
        batch_size: int = 1000,
    ) -> None:
        self.store = store
        self.batch_size = batch_size
        self.shell = ServiceShell(NAME, bus, port=port, readiness=[self._ready])
        self.names = self.shell.names
        self.lock = LeaderLock(store, LEADER_LOCK)
        self.leading = False
        self.problem: str | None = "starting"
        self.backlog = 0
        self.relay: OutboxRelay | None = None
        registry = self.shell.registry
        self.published_total = Counter(
            "nodewright_relay_published_total", "Events published to the stream.", registry=registry
        )
        self.impostors_total = Counter(
            "nodewright_relay_impostors_total",
            "Events whose id another message had taken on the stream first (acknowledged as duplicates).",
            registry=registry,
        )
        self.backlog_gauge = Gauge("nodewright_relay_backlog", "Committed events not published yet.", registry=registry)
        self.leader_gauge = Gauge("nodewright_relay_leader", "1 while this replica publishes.", registry=registry)

    async def _ready(self) -> str | None:
        if self.problem is not None:
            return self.problem
        if self.leading and self.backlog > BACKLOG:
            return f"catching up: {self.backlog} events not published yet"
        return None

    async def run(self, stopping: asyncio.Event) -> None:
        await self.shell.start(stopping)
        backoff = Backoff(most=5.0)
        try:
            while not stopping.is_set():
                try:
                    await self._serve(stopping)
                    backoff.reset()
                except NotLeader as exc:
                    log.warning("%s; standing by", exc)
                except OUTAGES as exc:
                    self.problem = f"a server is out of reach: {exc!r}"
                    log.warning("relay interrupted (%r); trying again", exc)
                    await self._step_down()
                    await backoff.wait(stopping)
                except NotSetUp as exc:
                    self.problem = str(exc)
                    log.warning("relay cannot publish: %s", exc)
                    await backoff.wait(stopping)
        finally:
            await self._step_down()
            await self.shell.stop()

    async def _serve(self, stopping: asyncio.Event) -> None:
        """Stand by until the lock is this replica's, then publish until it is lost or stopping."""
        js = self.shell.connection.jetstream()
        await require_stream(js, self.names.stream)
        self.relay = OutboxRelay(self.store, js, self.names, batch_size=self.batch_size, fence=lambda: self.lock.fence)
        self.relay.after_publish = self._count
        self.relay.on_impostor = lambda _event, _seq: self.impostors_total.inc()
        while not stopping.is_set():
            self.leading = await self.lock.try_acquire()
            self.leader_gauge.set(1 if self.leading else 0)
            self.problem = None
            if self.leading:
                await self._publish(self.relay, stopping)
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), STANDBY_SECONDS)

    async def _publish(self, relay: OutboxRelay, stopping: asyncio.Event) -> None:
        woken = asyncio.Event()
        listener = await self.store.session_connection()

        def notified(*_: object) -> None:
            woken.set()

        try:
            await listener.add_listener(EVENTS_CHANNEL, notified)
            # a server that restarts cuts this session first: wake at once, so readiness tells
            listener.add_termination_listener(notified)
            checked = 0.0
            while not stopping.is_set():
                woken.clear()
                if listener.is_closed():
                    raise ConnectionError("the LISTEN connection closed")
                await relay.drain()
                if time.monotonic() - checked >= LOCK_CHECK_SECONDS:  # not on every commit's path
                    checked = time.monotonic()
                    if not await self.lock.held():
                        raise NotLeader(self.lock.fence)
                    self.backlog = await self.store.head_position() - await relay.checkpoint()
                    self.backlog_gauge.set(self.backlog)
                quiet = GAP_POLL if relay.waiting_on is not None else QUIET_SECONDS
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(_first(woken, stopping), min(quiet, LOCK_CHECK_SECONDS))
            await relay.drain()  # a clean stop leaves nothing committed unpublished
        finally:
            with contextlib.suppress(*OUTAGES, asyncpg.PostgresError):
                await listener.close(timeout=2)
            if not listener.is_closed():
                listener.terminate()

    async def _count(self, batch: list[RecordedEvent]) -> None:
        self.published_total.inc(len(batch))

    async def _step_down(self) -> None:
        self.leading = False
        self.leader_gauge.set(0)
        with contextlib.suppress(*OUTAGES, asyncpg.PostgresError):
            await self.lock.release()

    @property
    def published(self) -> int:
        return self.relay.published if self.relay else 0


async def _first(*events: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
