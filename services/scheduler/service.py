"""The scheduler: pending pods in, NodeClaims out, never past a limit.

It follows the log from its last position into its projection, batches (a pass runs once no new
pod has come for `idle`, or `longest` after the first one, both on the shared clock), plans with
the pure pass (`shared.scheduling.packing`), and for each planned claim: `reserve_launch` (the
strict reservation against the pool's counter row), the cloud's `create`, then
NodeClaimLaunched, or NodeClaimLaunchFailed with the offerings put in the insufficient-capacity
cache so the next pass plans around them. It also turns the watcher's node facts into the
counted lifecycle (NodeClaimRegistered, NodeClaimInitialized). Replicas are safe: one holds a
PostgreSQL advisory lock and plans, the others wait to take over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import nats.errors
from prometheus_client import Counter, Gauge, Histogram
from sqlalchemy import text

from services.scheduler.projection import Projection
from shared.api.labels import NODEPOOL_LABEL
from shared.api.quantity import format_quantity, parse
from shared.bus.service import ServiceShell
from shared.clock import Clock
from shared.events import contracts as c
from shared.events.envelope import NewEvent
from shared.policy.counters import ReservationError
from shared.ports.cloud import CloudError, CloudProvider
from shared.scheduling.offerings import InstanceOption, Offer, UnavailableOfferings
from shared.scheduling.packing import PlannedClaim, claim_requirements, schedule
from shared.store.eventstore import EventStore, unit
from shared.store.gaps import GapWatch

PRODUCER = "scheduler"
LEADER_LOCK = 0x6E77_7363_6864  # "nwschd"
IDLE = timedelta(seconds=1)
LONGEST = timedelta(seconds=10)
POLL_SECONDS = 0.05
_IDS = uuid.UUID("1b7c6b0e-3d38-4cf1-9c0a-73636865646c")
log = logging.getLogger("nodewright.scheduler")


class SchedulerService:
    def __init__(
        self,
        store: EventStore,
        cloud: CloudProvider,
        clock: Clock,
        nats_url: str,
        *,
        port: int = 0,
        idle: timedelta = IDLE,
        longest: timedelta = LONGEST,
    ) -> None:
        self.store, self.cloud, self.clock = store, cloud, clock
        self.idle, self.longest = idle, longest
        self.projection = Projection()
        self.gaps = GapWatch(store)
        self.unavailable = UnavailableOfferings()
        self.catalog: list[InstanceOption] = []
        self.leading = False
        self.shell = ServiceShell(PRODUCER, nats_url, port=port, subjects=None, readiness=[self._ready])
        registry = self.shell.registry
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
        self.usage = Gauge(
            "karpenter_nodepools_usage", "Resources a NodePool uses.", ["nodepool", "resource_type"], registry=registry
        )
        self.limit = Gauge(
            "karpenter_nodepools_limit", "A NodePool's limits.", ["nodepool", "resource_type"], registry=registry
        )

    async def _ready(self) -> str | None:
        return None if self.leading else "waiting for the scheduler leader lock"

    async def run(self, stopping: asyncio.Event) -> None:
        await self.shell.start()
        try:
            async with self.store.engine.connect() as leader:
                while not stopping.is_set():
                    if await self._lead(leader):
                        break
                    await _wait(stopping, 1.0)
                else:
                    return
                try:
                    await self._follow(stopping)
                finally:
                    await leader.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": LEADER_LOCK})
                    await leader.commit()
        finally:
            await self.shell.stop()

    async def _lead(self, conn: Any) -> bool:
        held = await conn.scalar(text("SELECT pg_try_advisory_lock(:key)"), {"key": LEADER_LOCK})
        await conn.commit()
        self.leading = bool(held)
        return self.leading

    async def _follow(self, stopping: asyncio.Event) -> None:
        first: datetime | None = None
        last: datetime | None = None
        last_pass = self.clock.now()
        while not stopping.is_set():
            await self.catch_up()
            now = self.clock.now()
            waiting = self.projection.plannable()
            self.queue.set(len(waiting))
            if waiting and now - last_pass >= self.longest:  # pods still waiting: look again
                self.projection.changed = True
            if self.projection.changed and waiting:
                self.projection.changed = False
                first, last = first or now, now
            if first is not None and (now - last >= self.idle or now - first >= self.longest):
                last_pass = now
                try:
                    await self.plan_and_launch(now)
                except (nats.errors.Error, TimeoutError, OSError) as exc:  # the cloud out of reach: try again
                    log.warning("scheduling pass interrupted (%r); retrying", exc)
                    await _wait(stopping, 1.0)
                    continue
                first = last = None
            await _wait(stopping, POLL_SECONDS)

    async def catch_up(self) -> None:
        """Fold the log past the projection's position, in order and without holes: a position
        still being written (the store lets a later one commit first) is waited for, and one
        lost to a rollback is stepped over, as the relay does. Then record the lifecycle steps
        the watcher's node facts imply."""
        while True:
            hole = None
            async with contextlib.aclosing(self.store.read_all(self.projection.position)) as pages:
                async for page in pages:
                    ready = []
                    for event in page:
                        if event.position != self.projection.position + len(ready) + 1:
                            break
                        ready.append(event)
                    self.projection.apply(ready)
                    await self._lifecycle(ready)
                    if len(ready) < len(page):
                        hole = self.projection.position + 1
                        break
            if hole is None or not await self.gaps.lost(hole):
                return  # all read, or a writer is still on it: next time
            self.projection.position = hole

    async def _lifecycle(self, page: list[Any]) -> None:
        steps = {"NodeRegistered": c.NodeClaimRegistered, "NodeInitialized": c.NodeClaimInitialized}
        units = []
        for event in page:
            contract = steps.get(event.type)
            claim = event.data.get("nodeclaim")
            if contract is None or claim is None or claim not in self.projection.claims:
                continue
            pool = self.projection.claims[claim].nodepool
            fields = {"nodeclaim": claim, "nodepool": pool}
            if contract is c.NodeClaimRegistered:
                fields["node"] = event.data["node"]
            fact = contract(**fields)
            new = NewEvent.of(
                fact,
                occurred_at=event.occurred_at,
                producer=PRODUCER,
                causation_id=str(event.event_id),
                event_id=uuid.uuid5(_IDS, f"{contract.TYPE}/{claim}"),
            )
            units.append(unit(fact.stream_id, None, [new]))
        if units:
            for result in await self.store.append_units(units):
                if isinstance(result, BaseException):
                    log.warning("lifecycle step refused: %s", result)

    async def plan_and_launch(self, now: datetime) -> list[str]:
        """One pass; the names of the claims launched."""
        if not self.catalog:
            self.catalog = [_instance(t) for t in await self.cloud.instance_types()]
        live = await self.store.counters()
        remaining = {name: _remaining(live.get(name), pool) for name, pool in self.projection.pools.items()}
        for name, pool in self.projection.pools.items():
            if name in live:
                for resource, value in live[name].usage().items():
                    self.usage.labels(name, _resource_type(resource)).set(float(value))
            for resource, quantity in (pool.spec.limits or {}).items():
                self.limit.labels(name, _resource_type(resource)).set(float(quantity.value))
        with self.duration.time():
            plan = schedule(
                self.projection.plannable(),
                self.projection.capacity(),
                self.projection.templates(remaining),
                self.catalog,
                unavailable=self.unavailable,
                now=now,
                running=self.projection.running(),
            )
        self.unschedulable.set(len(plan.unplaced))
        self.ignored.set(len(plan.ignored))
        for pod, why in plan.unplaced.items():
            log.info("could not schedule pod %s: %s", pod, why)
        launched = []
        for claim in plan.claims:
            name = await self._launch(claim, now)
            if name is not None:
                launched.append(name)
        await self.catch_up()
        return launched

    async def _launch(self, claim: PlannedClaim, now: datetime) -> str | None:
        pool = self.projection.pools[claim.nodepool]
        name = f"{claim.nodepool}-{uuid.uuid4().hex[:8]}"
        requirements = [r.to_dict() for v in claim_requirements(claim).values() for r in v.to_requirements()]
        created = c.NodeClaimCreated(
            nodeclaim=name,
            nodepool=claim.nodepool,
            instance_types=[
                c.InstanceTypeOption(name=o.instance.name, capacity=_strings(o.instance.capacity), price=o.price)
                for o in claim.options
            ],
            pods=claim.pods,
            requirements=requirements,
        )
        try:
            await self.store.reserve_launch([created], occurred_at=now, producer=PRODUCER)
        except ReservationError as exc:
            log.info("nodepool %s: not creating a NodeClaim: %s", claim.nodepool, exc)
            return None
        self.created.labels("provisioning", claim.nodepool, "false").inc()
        template = pool.spec.template
        spec = {
            "nodeclaim": name,
            "nodepool": claim.nodepool,
            "requirements": requirements,
            "requests": _strings(claim.used),
            "labels": {**template.labels, NODEPOOL_LABEL: claim.nodepool},
            "taints": [t.to_dict() for t in template.spec.taints or []],
            "startupTaints": [t.to_dict() for t in template.spec.startup_taints or []],
        }
        try:
            instance = await self.cloud.create(spec)
        except (CloudError, nats.errors.Error, TimeoutError, OSError) as exc:
            # whatever went wrong, the reservation is released and the pods are planned again;
            # an offering the cloud refused is skipped for a while, a lost connection is not
            if isinstance(exc, CloudError):
                for option in claim.options:
                    for offer in option.offers:
                        self.unavailable.mark(option.instance.name, offer.zone, offer.capacity_type, now)
            failed = c.NodeClaimLaunchFailed(
                nodeclaim=name, nodepool=claim.nodepool, reason=type(exc).__name__, message=str(exc)[:1000]
            )
            await self.store.append(failed.stream_id, None, [NewEvent.of(failed, occurred_at=now, producer=PRODUCER)])
            return None
        launched = c.NodeClaimLaunched(
            nodeclaim=name,
            nodepool=claim.nodepool,
            instance_type=instance["instanceType"],
            capacity=instance["capacity"],
            provider_id=instance["providerID"],
            capacity_type=instance.get("capacityType"),
            zone=instance.get("zone"),
        )
        await self.store.append(launched.stream_id, None, [NewEvent.of(launched, occurred_at=now, producer=PRODUCER)])
        return name


def _resource_type(name: str) -> str:
    """Karpenter's `resource_type` label: lowercase, `-` as `_`."""
    return name.lower().replace("-", "_")


def _remaining(counters: Any, pool: Any) -> Mapping[str, Decimal] | None:
    """What the pool's limits leave, from its counter row (the reservation checks again)."""
    limits = {k: q.value for k, q in (pool.spec.limits or {}).items()}
    if not limits:
        return None
    usage = counters.usage() if counters is not None else {}
    return {k: limit - usage.get(k, Decimal(0)) for k, limit in limits.items()}


def _instance(raw: Mapping[str, Any]) -> InstanceOption:
    offers = tuple(Offer(o["zone"], o["capacityType"], float(o["price"])) for o in raw["offerings"])
    return InstanceOption(
        raw["name"],
        {k: parse(str(v)) for k, v in raw["capacity"].items()},
        {k: parse(str(v)) for k, v in raw["allocatable"].items()},
        dict(raw["labels"]),
        offers,
    )


def _strings(values: Mapping[str, Decimal]) -> dict[str, str]:
    return {k: format_quantity(v, binary=k in ("memory", "ephemeral-storage")) for k, v in values.items()}


async def _wait(stopping: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)
