"""Static provisioning (upstream's `static.provisioning` controller, behind `StaticCapacity`): each
static NodePool's NodeClaims up to its `replicas`, one strict reservation each, so `limits.nodes`
stops it exactly as it stops a pass (`reserve_launch`). The decisions are `shared.scheduling.static`'s;
this wires them to the projection, the catalog and the ledger.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from services.scheduler.lifecycle import Lifecycle, Offerings
from services.scheduler.metrics import PROVISIONED, SchedulerMetrics
from services.scheduler.projection import Projection
from shared import acts
from shared.policy.counters import ReservationError
from shared.runtime import logs
from shared.runtime.ledger import Ledger
from shared.scheduling.claims import claim_created, claim_name
from shared.scheduling.packing import option_table
from shared.scheduling.static import LIMIT_REACHED, SCALING_UP, StaticNeed, static_claim, static_needs

log = logs.controller("static.provisioning", "NodePool")
RETRY = timedelta(minutes=1)
NO_TYPES = "could not create static nodeclaim, no instance type satisfied the nodepool's requirements"


class StaticProvisioning:
    def __init__(
        self,
        ledger: Ledger,
        projection: Projection,
        offerings: Offerings,
        lifecycle: Lifecycle,
        metrics: SchedulerMetrics,
    ) -> None:
        self.ledger, self.projection, self.offerings, self.lifecycle = ledger, projection, offerings, lifecycle
        self.metrics = metrics
        self._held: dict[str, tuple[int, int, int, int | None]] = {}
        """Per pool its limit held back, what it was held at (`_key`): neither said nor tried
        again on every look, only once something it depends on moved."""
        self._later: dict[str, datetime] = {}
        """Per pool none of whose instance types could launch, when to look again (upstream requeues)."""

    def needs(self) -> list[StaticNeed]:
        """The static pools short of their replicas (not one whose class is not Ready: upstream
        waits for the pool's Ready condition)."""
        view = self.projection
        unready = view.unready()
        replicas = {
            name: pool.spec.replicas
            for name, pool in view.pools.items()
            if pool.spec.replicas is not None and name not in unready
        }
        if not replicas:
            return []
        claims = ((name, claim.nodepool) for name, claim in view.claims.items())
        needs = [n for n in static_needs(replicas, claims, view.deleting) if n.count > 0]
        for name in set(self._held) - {n.nodepool for n in needs}:
            del self._held[name]
        return [n for n in needs if self._held.get(n.nodepool) != self._key(n)]

    def _key(self, need: StaticNeed) -> tuple[int, int, int, int | None]:
        return need.current, need.desired, need.total, self.projection.pools[need.nodepool].spec.node_limit

    async def provision(self, now: datetime) -> list[str]:
        """Create what each static pool lacks, then launch; the names of the claims launched."""
        needs = [n for n in self.needs() if self._later.get(n.nodepool, now) <= now]
        if not needs:
            return []
        loaded = await self.offerings.load(self.projection)
        wanted = {n.nodepool for n in needs}
        templates = [t for t in self.projection.templates({}, static=True) if t.name in wanted]
        table = option_table(
            templates,
            loaded.catalog,
            daemonsets=list(self.projection.daemonsets.values()),
            unavailable=self.offerings.unavailable,
            now=now,
            pool_catalogs=loaded.pools,
        )
        by_name = {t.name: t for t in templates}
        reconcile_id = str(uuid.uuid4())
        created = False
        for need in needs:
            template = by_name.get(need.nodepool)
            if template is None:
                continue
            log.info(SCALING_UP, NodePool=acts.ref(need.nodepool), current=need.current, desired=need.desired)
            catalog = loaded.pools.get(need.nodepool, loaded.catalog)
            for index in range(need.count):
                claim = static_claim(template, table.get(need.nodepool, []), catalog, index)
                if claim is None:  # none of its types can launch now: looked at again in a minute
                    self._later[need.nodepool] = now + RETRY
                    log.error(NO_TYPES, NodePool=acts.ref(need.nodepool))
                    break
                name = claim_name(claim.nodepool)
                event = claim_created(name, claim)
                try:
                    await self.ledger.reserve_launch([event], occurred_at=now)
                except ReservationError as exc:
                    if index == 0:  # said, and not tried again until something it depends on moves
                        self._held[need.nodepool] = self._key(need)
                        log.info(
                            LIMIT_REACHED,
                            NodePool=acts.ref(need.nodepool),
                            current=need.current,
                            desired=need.desired,
                            reason=str(exc),
                        )
                    break  # (past the first: the next look, with these claims seen, says it)
                created = True
                self.lifecycle.created_here.add(name)
                self.metrics.created.labels(PROVISIONED, claim.nodepool, "false").inc()
                types = [t.name for t in event.instance_types]
                message, fields = acts.created_nodeclaim(claim.nodepool, name, event.requests, types, reconcile_id)
                log.info(message, **fields)
        if not created:
            return []
        await self.ledger.reach()
        return await self.lifecycle.launch_unlaunched(now)
