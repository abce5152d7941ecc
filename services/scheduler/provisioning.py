"""Provisioning, as upstream's `pkg/controllers/provisioning`: one scheduling pass over the
pending pods (`shared.scheduling.packing.schedule`), then for each planned claim the strict
reservation against its pool's counter row (`reserve_launch`, fenced by the leader's lock), and
the launches (`services.scheduler.lifecycle`). A pass that reaches its time bound launches what
it planned and leaves the rest to the next pass.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from services.scheduler import kube_events
from services.scheduler.lifecycle import Lifecycle, Offerings
from services.scheduler.metrics import PROVISIONED, PROVISIONER, SchedulerMetrics, resource_type
from services.scheduler.projection import Projection
from shared import acts
from shared.policy.counters import ReservationError
from shared.runtime import logs
from shared.runtime.ledger import Ledger
from shared.runtime.recorder import Recorder
from shared.scheduling.claims import claim_created, claim_name
from shared.scheduling.nodeclasses import admitting, waiting_reason
from shared.scheduling.packing import schedule
from shared.scheduling.rules import MinValuesPolicy
from shared.scheduling.values import Bound, PendingPod, Plan, PlannedClaim

log = logs.controller("provisioner")


class Provisioner:
    def __init__(
        self,
        ledger: Ledger,
        projection: Projection,
        offerings: Offerings,
        lifecycle: Lifecycle,
        recorder: Recorder,
        metrics: SchedulerMetrics,
        *,
        timeout: timedelta,
        monotonic: Callable[[], float],
        min_values_policy: MinValuesPolicy = MinValuesPolicy.STRICT,
    ) -> None:
        """`timeout`: how long one pass may compute, on `monotonic` (real time: the work is this
        process's, not the simulated clock's); `min_values_policy`: upstream's, for each pass."""
        self.ledger, self.projection, self.offerings, self.lifecycle = ledger, projection, offerings, lifecycle
        self.recorder, self.metrics = recorder, metrics
        self.timeout, self.monotonic = timeout, monotonic
        self.min_values_policy = min_values_policy

    async def plan_and_launch(self, now: datetime) -> list[str]:
        """One pass; the names of the claims launched."""
        loaded = await self.offerings.load(self.projection)
        live = await self.ledger.store.counters()
        remaining = {name: _remaining(live.get(name), pool) for name, pool in self.projection.pools.items()}
        for name, pool in self.projection.pools.items():
            if name in live:
                for resource, value in live[name].usage().items():
                    self.metrics.usage.labels(name, resource_type(resource)).set(float(value))
            for resource, quantity in (pool.spec.limits or {}).items():
                self.metrics.limit.labels(name, resource_type(resource)).set(float(quantity.value))
        waiting = self.projection.plannable()
        unready = self.projection.unready()
        for pool, why in unready.items() if waiting else ():  # as upstream's, with pods to schedule
            log.error("ignoring nodepool, not ready", NodePool=acts.ref(pool), reason=why)
        with self.metrics.duration.labels(PROVISIONER).time():
            started = self.monotonic()
            plan = schedule(
                waiting,
                self.projection.capacity(),
                self.projection.templates(remaining),
                loaded.catalog,
                daemonsets=list(self.projection.daemonsets.values()),
                unavailable=self.offerings.unavailable,
                now=now,
                running=self.projection.running(),
                bound=Bound(deadline=started + self.timeout.total_seconds(), clock=self.monotonic),
                pool_catalogs=loaded.pools,
                min_values_policy=self.min_values_policy,
            )
        self._timed_out(plan)
        reconcile_id = str(uuid.uuid4())
        seconds, sizes = self.monotonic() - started, [len(c.pods) for c in plan.claims]
        for message, fields in acts.scheduled([p.key for p in waiting], seconds, sizes, plan.placed, reconcile_id):
            log.info(message, **fields)
        self.metrics.unschedulable.labels(PROVISIONER).set(len(plan.unplaced))
        self.metrics.ignored.set(len(plan.ignored))
        view = self.projection
        unplaced = _waiting_on_unready(plan.unplaced, waiting, view, unready)
        events = [kube_events.failed_scheduling(view, pod, why) for pod, why in unplaced.items()]
        events += [kube_events.nominated(view, pod, target) for pod, target in plan.placed.items()]
        for claim in plan.claims:
            name = await self._reserve(claim, now, reconcile_id)
            if name is not None:
                events += [kube_events.nominated(view, pod, name) for pod in claim.pods]
        await self.ledger.reach()
        launched = await self.lifecycle.launch_unlaunched(now)
        await self.recorder.publish(events, now)  # after the launches: events never hold them up
        return launched

    def _timed_out(self, plan: Plan) -> None:
        """A pass that hit its bound says so; the pods it did not reach start the next batch."""
        self.metrics.deferred.set(len(plan.deferred))
        if not plan.timed_out:
            return
        self.metrics.timeouts.inc()
        self.projection.changed = True
        planned = len(plan.placed) + sum(len(c.pods) for c in plan.claims)
        log.warning(
            "scheduling pass stopped at its %.0f s bound: %d pods planned, %d unschedulable, %d left to the next pass",
            self.timeout.total_seconds(),
            planned,
            len(plan.unplaced),
            len(plan.deferred),
        )

    async def _reserve(self, claim: PlannedClaim, now: datetime, reconcile_id: str = "") -> str | None:
        """The strict reservation of a planned claim: its name, or None when a limit refused it."""
        name = claim_name(claim.nodepool)
        created = claim_created(name, claim)
        try:
            await self.ledger.reserve_launch([created], occurred_at=now)
        except ReservationError as exc:
            log.info("nodepool %s: not creating a NodeClaim: %s", claim.nodepool, exc)
            return None
        self.lifecycle.created_here.add(name)
        self.metrics.created.labels(PROVISIONED, claim.nodepool, "false").inc()
        types = [t.name for t in created.instance_types]
        message, fields = acts.created_nodeclaim(claim.nodepool, name, created.requests, types, reconcile_id)
        log.info(message, **fields)
        return name


def _waiting_on_unready(
    unplaced: Mapping[str, str], waiting: list[PendingPod], view: Projection, unready: Mapping[str, str]
) -> dict[str, str]:
    """The pass's reasons, with the not-ready pools that would have taken each pod named and why
    they were left out: a pod only they would take waits for its pool's class, and says so."""
    if not unready or not unplaced:
        return dict(unplaced)
    left_out = [t for t in view.templates({}, unready=True) if t.name in unready]
    pods = {p.key: p for p in waiting}
    ready = len(view.pools) > len(unready)
    out = {}
    for key, why in unplaced.items():
        pod = pods.get(key)
        pools = admitting(pod, left_out) if pod is not None else []
        out[key] = waiting_reason(why, {p: unready[p] for p in pools}, ready) if pools else why
    return out


def _remaining(counters: Any, pool: Any) -> Mapping[str, Decimal] | None:
    """What the pool's limits leave, from its counter row (the reservation checks again)."""
    limits = {k: q.value for k, q in (pool.spec.limits or {}).items()}
    if not limits:
        return None
    usage = counters.usage() if counters is not None else {}
    return {k: limit - usage.get(k, Decimal(0)) for k, limit in limits.items()}
