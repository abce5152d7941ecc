"""The watcher: the only reader of the cluster. It lists and watches through the `Cluster` port
and appends what it sees as facts (`facts.Facts`) to the event store.

On start it rebuilds what it reported before from its own facts in the log, lists the cluster
and reports the difference, then follows the watch. Facts that arrive together are appended
together, in the order they were seen, in one transaction. When anything breaks (the cluster
unreachable, a watch older than the kept history, the store refusing) it is not ready, waits,
and starts over from the log and a new list, so nothing is lost or told twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from datetime import datetime

import asyncpg
from prometheus_client import Counter

from services.watcher import pool_status
from services.watcher.facts import PRODUCER, WATCHER_FACTS, Fact, Facts, fact_units
from services.watcher.nodeclasses import NodeClassController, NodeClasses, Resolver
from services.watcher.overlays import OVERLAY_FACTS, Overlays
from services.watcher.overlays import REFRESH as OVERLAY_REFRESH
from services.watcher.overlays import conditions as overlay_conditions
from services.watcher.pool_status import same_conditions
from shared.bus.connection import BusSettings
from shared.bus.service import ServiceShell, database_answers
from shared.clock import Clock
from shared.events.decode import decode
from shared.outages import OUTAGES
from shared.policy.counters import ReservationError
from shared.ports.cloud import CloudError, CloudProvider
from shared.ports.cluster import EC2NODECLASS, Cluster, ClusterError, Gone, NotFound, WatchEvent
from shared.runtime.catalogs import Catalogs, resolution
from shared.scheduling.view import SchedulingView
from shared.store.eventstore import EventStore

RETRY_SECONDS = 0.5
COUNT_SECONDS = 1.0
MAX_RETRY_SECONDS = 10.0


class FactRefused(RuntimeError):
    pass


WATCH_ERRORS: tuple[type[BaseException], ...] = (ClusterError, FactRefused, asyncpg.PostgresError, *OUTAGES)
log = logging.getLogger("nodewright.watcher")


class WatcherService:
    """Also keeps each NodePool's status: its conditions after each validation, its `nodes` and
    `resources` from the log's counters (`services.watcher.pool_status`)."""

    def __init__(
        self,
        store: EventStore,
        cluster: Cluster,
        clock: Clock,
        bus: BusSettings | str,
        *,
        port: int = 0,
        resolver: Resolver | None = None,
        overlays: bool = False,
        cloud: CloudProvider | None = None,
    ) -> None:
        """`resolver`: the AWS cloud's EC2NodeClass resolver; with one, the watcher runs the
        EC2NodeClass controller and a NodePool's NodeClassReady follows its class. `overlays`:
        the `NodeOverlay` gate; with it and the `cloud` (its catalog), the watcher records
        NodeOverlays and writes their status (`services.watcher.overlays`)."""
        self.store = store
        self.cluster = cluster
        self.clock = clock
        self.facts = Facts()
        self.resolver = resolver
        self.nodeclasses = NodeClasses()
        self.overlays = Overlays(overlays)
        self.catalogs = Catalogs(cloud) if cloud is not None and overlays else None
        self._resolved_at: float | None = None
        self.controller: NodeClassController | None = None
        self._pools: dict[str, Fact] = {}  # the last NodePoolApplied/Rejected fact
        self.synced = False
        self.appended = 0
        self._counted: dict[str, dict[str, object]] = {}
        self.database = database_answers(store)
        self.shell = ServiceShell(PRODUCER, bus, port=port, readiness=[self._ready])
        self.reported = Counter(
            "nodewright_watcher_facts_total",
            "Facts the watcher appended, by event type.",
            ["type"],
            registry=self.shell.registry,
        )
        self.lists = Counter(
            "nodewright_watcher_lists_total",
            "Lists of the whole cluster, by why: start, expired (the watch was older than the"
            " history the API keeps, 410), interrupted (the API or the store failed).",
            ["reason"],
            registry=self.shell.registry,
        )

    async def _ready(self) -> str | None:
        if not self.synced:
            return "the first list of the cluster is not recorded yet"
        return await self.database()

    async def run(self, stopping: asyncio.Event) -> None:
        await self.shell.start(stopping)
        watching = asyncio.create_task(self._follow())
        counting = asyncio.create_task(self._count())
        tasks = [watching, counting]
        if self.resolver is not None:
            tasks.append(asyncio.create_task(self._resolve_classes()))
        if self.catalogs is not None:
            tasks.append(asyncio.create_task(self._overlay_statuses()))
        try:
            stopped = asyncio.create_task(stopping.wait())
            await asyncio.wait({watching, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if watching.done():
                watching.result()  # a failure of the watch ends the service, loudly
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.shell.stop()

    async def _follow(self) -> None:
        """List and watch for ever. Whatever breaks (the sim gone, a watch too old, the store
        refusing) makes it forget, rebuild what it reported from the log, and list again; the
        wait doubles while lists fail, and starts short again after one that was recorded."""
        backoff, reason = RETRY_SECONDS, "start"
        while True:
            try:
                await self._list_and_watch(reason)
            except WATCH_ERRORS as exc:
                reason = "expired" if isinstance(exc, Gone) else "interrupted"
                if self.synced:
                    backoff = RETRY_SECONDS
                self.synced = False
                log.warning("watch interrupted (%r); listing again in %.1f s", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_RETRY_SECONDS)

    async def _resolve_classes(self) -> None:
        """The EC2NodeClass controller, while the watcher runs (`services.watcher.nodeclasses`)."""
        assert self.resolver is not None
        self.controller = NodeClassController(
            self.resolver,
            self.nodeclasses,
            self.cluster.patch_nodeclass_status,
            self.record,
            self.clock.now,
            WATCH_ERRORS,
            cluster=self.cluster,
        )
        self.controller.changed = self._class_changed
        self.controller.pools = self.store.counters
        self.controller.synced = lambda: self.synced
        for name in self.nodeclasses.known():  # those deleted while no watcher ran among them
            self.controller.touched(name)
        await self.controller.run()

    async def _class_changed(self, nodeclass: str) -> None:
        """A class's readiness changed: the pools on it write their conditions again, and the
        overlays are resolved again (a pool launches from its class's catalog only while ready)."""
        self.overlays.dirty = True
        for fact in list(self._pools.values()):
            await self._condition(fact, self.clock.now())

    def _observe_classes(self, changes: Sequence[WatchEvent]) -> None:
        """Classes changed are resolved again; a NodeClaim gone wakes the deleted class it held."""
        for change in changes:
            if self.nodeclasses.observe(change) and self.controller is not None:
                self.controller.touched(change.key)
            released = self.nodeclasses.observe_claim(change)
            if released is not None and self.controller is not None:
                self.controller.touched(released)

    async def _list_and_watch(self, reason: str) -> None:
        facts = Facts()
        classes = NodeClasses()
        overlays = Overlays(self.overlays.enabled)
        async for page in self.store.read_recorded((*WATCHER_FACTS, *OVERLAY_FACTS, "NodeClassStatusChanged")):
            events = [decode(recorded) for recorded in page]
            facts.remember(events)
            classes.remember(events)
            overlays.remember(events)
        self.overlays = overlays
        self.facts = facts
        self.nodeclasses.recorded, self.nodeclasses.changes = classes.recorded, classes.changes
        snapshot = await self.cluster.snapshot()
        self.lists.labels(reason).inc()
        present = {e.key for e in snapshot.objects if e.kind == EC2NODECLASS}
        for gone in set(self.nodeclasses.documents) - present:
            del self.nodeclasses.documents[gone]
            if self.controller is not None:
                self.controller.touched(gone)
        self.nodeclasses.claims.clear()  # the list says which NodeClaims are left
        self._observe_classes(snapshot.objects)
        for name in self.nodeclasses.known():
            if self.nodeclasses.waiting(name) and self.controller is not None:
                self.controller.touched(name)  # a claim may have gone while the watch was down
        await self.record([*facts.resync(snapshot), *overlays.resync(snapshot)])
        self.synced = True
        if self.controller is not None and self.controller.pending:
            self.controller.wake.set()  # the classes set aside until the list was in
        changes: asyncio.Queue[WatchEvent] = asyncio.Queue()

        async def pump() -> None:
            async for change in self.cluster.watch(snapshot.resource_version):
                changes.put_nowait(change)

        pumping = asyncio.create_task(pump())
        try:
            while True:
                waiting = asyncio.create_task(changes.get())
                await asyncio.wait({waiting, pumping}, return_when=asyncio.FIRST_COMPLETED)
                if not waiting.done():
                    waiting.cancel()
                    pumping.result()  # the watch failed: raise its error
                    raise ConnectionError("the watch ended")
                batch = [waiting.result()]
                while not changes.empty():
                    batch.append(changes.get_nowait())
                self._observe_classes(batch)
                await self.record(
                    [fact for change in batch for fact in (*facts.observe(change), *overlays.observe(change))]
                )
        finally:
            pumping.cancel()
            with contextlib.suppress(asyncio.CancelledError, *WATCH_ERRORS):
                await pumping

    async def record(self, facts: Sequence[Fact]) -> None:
        """Append the facts in the order they were seen, in one transaction; an id the log
        already holds is dropped by the store (a fact reported again after a restart). Any unit
        refused raises, and the watcher lists again: a fact is never skipped."""
        if not facts:
            return
        now = self.clock.now()
        units = fact_units(facts, now)
        for fact, result in zip(facts, await self.store.append_units(units), strict=True):
            if isinstance(result, ReservationError) and fact.event.TYPE == "NodeClaimDeletionRequested":
                log.warning("a deletion of %s the log cannot take: %s", fact.event.stream_id, result)
                continue  # a claim the log does not know (or knows ended): nothing to terminate
            if isinstance(result, BaseException):
                raise FactRefused(f"the store refused {fact.event.TYPE} of {fact.event.stream_id}: {result}")
            self.appended += len(result)
            self.reported.labels(fact.event.TYPE).inc()
        for fact in facts:
            if fact.event.TYPE in ("NodePoolApplied", "NodePoolRejected"):
                self._pools[fact.event.stream_id] = fact
                await self._condition(fact, now)
            elif fact.event.TYPE == "NodePoolDeleted":
                self._pools.pop(fact.event.stream_id, None)

    async def _condition(self, fact: Fact, now: datetime) -> None:
        """The pool's conditions (ValidationSucceeded, NodeClassReady, Ready), written back as
        Karpenter's NodePool controllers do."""
        event = fact.event
        document = getattr(event, "nodepool_object", None) or {}
        previous = (document.get("status") or {}).get("conditions") or []
        readiness = {
            name: state
            for name in self.nodeclasses.documents
            if (state := self.nodeclasses.readiness(name)) is not None
        }
        nodeclass = pool_status.nodeclass_state(
            document, self.resolver is not None, readiness, set(self.nodeclasses.documents)
        )
        written = pool_status.conditions(getattr(event, "errors", None), now, previous, nodeclass)
        with contextlib.suppress(NotFound):  # deleted meanwhile: its deletion is the next fact
            await self.cluster.patch_nodepool_status(event.nodepool, {"conditions": written})

    async def _overlay_statuses(self) -> None:
        """Upstream's NodeOverlay controller: once something changed (or `REFRESH` passed), every
        overlay resolved against every pool's catalog, and each status written where it changed.
        A failure waits for the next round."""
        assert self.catalogs is not None
        while True:
            await asyncio.sleep(COUNT_SECONDS)
            stale = self._resolved_at is None or time.monotonic() - self._resolved_at >= OVERLAY_REFRESH
            if not self.synced or not (self.overlays.dirty or stale):
                continue
            self.overlays.dirty, self._resolved_at = False, time.monotonic()
            try:
                await self._write_overlay_statuses()
            except (CloudError, *WATCH_ERRORS) as exc:
                self.overlays.dirty = True
                log.warning("NodeOverlay statuses not written (%r); trying again", exc)

    async def _write_overlay_statuses(self) -> None:
        assert self.catalogs is not None
        overlays = self.overlays
        in_force = overlays.in_force()
        loaded = await self.catalogs.load(self._overlay_view(overlays))
        resolved = resolution(loaded, overlays.pools, in_force.values())
        now = self.clock.now()
        for name in in_force:
            previous = ((overlays.documents.get(name) or {}).get("status") or {}).get("conditions") or []
            written = overlay_conditions(name, resolved, now, previous)
            if previous and same_conditions(previous, written):
                continue
            with contextlib.suppress(NotFound):  # deleted meanwhile
                await self.cluster.patch_nodeoverlay_status(name, {"conditions": written})

    def _overlay_view(self, overlays: Overlays) -> SchedulingView:
        """The pools as the scheduler's and disruption's views hold them: on a cloud that resolves
        node classes (AWS: a resolver), `Catalogs.load` then gives each ready pool its
        EC2NodeClass's catalog, so an overlay's status says what the services apply; on the sim's
        cloud every pool has the default catalog."""
        return SchedulingView(
            pools=dict(overlays.pools), nodeclasses=self.nodeclasses.states(), gated=self.resolver is not None
        )

    async def _count(self) -> None:
        """Each pool's `nodes` and `resources`, from the log's counters, written when changed; a
        failure waits for the next round (the counts are the log's, never lost)."""
        while True:
            await asyncio.sleep(COUNT_SECONDS)
            if not self.synced:
                continue
            try:
                counters = await self.store.counters()
                for pool, counter in counters.items():
                    if counter.spec is None:
                        continue  # not in force (rejected or deleted): nothing to count on it
                    status = pool_status.counted(counter)
                    if self._counted.get(pool) != status:
                        await self.cluster.patch_nodepool_status(pool, status)
                        self._counted[pool] = status
            except NotFound:
                continue
            except WATCH_ERRORS as exc:
                log.warning("NodePool counts not written (%r); trying again", exc)
