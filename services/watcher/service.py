"""The watcher: the only reader of the cluster. It lists and watches through the `Cluster` port
and appends what it sees as facts (`facts.Facts`) to the event store.

On start it rebuilds what it reported before from its own facts in the log, lists the cluster
and reports the difference, then follows the watch. Facts that arrive together are appended
together, one stream per unit, in one transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from prometheus_client import Counter

from services.watcher.facts import WATCHER_FACTS, Fact, Facts
from shared.bus.service import ServiceShell
from shared.clock import Clock
from shared.events.envelope import NewEvent
from shared.ports.cluster import Cluster, NotFound, WatchEvent
from shared.store.eventstore import EventStore, unit

PRODUCER = "watcher"
log = logging.getLogger("nodewright.watcher")


class WatcherService:
    def __init__(self, store: EventStore, cluster: Cluster, clock: Clock, nats_url: str, *, port: int = 0) -> None:
        self.store = store
        self.cluster = cluster
        self.clock = clock
        self.facts = Facts()
        self.synced = False
        self.appended = 0
        self.shell = ServiceShell(PRODUCER, nats_url, port=port, subjects=None, readiness=[self._ready])
        self.reported = Counter(
            "nodewright_watcher_facts_total",
            "Facts the watcher appended, by event type.",
            ["type"],
            registry=self.shell.registry,
        )

    async def _ready(self) -> str | None:
        if not self.synced:
            return "the first list of the cluster is not recorded yet"
        try:
            async with self.store.driver_connection() as raw:
                await raw.fetchval("SELECT 1")
        except Exception as exc:
            return f"PostgreSQL does not answer: {exc!r}"
        return None

    async def run(self, stopping: asyncio.Event) -> None:
        await self.shell.start()
        watching = asyncio.create_task(self._follow())
        try:
            stopped = asyncio.create_task(stopping.wait())
            await asyncio.wait({watching, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if watching.done():
                watching.result()  # a failure of the watch ends the service, loudly
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
            await self.shell.stop()

    async def _follow(self) -> None:
        async for page in self.store.read_types(WATCHER_FACTS):
            self.facts.remember(page)
        snapshot = await self.cluster.snapshot()
        await self.record(self.facts.resync(snapshot))
        self.synced = True
        changes: asyncio.Queue[WatchEvent] = asyncio.Queue()

        async def pump() -> None:
            async for change in self.cluster.watch(snapshot.resource_version):
                changes.put_nowait(change)

        pumping = asyncio.create_task(pump())
        try:
            while True:
                batch = [await changes.get()]
                while not changes.empty():
                    batch.append(changes.get_nowait())
                await self.record([fact for change in batch for fact in self.facts.observe(change)])
                if pumping.done():
                    pumping.result()
        finally:
            pumping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pumping

    async def record(self, facts: Sequence[Fact]) -> None:
        """Append the facts, one unit per stream in their order; an id the log already holds is
        dropped by the store (a fact reported again after a restart)."""
        if not facts:
            return
        now = self.clock.now()
        by_stream: dict[str, list[NewEvent]] = defaultdict(list)
        for fact in facts:
            event = NewEvent.of(fact.event, occurred_at=now, producer=PRODUCER, event_id=fact.event_id)
            by_stream[fact.event.stream_id].append(event)
        units = [unit(stream, None, events) for stream, events in by_stream.items()]
        for (stream, events), result in zip(by_stream.items(), await self.store.append_units(units), strict=True):
            if isinstance(result, BaseException):
                log.error("the store refused facts of %s: %s", stream, result)
                continue
            self.appended += len(result)
            for event in events:
                self.reported.labels(event.type).inc()
        for fact in facts:
            if fact.event.TYPE in ("NodePoolApplied", "NodePoolRejected"):
                await self._condition(fact, now)

    async def _condition(self, fact: Fact, now: datetime) -> None:
        """The pool's ValidationSucceeded condition, written back as Karpenter's controller does."""
        event = fact.event
        errors = getattr(event, "errors", None)
        condition = {
            "type": "ValidationSucceeded",
            "status": "False" if errors else "True",
            "reason": "ValidationFailed" if errors else "ValidationSucceeded",
            "message": "; ".join(f"{e['path']}: {e['message']}" for e in errors or [])[:32768],
            "lastTransitionTime": now.isoformat(),
        }
        with contextlib.suppress(NotFound):  # deleted meanwhile: its deletion is the next fact
            await self.cluster.set_nodepool_condition(event.nodepool, condition)
