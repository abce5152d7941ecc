"""The scheduler: pending pods in, NodeClaims out, never past a limit.

It follows the log from its last position into its projection and batches: a pass runs once no
new pod has come for `idle`, or `longest` after the first one, both on the shared clock. Three
of upstream's controllers share the process: provisioning (`provisioning`: the pass and the
strict reservations), the NodeClaim lifecycle (`lifecycle`: launches, and the registered and
initialized steps the watcher's node facts imply) and garbage collection (`garbage`). Replicas
are safe: one holds a PostgreSQL advisory lock and leads, the others wait to take over; every
reservation carries the lock's fence (`shared.runtime.ledger`, `shared.store.leader`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import nats.errors

from services.scheduler.garbage import GarbageCollection
from services.scheduler.interruption import Interruption
from services.scheduler.interruption_metrics import InterruptionMetrics
from services.scheduler.lifecycle import PRODUCER, Lifecycle, Offerings
from services.scheduler.metrics import PROVISIONER, SchedulerMetrics
from services.scheduler.projection import PROJECTED, Projection
from services.scheduler.provisioning import Provisioner
from services.scheduler.static import StaticProvisioning
from shared.bus.connection import BusSettings
from shared.bus.projection import ProjectionConsumer
from shared.bus.service import ServiceShell, database_answers
from shared.clock import Clock
from shared.config import Settings
from shared.kube.nodeclaims import READS, NodeClaimRecords
from shared.ports.cloud import CloudProvider
from shared.ports.cluster import Cluster
from shared.ports.queue import MessageQueue
from shared.runtime import logs
from shared.runtime.leading import lead, quiet, wait
from shared.runtime.ledger import Ledger
from shared.runtime.nodeclaims import NodeClaimWriter
from shared.runtime.recorder import Recorder
from shared.scheduling.rules import MinValuesPolicy
from shared.store.eventstore import EventStore
from shared.store.leader import LeaderLock

__all__ = ["PRODUCER", "SchedulerService"]

LEADER_LOCK = 0x6E77_7363_6864  # "nwschd"
IDLE = timedelta(seconds=1)
LONGEST = timedelta(seconds=10)
PASS_TIMEOUT = timedelta(seconds=Settings.model_fields["scheduling_timeout"].default)  # upstream's Solve: a minute
log = logs.controller("provisioner")


class SchedulerService:
    """Three of upstream's controllers in one process, each a unit of its own: provisioning
    (`provisioning.Provisioner`), the NodeClaim lifecycle (`lifecycle.Lifecycle`) and garbage
    collection (`garbage.GarbageCollection`); they write through one `Ledger` while leading."""

    def __init__(
        self,
        store: EventStore,
        cloud: CloudProvider,
        clock: Clock,
        bus: BusSettings | str,
        *,
        port: int = 0,
        idle: timedelta = IDLE,
        longest: timedelta = LONGEST,
        cluster: Cluster | None = None,
        timeout: timedelta = PASS_TIMEOUT,
        monotonic: Callable[[], float] = time.monotonic,
        queue: MessageQueue | None = None,
        nodeclasses: bool = False,
        min_values_policy: MinValuesPolicy = MinValuesPolicy.STRICT,
        static_capacity: bool = False,
    ) -> None:
        """`cluster`: where the pods' FailedScheduling and Nominated events and the NodeClaim
        objects go (none: nowhere);
        `timeout`: how long one pass may compute, on `monotonic` (real time: the work is this
        process's, not the simulated clock's), before it launches what it planned and leaves
        the rest to the next pass;
        `queue`: the interruption queue (none: interruption messages are not handled);
        `nodeclasses`: the cloud resolves EC2NodeClasses (AWS), so a pool whose class is not
        Ready launches nothing (the sim's classes are always ready);
        `min_values_policy`: upstream's (NODEWRIGHT_MIN_VALUES_POLICY), for every pass;
        `static_capacity`: the `StaticCapacity` gate: static NodePools get their replicas
        (`static`); off, nothing launches for them, as upstream's controller is not started."""
        self.store, self.cloud, self.clock = store, cloud, clock
        self.claim_records = NodeClaimRecords()
        self.objects = NodeClaimWriter(cluster, self.claim_records)  # the NodeClaims the log implies
        self.idle, self.longest = idle, longest
        self.projection = Projection(gated=nodeclasses)
        self.lock = LeaderLock(store, LEADER_LOCK)
        self.shell = ServiceShell(PRODUCER, bus, port=port, readiness=[database_answers(store)])
        self.consumer = ProjectionConsumer(
            self.shell,
            store,
            lambda event: (self.projection.apply((event,)), self.claim_records.apply(event)),
            validate=PROJECTED | READS,
        )
        self.metrics = SchedulerMetrics.on(self.shell.registry)
        self.ledger = Ledger(store, self.lock, self.consumer, producer=PRODUCER)
        self.offerings = Offerings(cloud)
        self.lifecycle = Lifecycle(self.ledger, self.projection, self.offerings, self.metrics.nodes_created)
        self.garbage = GarbageCollection(self.ledger, self.projection, cloud, self.objects, clock.now())
        recorder = Recorder(cluster)
        self.interruption = (
            None
            if queue is None
            else Interruption(
                queue,
                self.ledger,
                self.projection,
                self.claim_records,
                self.offerings,
                recorder,
                InterruptionMetrics.on(self.shell.registry),
                clock,
            )
        )
        self.provisioner = Provisioner(
            self.ledger,
            self.projection,
            self.offerings,
            self.lifecycle,
            recorder,
            self.metrics,
            timeout=timeout,
            monotonic=monotonic,
            min_values_policy=min_values_policy,
        )
        self.static = (
            StaticProvisioning(self.ledger, self.projection, self.offerings, self.lifecycle, self.metrics)
            if static_capacity
            else None
        )

    async def run(self, stopping: asyncio.Event) -> None:
        """Follow the bus from the start (every replica keeps its projection warm); wait for the
        leader lock, lead until it is lost or the service stops, and wait again."""
        await self.shell.start(stopping)
        try:
            await lead(self.lock, self.metrics.leader, stopping, self._take_over, self._follow, log)
        finally:
            await self.objects.stop()
            if self.interruption is not None:
                await self.interruption.queue.close()
            await self.shell.stop()

    @property
    def leading(self) -> bool:
        return self.lock.holding

    async def _take_over(self) -> None:
        """A new leader plans on a projection holding every reservation of the leaders before it
        (`Ledger.take_over`)."""
        self.lifecycle.taken_over()
        await self.ledger.take_over()
        await self.objects.restart()

    async def _follow(self, stopping: asyncio.Event) -> None:
        """The leader's loop; the interruption queue is long-polled beside it while leading."""
        if self.interruption is None:
            return await self._plan(stopping)
        watching = asyncio.create_task(self.interruption.run(stopping))
        try:
            await self._plan(stopping)
        finally:
            watching.cancel()  # a message taken and not yet deleted comes back to the next leader
            with contextlib.suppress(asyncio.CancelledError):
                await watching

    async def _plan(self, stopping: asyncio.Event) -> None:
        first: datetime | None = None
        last: datetime | None = None
        last_pass = self.clock.now()
        while not stopping.is_set():
            now = self.clock.now()
            await self.ledger.check()  # step down soon, even with nothing to do
            await self.lifecycle.record_owed()
            self.objects.kick(self.objects.keep_lifecycle)  # in the background: the API never holds the log up
            # a disruption's replacements, or a launch left unrecorded
            if self.projection.unlaunched() and not await _reaching_cloud(
                self.lifecycle.launch_unlaunched(now), stopping
            ):
                continue
            if self.garbage.due(now) and not await _reaching_cloud(self.garbage.collect(now), stopping):
                continue
            if self.static is not None and not await _reaching_cloud(self.static.provision(now), stopping):
                continue
            waiting = self.projection.plannable()
            self.metrics.queue.labels(PROVISIONER, "").set(len(waiting))
            if waiting and first is None and now - last_pass >= self.longest:  # pods still waiting: look again
                self.projection.changed = True  # (only to open a batch: marked on every tick, it never idles)
            if self.projection.changed and waiting:
                self.projection.changed = False
                first, last = first or now, now
            if first is not None and (now - last >= self.idle or now - first >= self.longest):
                last_pass = now
                if not await _reaching_cloud(self.provisioner.plan_and_launch(now), stopping):
                    continue
                first = last = None
            await quiet(self.consumer, stopping)


async def _reaching_cloud(work: Awaitable[object], stopping: asyncio.Event) -> bool:
    """Run a step that talks to the cloud; False, after a pause, when the cloud was out of
    reach (the step is tried again: a create asked twice for one claim gives one instance)."""
    try:
        await work
    except (nats.errors.Error, TimeoutError, OSError) as exc:
        log.warning("interrupted (%r); retrying", exc)
        await wait(stopping, 1.0)
        return False
    return True
