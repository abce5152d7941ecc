"""The NodeClaim lifecycle, as upstream's `pkg/controllers/nodeclaim/lifecycle`: launch every
claim created and not launched yet (a pass's own, a disruption's replacements, one a previous
leader reserved without recording the outcome), and turn the watcher's node facts into the
counted steps NodeClaimRegistered and NodeClaimInitialized.

Each step is recorded with an id of its own per claim (`record`), so it is once in the log
however often it is tried; the cloud's create is idempotent per claim, so a retried launch gets
the same instance, never a second one.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import nats.errors
from prometheus_client import Counter

from services.scheduler.projection import ClaimInFlight, Projection
from shared import acts
from shared.api.core import Requirement
from shared.api.labels import CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, ZONE_LABEL
from shared.api.nodepool import NodePool
from shared.events import contracts as c
from shared.events.envelope import NewEvent
from shared.policy.counters import ReservationError
from shared.ports.cloud import (
    CloudError,
    CloudProvider,
    CloudUnreachable,
    InsufficientCapacityError,
    NoCompatibleInstanceTypes,
)
from shared.runtime import logs
from shared.runtime.catalogs import Catalogs, Loaded
from shared.runtime.ledger import Ledger
from shared.scheduling.offerings import InstanceOption, UnavailableOfferings
from shared.scheduling.requirements import Requirements
from shared.scheduling.view import SchedulingView
from shared.store.eventstore import StoreError, unit

PRODUCER = "scheduler"
LAUNCHES_AT_ONCE = 16
_IDS = uuid.UUID("1b7c6b0e-3d38-4cf1-9c0a-73636865646c")
log = logs.controller("provisioner")
lifecycle = logs.controller("nodeclaim.lifecycle", kind="NodeClaim")


@dataclass
class Offerings:
    """The cloud's instance types (`Catalogs`: per node class, refreshed) and the offerings it
    recently could not give (the insufficient-capacity cache): the pass plans around them, a
    failed launch adds to them."""

    cloud: CloudProvider
    unavailable: UnavailableOfferings = field(default_factory=UnavailableOfferings)
    catalogs: Catalogs = field(init=False)

    def __post_init__(self) -> None:
        self.catalogs = Catalogs(self.cloud)

    @property
    def catalog(self) -> list[InstanceOption]:
        return self.catalogs.catalog

    async def load(self, view: SchedulingView | None = None) -> Loaded:
        return await self.catalogs.load(view)

    def mark_unavailable(
        self, claim: ClaimInFlight, now: datetime, refused: Sequence[tuple[str, str, str]] = ()
    ) -> None:
        """The offerings the cloud said it refused go in the insufficient-capacity cache; when it
        did not say which, every offering the claim allowed."""
        if refused:
            for instance_type, zone, capacity_type in refused:
                self.unavailable.mark(instance_type, zone, capacity_type, now)
            return
        wanted = Requirements.of(Requirement.model_validate(r) for r in claim.requirements)
        types, zones, capacity = (wanted.get(k) for k in (INSTANCE_TYPE_LABEL, ZONE_LABEL, CAPACITY_TYPE_LABEL))
        for option in self.catalog:
            if types is not None and not types.has(option.name):
                continue
            for offer in option.offers:
                if (zones is None or zones.has(offer.zone)) and (capacity is None or capacity.has(offer.capacity_type)):
                    self.unavailable.mark(option.name, offer.zone, offer.capacity_type, now)


async def record(ledger: Ledger, event: c.NodeClaimEvent, now: datetime) -> None:
    """A claim's step (a launch outcome, its end), with an id of its own per claim: recorded
    once, however often tried."""
    new = NewEvent.of(
        event,
        occurred_at=now,
        producer=PRODUCER,
        event_id=uuid.uuid5(_IDS, f"{event.TYPE}/{event.nodeclaim}"),
    )
    try:
        await ledger.append(event.stream_id, None, [new])
    except (StoreError, ReservationError) as exc:
        log.warning("claim %s: %s not recorded: %s", event.nodeclaim, event.TYPE, exc)


class Lifecycle:
    def __init__(self, ledger: Ledger, projection: Projection, offerings: Offerings, nodes_created: Counter) -> None:
        """`nodes_created`: upstream's `karpenter_nodes_created_total`, counted as a registration
        is recorded (upstream counts it as its registration controller marks the claim Registered)."""
        self.ledger, self.projection, self.offerings = ledger, projection, offerings
        self.nodes_created = nodes_created
        self.requested: set[tuple[str, str]] = set()  # owed steps this leader appended
        self.created_here: set[str] = set()
        """Claims this leader reserved itself and has not asked the cloud for yet: their first
        create may skip looking for an instance (none can exist: nobody asked before)."""

    def taken_over(self) -> None:
        """A new leader asks for every owed step again (the log keeps each once)."""
        self.requested.clear()
        self.created_here.clear()

    async def record_owed(self) -> None:
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
        results = await self.ledger.append_units(units, fenced=False)
        for step, result in zip(owed, results, strict=True):
            self.requested.add((step.nodeclaim, step.type))
            if isinstance(result, BaseException):
                log.warning("lifecycle step refused: %s", result)
            elif result:
                if step.type == "NodeClaimRegistered":
                    claim = self.projection.claims.get(step.nodeclaim)
                    self.nodes_created.labels(step.nodepool, (claim.zone if claim else None) or "").inc()
                said = acts.registered_nodeclaim if step.type == "NodeClaimRegistered" else acts.initialized_nodeclaim
                message, fields = said(step.nodeclaim, step.node)
                lifecycle.info(message, **fields)
        self.requested.intersection_update(self.projection.owed)

    async def launch_unlaunched(self, now: datetime) -> list[str]:
        """Launch every claim created and not launched yet (`Projection.unlaunched`). Once the
        cloud is out of reach the launches not yet started wait for the next try. The names of
        the claims launched."""
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
        await self.ledger.reach()
        if unreachable:  # every launch has ended: only now may the pass end
            raise unreachable[0]
        return [name for name in outcomes if name is not None]

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
            first = name in self.created_here
            self.created_here.discard(name)
            spec = launch_spec(name, claim, pool) | {"firstAsk": first}
            skipped = self.offerings.unavailable.unavailable(_instance_types(claim), now)
            if skipped:
                spec["unavailable"] = [list(offering) for offering in skipped]
            instance = await self.offerings.cloud.create(spec)
        except CloudUnreachable:
            raise  # an outage: the claim stays unlaunched and is tried again (`launch_unlaunched`)
        except CloudError as exc:
            if isinstance(exc, InsufficientCapacityError | NoCompatibleInstanceTypes) and pool is not None:
                self.offerings.mark_unavailable(claim, now, getattr(exc, "offerings", ()))
            failed = c.NodeClaimLaunchFailed(
                nodeclaim=name, nodepool=claim.nodepool, reason=type(exc).__name__, message=str(exc)[:1000]
            )
            await record(self.ledger, failed, now)
            message, fields = acts.failed_launching(name, str(exc))
            lifecycle.error(message, **fields)
            return None
        if refused := instance.get("refused"):  # launched, yet some offerings on the way had no capacity
            self.offerings.mark_unavailable(claim, now, [(str(t), str(z), str(k)) for t, z, k in refused])
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
            image_id=instance.get("imageID"),
            subnet_id=instance.get("subnetID"),
            security_group_ids=instance.get("securityGroupIDs"),
        )
        await record(self.ledger, launched, now)
        where = (launched.provider_id, launched.instance_type, launched.zone, launched.capacity_type)
        message, fields = acts.launched_nodeclaim(name, *where, launched.allocatable)
        lifecycle.info(message, **fields)
        return name


def _instance_types(claim: ClaimInFlight) -> list[str]:
    """The instance types a claim's requirements name (upstream's claims name them)."""
    for requirement in claim.requirements:
        if requirement.get("key") == INSTANCE_TYPE_LABEL and requirement.get("operator") == "In":
            return list(requirement.get("values") or [])
    return []


def launch_spec(name: str, claim: ClaimInFlight, pool: NodePool) -> dict[str, Any]:
    """What the cloud's create is asked for: the claim's requirements and requests, the pool's
    template labels (and its name), taints and node class (which a real cloud launches with);
    planned with NodeOverlays, the order of its types (`prioritized`)."""
    template = pool.spec.template
    ref = template.spec.node_class_ref
    prioritized = {"prioritized": list(claim.prioritized)} if claim.prioritized else {}
    return {
        "nodeclaim": name,
        "nodepool": claim.nodepool,
        "nodeClassRef": {"group": ref.group, "kind": ref.kind, "name": ref.name},
        "requirements": claim.requirements,
        "requests": claim.requests,
        "labels": {**template.labels, NODEPOOL_LABEL: claim.nodepool},
        "taints": [t.to_dict() for t in template.spec.taints or []],
        "startupTaints": [t.to_dict() for t in template.spec.startup_taints or []],
        **prioritized,
    }
