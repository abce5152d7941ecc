"""Termination: every NodeClaim whose deletion was asked for is drained gracefully and its instance
deleted (upstream's `pkg/controllers/node/termination/`; the rules are `shared.termination`).

Replicas share the work through one work consumer on `NodeClaimDeletionRequested`: each claim is
drained by the replica its message went to, for as long as the drain takes (the replica tells
the server it is still working; the message is acknowledged once the claim is terminated). A
replica that dies leaves its messages unacknowledged, and the server hands them to another
replica, which resumes from what the log recorded: the drain's start, the pods evicted (a pod
gone from the node is not evicted again). Every replica keeps a projection of the claims, pools
and pods (a projection consumer), which each pass reads. The NodeClaim object's deletion is asked
for as the drain starts, and the `karpenter.sh/termination` finalizers go once it has finished.
"""

from __future__ import annotations

import asyncio
import time

from prometheus_client import Gauge

from services.termination.drain import ClaimDrain, DrainContext, log
from services.termination.metrics import DrainMetrics
from services.termination.projection import PROJECTED, Projection
from shared.bus.connection import BusSettings
from shared.bus.projection import ProjectionConsumer
from shared.bus.service import ServiceShell, database_answers
from shared.bus.topology import work_of
from shared.bus.work import WorkConsumer, still_working
from shared.clock import Clock
from shared.events import contracts as c
from shared.events.envelope import RecordedEvent
from shared.outages import OUTAGES
from shared.ports.cloud import CloudProvider
from shared.ports.cluster import Cluster
from shared.runtime.recorder import Recorder
from shared.store.eventstore import EventStore

PRODUCER = "termination"
PASS_SECONDS = 0.5
"""Wall seconds between two passes of one claim's drain."""
HEARTBEAT_FRACTION = 3
"""A drain tells the server it is alive this many times per `ack_wait`."""
ACK_WAIT = 30.0
CONCURRENCY = 1000
"""Claims one replica drains at once."""
REQUESTS_IN_FLIGHT = 64
"""Eviction and deletion requests one replica has open at once: a thousand drains asking at
once would time their requests out."""


class TerminationService:
    def __init__(
        self,
        store: EventStore,
        cloud: CloudProvider,
        cluster: Cluster,
        clock: Clock,
        bus: BusSettings | str,
        *,
        port: int = 0,
        ack_wait: float = ACK_WAIT,
        concurrency: int = CONCURRENCY,
    ) -> None:
        self.projection = Projection()
        self.shell = ServiceShell(PRODUCER, bus, port=port, readiness=[database_answers(store)])
        self.consumer = ProjectionConsumer(self.shell, store, self.projection.apply, validate=PROJECTED)
        (work,) = work_of(PRODUCER)  # NodeClaimDeletionRequested (`shared.bus.topology`)
        self.work = WorkConsumer(
            self.shell,
            work.event_type,
            self.terminate,
            store=store,
            ack_wait=ack_wait,
            concurrency=concurrency,
        )
        self.heartbeat = ack_wait / HEARTBEAT_FRACTION
        self.active: set[str] = set()
        self.finished: list[str] = []  # the claims this replica terminated
        registry = self.shell.registry
        Gauge(
            "nodewright_termination_draining", "NodeClaims this replica is terminating now.", registry=registry
        ).set_function(lambda: len(self.active))
        metrics = DrainMetrics.on(registry)
        self.drains = DrainContext(
            projection=self.projection,
            cluster=cluster,
            cloud=cloud,
            clock=clock,
            store=store,
            producer=PRODUCER,
            recorder=Recorder(cluster),
            requests=asyncio.Semaphore(REQUESTS_IN_FLIGHT),
            metrics=metrics,
            finished=self.finished,
        )
        """What this replica's drains share (`services.termination.drain`)."""

    async def run(self, stopping: asyncio.Event) -> None:
        await self.shell.run(stopping)

    # --- one claim, from its deletion request to its end -------------------------------------------

    async def terminate(self, event: RecordedEvent, request: c.Event) -> None:
        """Drain the claim and delete its instance; return once it is terminated (the message is
        then acknowledged). Safe to run again after a crash, or twice at once."""
        name = request.nodeclaim  # type: ignore[attr-defined]
        await self.consumer.reach(event.position)
        drain = ClaimDrain(self.drains, name)
        self.active.add(name)
        try:
            beat = time.monotonic()
            while not await self._step(drain):
                if time.monotonic() - beat > self.heartbeat:
                    await still_working()
                    beat = time.monotonic()
                await asyncio.sleep(PASS_SECONDS)
        finally:
            self.active.discard(name)

    async def _step(self, drain: ClaimDrain) -> bool:
        """A pass; a server out of reach (the cluster, the cloud, the store) only delays it."""
        try:
            return await drain.step()
        except OUTAGES as exc:
            log.warning("terminating nodeclaim %s: %r; trying again", drain.name, exc)
            return False
