"""One claim's termination as one replica carries it out (upstream's
`pkg/controllers/node/termination/controller.go` and its `terminator`): each pass asks
`shared.termination.steps` for the next step and takes it against the cluster and the cloud,
recording what it did in the log.

A drain holds no service: `DrainContext` is what a replica's drains share (its projection, the
cluster and cloud, the cap on requests in flight, the step writer, the metrics), so what a drain
touches is written in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime

from services.termination.metrics import DrainMetrics
from services.termination.projection import Projection
from shared import acts
from shared.api.labels import EXCLUDE_FROM_LOAD_BALANCERS_LABEL, TERMINATION_FINALIZER, TERMINATION_TIMESTAMP_ANNOTATION
from shared.clock import Clock
from shared.events import contracts as c
from shared.events.envelope import NewEvent
from shared.outages import OUTAGES
from shared.ports.cloud import CloudProvider, InstanceNotFound
from shared.ports.cluster import (
    NODE,
    NODECLAIM,
    POD,
    WARNING,
    Cluster,
    ClusterError,
    EvictionRefused,
    KubeEvent,
    NotFound,
)
from shared.runtime import logs
from shared.runtime.recorder import Recorder
from shared.store.eventstore import EventStore, unit
from shared.termination import steps
from shared.termination.pods import DISRUPTED_TAINT, DrainPod, tier
from shared.termination.steps import Drain, Termination

NORMAL = "Normal"
_IDS = uuid.UUID("8f3c2d1e-5b6a-4c7d-9e8f-7465726d696e")
log = logs.controller("node.termination", kind="Node", group="")
lifecycle = logs.controller("nodeclaim.lifecycle", kind="NodeClaim")


def step_id(*parts: object) -> uuid.UUID:
    """A recorded step's id: the same step of the same drain is recorded once, whoever retries it."""
    return uuid.uuid5(_IDS, "/".join(str(p) for p in parts))


@dataclass(frozen=True)
class DrainContext:
    """What every drain of one replica shares. Termination leads by no lock (its replicas share
    the work through one work consumer), so its steps are recorded unfenced, each with an id of
    its own (`step_id`): a step retried, by this replica or another, is recorded once."""

    projection: Projection
    cluster: Cluster
    cloud: CloudProvider
    clock: Clock
    store: EventStore
    producer: str
    recorder: Recorder
    requests: asyncio.Semaphore
    """Eviction and deletion requests open at once, across the replica's drains."""
    metrics: DrainMetrics
    finished: list[str] = field(default_factory=list)
    """The claims this replica terminated."""

    async def record(self, events: list[tuple[c.Event, uuid.UUID]], now: datetime) -> None:
        """Steps in one transaction, each with its own id (recorded once however often retried);
        one the store refuses is logged and not retried."""
        units = [
            unit(e.stream_id, None, [NewEvent.of(e, occurred_at=now, producer=self.producer, event_id=i)])
            for e, i in events
        ]
        for (event, _), result in zip(events, await self.store.append_units(units), strict=True):
            if isinstance(result, BaseException):
                log.warning("%s of %s not recorded: %s", event.TYPE, event.stream_id, result)


class ClaimDrain:
    """One claim's termination, as one replica carries it out: its own progress here, what it
    shares with the replica's other drains in `ctx`."""

    def __init__(self, ctx: DrainContext, name: str) -> None:
        self.ctx, self.name = ctx, name
        self.instance_gone = False
        self.node_gone = False
        self.draining_since: datetime | None = None
        self.waiting: set[tuple[str, str]] = set()  # (pod, cause) recorded in this drain
        self.uncertain: dict[str, tuple[DrainPod, int | None]] = {}
        """Pods whose eviction (grace None) or forced deletion got no answer: asked again next pass,
        and a pod found gone then is recorded as this drain's."""
        self.unrecorded: list[tuple[c.Event, uuid.UUID]] = []  # steps done whose record failed
        self.ended = False  # NodeClaimTerminated recorded by this drain
        self.deletion_asked = False
        self.node_released = False
        self.instance_asked: datetime | None = None  # the first delete of its instance, in this drain

    async def step(self) -> bool:
        """One pass; True once the claim is terminated and its objects released."""
        ctx = self.ctx
        claim = ctx.projection.claims.get(self.name)
        if claim is None:
            return True
        if claim.terminated or self.ended:
            await self.release(claim.node)
            return True
        t = ctx.projection.termination(self.name)
        if t is None:
            return False
        if not self.deletion_asked:
            await self.ask_deletion()
        t = replace(
            t,
            instance_gone=t.instance_gone or self.instance_gone,
            node_gone=t.node_gone or self.node_gone,
            draining_since=t.draining_since or self.draining_since,
        )
        now = ctx.clock.now()
        step = steps.next_step(t, ctx.projection.pods_on(t.node), now)
        if (self.uncertain or self.unrecorded) and not isinstance(step, Drain):
            step = Drain((), (), (), None, 0)  # settle what earlier passes left open first
        if isinstance(step, steps.Taint):
            await self.taint(t, now)
        elif isinstance(step, Drain):
            await self.drain(t, step, now)
        elif isinstance(step, steps.DeleteInstance):
            await self.delete_instance(t)
        elif isinstance(step, steps.DeleteNode):
            await self.delete_node(t, now)
        else:
            await self.release_node(t.node)
            await self.finish(t, now)
            self.ended = True
            await self.release(t.node)
            return True
        return False

    async def ask_deletion(self) -> None:
        """The NodeClaim object shows its deletion (upstream's disruption deletes it; a `kubectl
        delete` has asked already); its finalizer keeps it until `release`. None: never launched."""
        with contextlib.suppress(NotFound):
            await self.ctx.cluster.delete_nodeclaim(self.name)
        self.deletion_asked = True

    async def release(self, node: str | None) -> None:
        """Termination has finished: the finalizers go, the Node's then the NodeClaim's, so the
        objects go and a `kubectl delete` of either returns. A cluster out of reach leaves the
        drain running (its message unacknowledged) until it answers; the log is not held up."""
        cluster = self.ctx.cluster
        if not self.deletion_asked:
            await self.ask_deletion()
        if node is not None and not self.node_released:
            await cluster.remove_finalizer(NODE, node, TERMINATION_FINALIZER)
        await cluster.remove_finalizer(NODECLAIM, self.name, TERMINATION_FINALIZER)

    async def release_node(self, node: str | None) -> None:
        """Before the claim is recorded terminated, the Node's finalizer goes, so the Node is
        gone before its claim ends, as when termination deleted it outright. Best effort: a
        cluster out of reach does not hold the log up (`release` tries again)."""
        if node is None:
            return
        try:
            await self.ctx.cluster.remove_finalizer(NODE, node, TERMINATION_FINALIZER)
            self.node_released = True
        except (ClusterError, OSError, TimeoutError) as exc:
            log.warning("the finalizer of node %s stays for now: %r", node, exc)

    async def taint(self, t: Termination, now: datetime) -> None:
        """Upstream's finalizers, in order: the claim's termination timestamp (with a grace period),
        then the node tainted and left out of external load balancers."""
        ctx = self.ctx
        assert t.node is not None
        deadline = t.termination_time
        if deadline is not None:
            stamp = {TERMINATION_TIMESTAMP_ANNOTATION: deadline.isoformat()}
            await ctx.cluster.annotate_nodeclaim(t.nodeclaim, t.nodepool, stamp)
        try:
            await ctx.cluster.taint(t.node, DISRUPTED_TAINT)
            await ctx.cluster.label_node(t.node, {EXCLUDE_FROM_LOAD_BALANCERS_LABEL: "karpenter"})
        except NotFound:
            self.node_gone = True
            return
        draining = c.NodeClaimDraining(
            nodeclaim=t.nodeclaim,
            nodepool=t.nodepool,
            node=t.node,
            decision_id=ctx.projection.claims[t.nodeclaim].decision_id,
            termination_time=deadline.isoformat() if deadline else None,
        )
        await ctx.record([(draining, step_id("draining", t.nodeclaim))], now)
        self.draining_since = now  # the projection hears of it later: the next pass need not wait
        taint = DISRUPTED_TAINT
        message, fields = acts.tainted_node(t.node, t.nodeclaim, taint.key, taint.value or "", taint.effect.value)
        log.info(message, **fields)
        if deadline is not None:
            expiring = KubeEvent(
                "NodeClaim", t.nodeclaim, NORMAL, "TerminationGracePeriodExpiring", steps.expiring_message(deadline)
            )
            await ctx.recorder.publish([expiring], now)

    async def drain(self, t: Termination, plan: Drain, now: datetime) -> None:
        ctx = self.ctx
        assert t.node is not None
        events: list[KubeEvent] = []
        recorded: list[tuple[c.Event, uuid.UUID]] = []
        force = [*plan.force, *((p, g) for p, g in self.uncertain.values() if g is not None)]
        evict = [*plan.evict, *(p for p, g in self.uncertain.values() if g is None)]
        force = list({p.key: (p, g) for p, g in force}.values())
        forced = {p.key for p, _ in force}
        evict = list({p.key: p for p in evict if p.key not in forced}.values())
        outcomes = await asyncio.gather(*(self._force(t, pod, grace) for pod, grace in force))
        for (pod, grace), outcome in zip(force, outcomes, strict=True):
            if outcome == "unknown":
                self.uncertain[pod.key] = (pod, grace)
                continue
            was_uncertain = self.uncertain.pop(pod.key, None) is not None
            if outcome == "200" or was_uncertain:
                recorded.append(
                    (self._evicted(t, pod, None, forced=True, grace=grace), step_id("forced", t.nodeclaim, pod.key))
                )
                deadline = t.termination_time
                assert deadline is not None
                events.append(
                    KubeEvent(POD, pod.key, WARNING, "Disrupted", steps.forced_message(deadline, grace, pod), pod.uid)
                )
        answers = await asyncio.gather(*(self._evict(pod) for pod in evict))
        for pod, answer in zip(evict, answers, strict=True):
            key = (t.nodeclaim, pod.key)
            attempt = ctx.projection.attempts.get(key, 0) + 1
            ctx.projection.attempts[key] = attempt
            if answer == "unknown":
                self.uncertain[pod.key] = (pod, None)
                continue
            ctx.metrics.eviction_requests.labels(answer).inc()
            if self.uncertain.pop(pod.key, None) is not None and answer == "404":
                answer = "200"  # gone since the request that got no answer: that request evicted it
            if answer == "200":
                ctx.metrics.pods_drained.labels(t.eviction_reason).inc()
                recorded.append(
                    (self._evicted(t, pod, tier(pod), attempt=attempt), step_id("evicted", t.nodeclaim, pod.key))
                )
                events.append(KubeEvent(POD, pod.key, NORMAL, "Evicted", f"Evicted pod: {t.eviction_reason}", pod.uid))
            elif answer == "429":
                events.append(KubeEvent(NODE, t.node, WARNING, "FailedDraining", steps.PDB_REFUSED))
                recorded += self._wait(t, pod, "PodDisruptionBudget", steps.PDB_REFUSED)
            elif answer == "multiple":
                events.append(KubeEvent(NODE, t.node, WARNING, "FailedDraining", steps.MULTIPLE_PDBS))
                recorded += self._wait(t, pod, "MultiplePodDisruptionBudgets", steps.MULTIPLE_PDBS)
        for pod in plan.waiting:
            recorded += self._wait(t, pod, "DoNotDisrupt", "the pod is karpenter.sh/do-not-disrupt")
        left = len(self.uncertain) + max(
            plan.remaining - sum(1 for a in answers if a in ("200", "404")) - outcomes.count("200"), 0
        )
        if left > 0:
            events.append(KubeEvent(NODE, t.node, WARNING, "FailedDraining", steps.waiting_message(left)))
        recorded, self.unrecorded = [*self.unrecorded, *recorded], []
        if recorded:
            try:
                await ctx.record(recorded, now)
            except OUTAGES:
                self.unrecorded = recorded  # done in the cluster: recorded next pass
                raise
        await ctx.recorder.publish(events, now)

    def _wait(self, t: Termination, pod: DrainPod, cause: str, message: str) -> list[tuple[c.Event, uuid.UUID]]:
        if (pod.key, cause) in self.waiting:
            return []
        self.waiting.add((pod.key, cause))
        namespace, _, name = pod.key.partition("/")
        assert t.node is not None
        waiting = c.PodEvictionWaiting(
            namespace=namespace, name=name, node=t.node, nodeclaim=t.nodeclaim, cause=cause, message=message
        )
        log.info("pod %s waits on node %s: %s", pod.key, t.node, cause)
        return [(waiting, step_id("waiting", t.nodeclaim, pod.key, cause))]

    def _evicted(
        self,
        t: Termination,
        pod: DrainPod,
        tier: int | None,
        *,
        attempt: int = 1,
        forced: bool = False,
        grace: int | None = None,
    ) -> c.PodEvicted:
        namespace, _, name = pod.key.partition("/")
        assert t.node is not None
        return c.PodEvicted(
            namespace=namespace,
            name=name,
            node=t.node,
            nodeclaim=t.nodeclaim,
            reason=t.eviction_reason,
            tier=tier,
            attempt=attempt,
            forced=forced,
            grace_seconds=grace,
        )

    async def _evict(self, pod: DrainPod) -> str:
        """The Eviction API's answer: 200 evicted; 404 (or 409) gone already; 429 a PDB refused;
        `multiple` more than one PDB covers the pod; `unknown` no answer came."""
        try:
            async with self.ctx.requests:
                await self.ctx.cluster.evict(pod.key)
        except OUTAGES:
            return "unknown"
        except NotFound:
            return "404"
        except EvictionRefused:
            return "429"
        except ClusterError as exc:
            if "more than one PodDisruptionBudget" in str(exc):
                return "multiple"
            raise
        return "200"

    async def _force(self, t: Termination, pod: DrainPod, grace: int) -> str:
        """A deletion at the termination grace period, PDBs and do-not-disrupt bypassed: 200, 404
        (gone already) or `unknown`."""
        try:
            async with self.ctx.requests:
                await self.ctx.cluster.delete_pod(pod.key, grace_seconds=grace)
        except OUTAGES:
            return "unknown"
        except NotFound:
            return "404"
        deadline = t.termination_time.isoformat() if t.termination_time else ""
        message, fields = acts.deleting_pod(pod.key, t.node or "", t.nodeclaim, grace, deadline)
        log.info(message, **fields)
        return "200"

    async def delete_instance(self, t: Termination) -> None:
        """The cloud's delete, until the cloud no longer knows the instance."""
        ctx = self.ctx
        claim = ctx.projection.claims[t.nodeclaim]
        provider_id = claim.provider_id
        if provider_id is None:  # not launched as far as the log says: a launch may be on its way
            running = [i for i in await ctx.cloud.list() if i.get("nodeclaim") == t.nodeclaim]
            if not running:
                self.instance_gone = True
                return
            provider_id = running[0]["providerID"]
        if self.instance_asked is None:
            self.instance_asked = ctx.clock.now()
        try:
            await ctx.cloud.delete(provider_id)
        except InstanceNotFound:
            self.instance_gone = True
            waited = (ctx.clock.now() - self.instance_asked).total_seconds()
            ctx.metrics.instance_duration.labels(t.nodepool).observe(max(waited, 0.0))

    async def delete_node(self, t: Termination, now: datetime) -> None:
        ctx = self.ctx
        assert t.node is not None
        with contextlib.suppress(NotFound):
            await ctx.cluster.delete_node(t.node)
        self.node_gone = True
        claim = ctx.projection.claims[t.nodeclaim]
        ctx.metrics.nodes_drained.labels(t.nodepool).inc()
        ctx.metrics.nodes_terminated.labels(t.nodepool, claim.zone or "").inc()
        if t.draining_since is not None:
            ctx.metrics.node_duration.labels(t.nodepool).observe(max((now - t.draining_since).total_seconds(), 0.0))
        if claim.registered_at is not None:
            ctx.metrics.node_lifetime.labels(t.nodepool).observe(max((now - claim.registered_at).total_seconds(), 0.0))

    async def finish(self, t: Termination, now: datetime) -> None:
        ctx = self.ctx
        claim = ctx.projection.claims[t.nodeclaim]
        ended = c.NodeClaimTerminated(nodeclaim=t.nodeclaim, nodepool=t.nodepool, reason=t.reason)
        await ctx.record([(ended, step_id("terminated", t.nodeclaim))], now)
        ctx.finished.append(t.nodeclaim)
        ctx.metrics.terminated.labels(t.nodepool, claim.capacity_type or "", claim.zone or "").inc()
        ctx.metrics.claim_duration.labels(t.nodepool).observe(max((now - t.requested_at).total_seconds(), 0.0))
        if t.node is not None:  # gone: deleted here, or with its instance (upstream says it once its finalizer goes)
            message, fields = acts.deleted_node(t.node, t.nodeclaim)
            log.info(message, **fields)
        message, fields = acts.deleted_nodeclaim(t.nodeclaim, t.node, claim.provider_id, t.reason)
        lifecycle.info(message, **fields)
