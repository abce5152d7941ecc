"""The scheduler: pending pods in, NodeClaims out, never past a limit.

It follows the log from its last position into its projection, batches (a pass runs once no new
pod has come for `idle`, or `longest` after the first one, both on the shared clock), plans with
the pure pass (`shared.scheduling.packing`), and for each planned claim: `reserve_launch` (the
strict reservation against the pool's counter row), the cloud's `create`, then
NodeClaimLaunched, or NodeClaimLaunchFailed with the offerings put in the insufficient-capacity
cache so the next pass plans around them. It also turns the watcher's node facts into the
counted lifecycle (NodeClaimRegistered, NodeClaimInitialized), kept on the NodeClaim API objects
(`shared.runtime.nodeclaims`). Replicas are safe: one holds a
PostgreSQL advisory lock and plans, the others wait to take over; every reservation carries the
lock's fence, so a replica that lost the lock without noticing can reserve nothing
(`shared.store.leader`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import nats.errors
from prometheus_client import Counter, Gauge, Histogram

from services.scheduler.projection import PROJECTED, ClaimInFlight, Projection
from shared import acts
from shared.api.core import Requirement
from shared.api.labels import CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, ZONE_LABEL
from shared.api.nodepool import NodePool
from shared.bus.connection import BusSettings
from shared.bus.projection import ProjectionConsumer
from shared.bus.service import ServiceShell, database_answers
from shared.clock import Clock
from shared.config import Settings
from shared.events import contracts as c
from shared.events.envelope import NewEvent
from shared.kube.nodeclaims import READS, NodeClaimRecords
from shared.policy.counters import ReservationError
from shared.ports.cloud import CloudError, CloudProvider
from shared.ports.cluster import NORMAL, POD, WARNING, Cluster, KubeEvent
from shared.runtime import logs
from shared.runtime.leading import lead, quiet, wait
from shared.runtime.nodeclaims import NodeClaimWriter
from shared.runtime.recorder import Recorder
from shared.scheduling.claims import claim_created, claim_name, instance_option
from shared.scheduling.offerings import InstanceOption, UnavailableOfferings
from shared.scheduling.packing import schedule
from shared.scheduling.requirements import Requirements
from shared.scheduling.values import Bound, Plan, PlannedClaim
from shared.store.eventstore import EventStore, NotLeader, StoreError, unit
from shared.store.leader import LeaderLock

PRODUCER = "scheduler"
LEADER_LOCK = 0x6E77_7363_6864  # "nwschd"
IDLE = timedelta(seconds=1)
LONGEST = timedelta(seconds=10)
PASS_TIMEOUT = timedelta(seconds=Settings.model_fields["scheduling_timeout"].default)  # upstream's Solve: a minute
LAUNCHES_AT_ONCE = 16
LOCK_CHECK_SECONDS = 2.0
INSTANCE_GONE = "InstanceTerminated"
GARBAGE_EVERY = timedelta(minutes=2)
_IDS = uuid.UUID("1b7c6b0e-3d38-4cf1-9c0a-73636865646c")
log = logs.controller("provisioner")
lifecycle = logs.controller("nodeclaim.lifecycle", kind="NodeClaim")


class SchedulerService:
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
    ) -> None:
        """`cluster`: where the pods' FailedScheduling and Nominated events and the NodeClaim
        objects go (none: nowhere);
        `timeout`: how long one pass may compute, on `monotonic` (real time: the work is this
        process's, not the simulated clock's), before it launches what it planned and leaves
        the rest to the next pass."""
        self.store, self.cloud, self.clock = store, cloud, clock
        self.recorder = Recorder(cluster)
        self.claim_records = NodeClaimRecords()
        self.objects = NodeClaimWriter(cluster, self.claim_records)  # the NodeClaims the log implies
        self.idle, self.longest = idle, longest
        self.timeout, self.monotonic = timeout, monotonic
        self.projection = Projection()
        self.unavailable = UnavailableOfferings()
        self.catalog: list[InstanceOption] = []
        self.lock = LeaderLock(store, LEADER_LOCK)
        self.looked_at: set[str] = set()  # orphaned claims the garbage collection has seen
        self.garbage_after = clock.now()
        self.requested: set[tuple[str, str]] = set()  # owed lifecycle steps this leader appended
        self.appended = 0  # the last position this leader's own appends reached
        self.shell = ServiceShell(PRODUCER, bus, port=port, readiness=[database_answers(store)])
        self.consumer = ProjectionConsumer(
            self.shell,
            store,
            lambda event: (self.projection.apply((event,)), self.claim_records.apply(event)),
            validate=PROJECTED | READS,
        )
        registry = self.shell.registry
        self.leader_gauge = Gauge("nodewright_scheduler_leader", "1 while this replica plans.", registry=registry)
        self.created = Counter(
            "karpenter_nodeclaims_created_total",
            "NodeClaims created.",
            ["reason", "nodepool", "min_values_relaxed"],
            registry=registry,
        )
        self.unschedulable = Gauge(
            "karpenter_scheduler_unschedulable_pods_count", "Pods the last pass could not place.", registry=registry
        )
        self.ignored = Gauge(
            "karpenter_scheduler_ignored_pods_count", "Pods the last pass left alone.", registry=registry
        )
        self.duration = Histogram(
            "karpenter_scheduler_scheduling_duration_seconds", "Duration of one scheduling pass.", registry=registry
        )
        self.queue = Gauge("karpenter_scheduler_queue_depth", "Pods waiting for a pass.", registry=registry)
        self.timeouts = Counter(
            "nodewright_scheduler_pass_timeouts_total",
            "Passes that reached their time bound and left pods to the next pass.",
            registry=registry,
        )
        self.deferred = Gauge(
            "nodewright_scheduler_deferred_pods", "Pods the last pass left to the next one.", registry=registry
        )
        self.usage = Gauge(
            "karpenter_nodepools_usage", "Resources a NodePool uses.", ["nodepool", "resource_type"], registry=registry
        )
        self.limit = Gauge(
            "karpenter_nodepools_limit", "A NodePool's limits.", ["nodepool", "resource_type"], registry=registry
        )

    async def run(self, stopping: asyncio.Event) -> None:
        """Follow the bus from the start (every replica keeps its projection warm); wait for the
        leader lock, lead until it is lost or the service stops, and wait again."""
        await self.shell.start(stopping)
        try:
            await lead(self.lock, self.leader_gauge, stopping, self._take_over, self._follow, log)
        finally:
            await self.objects.stop()
            await self.shell.stop()

    @property
    def leading(self) -> bool:
        return self.lock.holding

    async def _take_over(self) -> None:
        """A new leader plans on a projection holding every reservation of the leaders before it:
        the lock waited for those in flight (`shared.store.leader`), so the log's head now covers
        them, and the projection reaches it (from the bus, or from the store)."""
        self.requested.clear()
        await self.consumer.reach(await self.store.head_position())
        await self.objects.restart()

    async def _follow(self, stopping: asyncio.Event) -> None:
        first: datetime | None = None
        last: datetime | None = None
        last_pass = self.clock.now()
        checked = time.monotonic()
        while not stopping.is_set():
            now = self.clock.now()
            if time.monotonic() >= checked + LOCK_CHECK_SECONDS:  # step down soon, even with nothing to do
                checked = time.monotonic()
                if not await self.lock.held():
                    raise NotLeader(self.lock.fence)
            await self._record_lifecycle()
            self.objects.kick(self.objects.keep_lifecycle)  # in the background: the API never holds the log up
            # a disruption's replacements, or a launch left unrecorded
            if self.projection.unlaunched() and not await _reaching_cloud(self.launch_unlaunched(now), stopping):
                continue
            if self._garbage_due(now) and not await _reaching_cloud(self.collect_garbage(now), stopping):
                continue
            waiting = self.projection.plannable()
            self.queue.set(len(waiting))
            if waiting and first is None and now - last_pass >= self.longest:  # pods still waiting: look again
                self.projection.changed = True  # (only to open a batch: marked on every tick, it never idles)
            if self.projection.changed and waiting:
                self.projection.changed = False
                first, last = first or now, now
            if first is not None and (now - last >= self.idle or now - first >= self.longest):
                last_pass = now
                if not await _reaching_cloud(self.plan_and_launch(now), stopping):
                    continue
                first = last = None
            await quiet(self.consumer, stopping)

    async def _record_lifecycle(self) -> None:
        """Record the claim steps the watcher's node facts imply (NodeClaimRegistered, then
        NodeClaimInitialized), each with an id of its own: once in the log, however often asked."""
        owed = [o for key, o in self.projection.owed.items() if key not in self.requested]
        if not owed:
            return
        owed.sort(key=lambda o: (o.type != "NodeClaimRegistered", o.occurred_at))
        units = []
        for step in owed:
            fields: dict[str, Any] = {"nodeclaim": step.nodeclaim, "nodepool": step.nodepool}
            if step.type == "NodeClaimRegistered":
                fields["node"] = step.node
            fact = (
                c.NodeClaimRegistered(**fields)
                if step.type == "NodeClaimRegistered"
                else c.NodeClaimInitialized(**fields)
            )
            new = NewEvent.of(
                fact,
                occurred_at=step.occurred_at,
                producer=PRODUCER,
                causation_id=step.causation_id,
                event_id=uuid.uuid5(_IDS, f"{step.type}/{step.nodeclaim}"),
            )
            units.append(unit(fact.stream_id, None, [new]))
        results = await self.store.append_units(units)
        for step, result in zip(owed, results, strict=True):
            self.requested.add((step.nodeclaim, step.type))
            if isinstance(result, BaseException):
                log.warning("lifecycle step refused: %s", result)
            elif result:
                self.appended = max(self.appended, *result)
                said = acts.registered_nodeclaim if step.type == "NodeClaimRegistered" else acts.initialized_nodeclaim
                message, fields = said(step.nodeclaim, step.node)
                lifecycle.info(message, **fields)
        self.requested.intersection_update(self.projection.owed)

    async def plan_and_launch(self, now: datetime) -> list[str]:
        """One pass; the names of the claims launched."""
        if not self.catalog:
            self.catalog = [instance_option(t) for t in await self.cloud.instance_types()]
        live = await self.store.counters()
        remaining = {name: _remaining(live.get(name), pool) for name, pool in self.projection.pools.items()}
        for name, pool in self.projection.pools.items():
            if name in live:
                for resource, value in live[name].usage().items():
                    self.usage.labels(name, resource_type(resource)).set(float(value))
            for resource, quantity in (pool.spec.limits or {}).items():
                self.limit.labels(name, resource_type(resource)).set(float(quantity.value))
        waiting = self.projection.plannable()
        with self.duration.time():
            started = self.monotonic()
            plan = schedule(
                waiting,
                self.projection.capacity(),
                self.projection.templates(remaining),
                self.catalog,
                daemonsets=list(self.projection.daemonsets.values()),
                unavailable=self.unavailable,
                now=now,
                running=self.projection.running(),
                bound=Bound(deadline=started + self.timeout.total_seconds(), clock=self.monotonic),
            )
        self._timed_out(plan)
        reconcile_id = str(uuid.uuid4())
        seconds, sizes = self.monotonic() - started, [len(c.pods) for c in plan.claims]
        for message, fields in acts.scheduled([p.key for p in waiting], seconds, sizes, plan.placed, reconcile_id):
            log.info(message, **fields)
        self.unschedulable.set(len(plan.unplaced))
        self.ignored.set(len(plan.ignored))
        events = [
            KubeEvent(POD, pod, WARNING, "FailedScheduling", f"Failed to schedule pod, {why}", self._uid(pod))
            for pod, why in plan.unplaced.items()
        ]
        events += [self._nominated(pod, target) for pod, target in plan.placed.items()]
        for claim in plan.claims:
            name = await self._reserve(claim, now, reconcile_id)
            if name is not None:
                events += [self._nominated(pod, name) for pod in claim.pods]
        await self.consumer.reach(self.appended)
        launched = await self.launch_unlaunched(now)
        await self.recorder.publish(events, now)  # after the launches: events never hold them up
        return launched

    def _timed_out(self, plan: Plan) -> None:
        """A pass that hit its bound says so; the pods it did not reach start the next batch."""
        self.deferred.set(len(plan.deferred))
        if not plan.timed_out:
            return
        self.timeouts.inc()
        self.projection.changed = True
        planned = len(plan.placed) + sum(len(c.pods) for c in plan.claims)
        log.warning(
            "scheduling pass stopped at its %.0f s bound: %d pods planned, %d unschedulable, %d left to the next pass",
            self.timeout.total_seconds(),
            planned,
            len(plan.unplaced),
            len(plan.deferred),
        )

    def _uid(self, pod: str) -> str:
        known = self.projection.pending.get(pod)
        return known.uid if known is not None else ""

    def _nominated(self, pod: str, target: str) -> KubeEvent:
        """Upstream's Nominated event: the claim, and the node once there is one."""
        node = self.projection.nodes.get(target)
        if node is None:
            where = f"nodeclaim/{target}"
        elif node.nodeclaim:
            where = f"nodeclaim/{node.nodeclaim}, node/{target}"
        else:
            where = f"node/{target}"
        return KubeEvent(POD, pod, NORMAL, "Nominated", f"Pod should schedule on: {where}", self._uid(pod))

    async def _reserve(self, claim: PlannedClaim, now: datetime, reconcile_id: str = "") -> str | None:
        """The strict reservation of a planned claim: its name, or None when a limit refused it."""
        name = claim_name(claim.nodepool)
        created = claim_created(name, claim)
        try:
            positions = await self.store.reserve_launch(
                [created], occurred_at=now, producer=PRODUCER, fence=self.lock.fence
            )
        except ReservationError as exc:
            log.info("nodepool %s: not creating a NodeClaim: %s", claim.nodepool, exc)
            return None
        self.appended = max(self.appended, *positions)
        self.created.labels("provisioning", claim.nodepool, "false").inc()
        types = [t.name for t in created.instance_types]
        message, fields = acts.created_nodeclaim(claim.nodepool, name, created.requests, types, reconcile_id)
        log.info(message, **fields)
        return name

    async def launch_unlaunched(self, now: datetime) -> list[str]:
        """Launch every claim created and not launched yet (`Projection.unlaunched`), like
        upstream's NodeClaim lifecycle controller: a pass's own, the replacements a disruption
        ordered, and any a previous leader reserved without recording the outcome. The cloud's
        create is idempotent per claim, so a claim the cloud launched before a crash gets its
        instance back, never a second one. Once the cloud is out of reach the launches not yet
        started wait for the next try. The names of the claims launched."""
        waiting = self.projection.unlaunched()
        if not waiting:
            return []
        gate = asyncio.Semaphore(LAUNCHES_AT_ONCE)
        unreachable: list[BaseException] = []

        async def one(name: str) -> str | None:
            async with gate:
                if unreachable:
                    return None
                try:
                    return await self._launch(name, now)
                except (nats.errors.Error, TimeoutError, OSError) as exc:
                    unreachable.append(exc)
                    return None

        outcomes = await asyncio.gather(*(one(name) for name in waiting))
        await self.consumer.reach(self.appended)
        if unreachable:  # every launch has ended: only now may the pass end
            raise unreachable[0]
        return [name for name in outcomes if name is not None]

    def _garbage_due(self, now: datetime) -> bool:
        """At once for a claim whose node just went; again every GARBAGE_EVERY for those whose
        instance was still running then (upstream's garbage collection runs every 2 minutes)."""
        orphaned = self.projection.orphaned()
        return any(name not in self.looked_at for name in orphaned) or (bool(orphaned) and now >= self.garbage_after)

    async def collect_garbage(self, now: datetime) -> list[str]:
        """Upstream's NodeClaim garbage collection: a claim whose node was deleted and whose
        instance the cloud no longer runs (a spot reclaim, a deletion outside nodewright) is
        recorded `NodeClaimTerminated`, so it stops counting against its pool's limits and
        budgets. One whose instance still runs is looked at again later. The names of those ended."""
        running = {i.get("nodeclaim") for i in await self.cloud.list()}
        self.garbage_after = now + GARBAGE_EVERY
        ended = []
        for name in self.projection.orphaned():
            self.looked_at.add(name)
            if name not in running:
                self.projection.orphans.discard(name)  # recorded, or refused (logged): either way not asked again
                pool = self.projection.claims[name].nodepool
                gone = c.NodeClaimTerminated(nodeclaim=name, nodepool=pool, reason=INSTANCE_GONE)
                await self._record(gone, now)
                ended.append(name)
        await self.consumer.reach(self.appended)
        self.looked_at.intersection_update(self.projection.orphaned())
        self.objects.release(ended)  # ended here, not by termination: their objects go too
        return ended

    async def _launch(self, name: str, now: datetime) -> str | None:
        """The cloud's create for one claim, then NodeClaimLaunched; a refusal records
        NodeClaimLaunchFailed (the reservation is released and the offerings the cloud refused
        are skipped for a while). A lost connection records nothing: the claim stays unlaunched
        and is tried again."""
        claim = self.projection.claims[name]
        pool = self.projection.pools.get(claim.nodepool)
        try:
            if pool is None:
                raise CloudError(f"nodepool {claim.nodepool} is not in service")
            instance = await self.cloud.create(self._launch_spec(name, claim, pool))
        except CloudError as exc:
            if pool is not None:
                self._mark_unavailable(claim, now)
            failed = c.NodeClaimLaunchFailed(
                nodeclaim=name, nodepool=claim.nodepool, reason=type(exc).__name__, message=str(exc)[:1000]
            )
            await self._record(failed, now)
            message, fields = acts.failed_launching(name, str(exc))
            lifecycle.error(message, **fields)
            return None
        launched = c.NodeClaimLaunched(
            nodeclaim=name,
            nodepool=claim.nodepool,
            instance_type=instance["instanceType"],
            capacity=instance["capacity"],
            provider_id=instance["providerID"],
            capacity_type=instance.get("capacityType"),
            zone=instance.get("zone"),
            allocatable=instance.get("allocatable") or {},
            labels=instance.get("labels") or {},
        )
        await self._record(launched, now)
        where = (launched.provider_id, launched.instance_type, launched.zone, launched.capacity_type)
        message, fields = acts.launched_nodeclaim(name, *where, launched.allocatable)
        lifecycle.info(message, **fields)
        return name

    def _launch_spec(self, name: str, claim: ClaimInFlight, pool: NodePool) -> dict[str, Any]:
        template = pool.spec.template
        return {
            "nodeclaim": name,
            "nodepool": claim.nodepool,
            "requirements": claim.requirements,
            "requests": claim.requests,
            "labels": {**template.labels, NODEPOOL_LABEL: claim.nodepool},
            "taints": [t.to_dict() for t in template.spec.taints or []],
            "startupTaints": [t.to_dict() for t in template.spec.startup_taints or []],
        }

    def _mark_unavailable(self, claim: ClaimInFlight, now: datetime) -> None:
        """Every offering the claim allowed goes in the insufficient-capacity cache."""
        wanted = Requirements.of(Requirement.model_validate(r) for r in claim.requirements)
        types, zones, capacity = (wanted.get(k) for k in (INSTANCE_TYPE_LABEL, ZONE_LABEL, CAPACITY_TYPE_LABEL))
        for option in self.catalog:
            if types is not None and not types.has(option.name):
                continue
            for offer in option.offers:
                if (zones is None or zones.has(offer.zone)) and (capacity is None or capacity.has(offer.capacity_type)):
                    self.unavailable.mark(option.name, offer.zone, offer.capacity_type, now)

    async def _record(self, event: c.NodeClaimEvent, now: datetime) -> None:
        """A launch outcome, with an id of its own per claim: recorded once, however often tried."""
        new = NewEvent.of(
            event,
            occurred_at=now,
            producer=PRODUCER,
            event_id=uuid.uuid5(_IDS, f"{event.TYPE}/{event.nodeclaim}"),
        )
        try:
            positions = await self.store.append(event.stream_id, None, [new])
        except (StoreError, ReservationError) as exc:
            log.warning("claim %s: %s not recorded: %s", event.nodeclaim, event.TYPE, exc)
            return
        self.appended = max(self.appended, *positions)


def resource_type(name: str) -> str:
    """Karpenter's `resource_type` label: lowercase, `-` as `_`."""
    return name.lower().replace("-", "_")


def _remaining(counters: Any, pool: Any) -> Mapping[str, Decimal] | None:
    """What the pool's limits leave, from its counter row (the reservation checks again)."""
    limits = {k: q.value for k, q in (pool.spec.limits or {}).items()}
    if not limits:
        return None
    usage = counters.usage() if counters is not None else {}
    return {k: limit - usage.get(k, Decimal(0)) for k, limit in limits.items()}


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
