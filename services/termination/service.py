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
import contextlib
import time
import uuid
from dataclasses import replace
from datetime import datetime

from prometheus_client import Counter, Gauge, Histogram

from services.termination.projection import PROJECTED, Projection
from shared import acts
from shared.api.labels import EXCLUDE_FROM_LOAD_BALANCERS_LABEL, TERMINATION_FINALIZER, TERMINATION_TIMESTAMP_ANNOTATION
from shared.bus.connection import BusSettings
from shared.bus.projection import ProjectionConsumer
from shared.bus.service import ServiceShell, database_answers
from shared.bus.topology import work_of
from shared.bus.work import WorkConsumer, still_working
from shared.clock import Clock
from shared.events import contracts as c
from shared.events.envelope import NewEvent, RecordedEvent
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
NORMAL = "Normal"
_IDS = uuid.UUID("8f3c2d1e-5b6a-4c7d-9e8f-7465726d696e")
log = logs.controller("node.termination", kind="Node", group="")
lifecycle = logs.controller("nodeclaim.lifecycle", kind="NodeClaim")


def step_id(*parts: object) -> uuid.UUID:
    """A recorded step's id: the same step of the same drain is recorded once, whoever retries it."""
    return uuid.uuid5(_IDS, "/".join(str(p) for p in parts))


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
        self.store, self.cloud, self.cluster, self.clock = store, cloud, cluster, clock
        self.recorder = Recorder(cluster)
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
        self.requests = asyncio.Semaphore(REQUESTS_IN_FLIGHT)
        self.finished: list[str] = []  # the claims this replica terminated
        registry = self.shell.registry
        Gauge(
            "nodewright_termination_draining", "NodeClaims this replica is terminating now.", registry=registry
        ).set_function(lambda: len(self.active))
        self.terminated_total = Counter(
            "karpenter_nodeclaims_terminated_total",
            "NodeClaims terminated.",
            ["nodepool", "capacity_type", "zone"],
            registry=registry,
        )
        self.nodes_terminated = Counter(
            "karpenter_nodes_terminated_total", "Nodes terminated.", ["nodepool", "zone"], registry=registry
        )
        self.nodes_drained = Counter("karpenter_nodes_drained_total", "Nodes drained.", ["nodepool"], registry=registry)
        self.pods_drained = Counter(
            "karpenter_pods_drained_total", "Pods drained off terminating nodes.", ["reason"], registry=registry
        )
        self.eviction_requests = Counter(
            "karpenter_pods_eviction_requests_total", "Eviction API requests, by answer.", ["code"], registry=registry
        )
        self.claim_duration = Histogram(
            "karpenter_nodeclaims_termination_duration_seconds",
            "From a NodeClaim's deletion request to its termination (clock seconds).",
            buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200),
            registry=registry,
        )
        self.node_duration = Histogram(
            "karpenter_nodes_termination_duration_seconds",
            "From a node's drain start to its deletion (clock seconds).",
            buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200),
            registry=registry,
        )

    async def run(self, stopping: asyncio.Event) -> None:
        await self.shell.run(stopping)

    # --- one claim, from its deletion request to its end -------------------------------------------

    async def terminate(self, event: RecordedEvent, request: c.Event) -> None:
        """Drain the claim and delete its instance; return once it is terminated (the message is
        then acknowledged). Safe to run again after a crash, or twice at once."""
        name = request.nodeclaim  # type: ignore[attr-defined]
        await self.consumer.reach(event.position)
        drain = _Drain(self, name)
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

    async def _step(self, drain: _Drain) -> bool:
        """A pass; a server out of reach (the cluster, the cloud, the store) only delays it."""
        try:
            return await drain.step()
        except OUTAGES as exc:
            log.warning("terminating nodeclaim %s: %r; trying again", drain.name, exc)
            return False

    async def record(self, events: list[tuple[c.Event, uuid.UUID]], now: datetime) -> None:
        """Steps in one transaction, each with its own id (recorded once however often retried);
        one the store refuses is logged and not retried."""
        units = [
            unit(e.stream_id, None, [NewEvent.of(e, occurred_at=now, producer=PRODUCER, event_id=i)]) for e, i in events
        ]
        for (event, _), result in zip(events, await self.store.append_units(units), strict=True):
            if isinstance(result, BaseException):
                log.warning("%s of %s not recorded: %s", event.TYPE, event.stream_id, result)


class _Drain:
    """One claim's termination, as one replica carries it out."""

    def __init__(self, service: TerminationService, name: str) -> None:
        self.s, self.name = service, name
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

    async def step(self) -> bool:
        """One pass; True once the claim is terminated and its objects released."""
        s = self.s
        claim = s.projection.claims.get(self.name)
        if claim is None:
            return True
        if claim.terminated or self.ended:
            await self.release(claim.node)
            return True
        t = s.projection.termination(self.name)
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
        now = s.clock.now()
        step = steps.next_step(t, s.projection.pods_on(t.node), now)
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
            await self.s.cluster.delete_nodeclaim(self.name)
        self.deletion_asked = True

    async def release(self, node: str | None) -> None:
        """Termination has finished: the finalizers go, the Node's then the NodeClaim's, so the
        objects go and a `kubectl delete` of either returns. A cluster out of reach leaves the
        drain running (its message unacknowledged) until it answers; the log is not held up."""
        cluster = self.s.cluster
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
            await self.s.cluster.remove_finalizer(NODE, node, TERMINATION_FINALIZER)
            self.node_released = True
        except (ClusterError, OSError, TimeoutError) as exc:
            log.warning("the finalizer of node %s stays for now: %r", node, exc)

    async def taint(self, t: Termination, now: datetime) -> None:
        """Upstream's finalizers, in order: the claim's termination timestamp (with a grace period),
        then the node tainted and left out of external load balancers."""
        s = self.s
        assert t.node is not None
        deadline = t.termination_time
        if deadline is not None:
            stamp = {TERMINATION_TIMESTAMP_ANNOTATION: deadline.isoformat()}
            await s.cluster.annotate_nodeclaim(t.nodeclaim, t.nodepool, stamp)
        try:
            await s.cluster.taint(t.node, DISRUPTED_TAINT)
            await s.cluster.label_node(t.node, {EXCLUDE_FROM_LOAD_BALANCERS_LABEL: "karpenter"})
        except NotFound:
            self.node_gone = True
            return
        draining = c.NodeClaimDraining(
            nodeclaim=t.nodeclaim,
            nodepool=t.nodepool,
            node=t.node,
            decision_id=s.projection.claims[t.nodeclaim].decision_id,
            termination_time=deadline.isoformat() if deadline else None,
        )
        await s.record([(draining, step_id("draining", t.nodeclaim))], now)
        self.draining_since = now  # the projection hears of it later: the next pass need not wait
        taint = DISRUPTED_TAINT
        message, fields = acts.tainted_node(t.node, t.nodeclaim, taint.key, taint.value or "", taint.effect.value)
        log.info(message, **fields)
        if deadline is not None:
            expiring = KubeEvent(
                "NodeClaim", t.nodeclaim, NORMAL, "TerminationGracePeriodExpiring", steps.expiring_message(deadline)
            )
            await s.recorder.publish([expiring], now)

    async def drain(self, t: Termination, plan: Drain, now: datetime) -> None:
        s = self.s
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
            attempt = s.projection.attempts.get(key, 0) + 1
            s.projection.attempts[key] = attempt
            if answer == "unknown":
                self.uncertain[pod.key] = (pod, None)
                continue
            s.eviction_requests.labels(answer).inc()
            if self.uncertain.pop(pod.key, None) is not None and answer == "404":
                answer = "200"  # gone since the request that got no answer: that request evicted it
            if answer == "200":
                s.pods_drained.labels(t.eviction_reason).inc()
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
                await s.record(recorded, now)
            except OUTAGES:
                self.unrecorded = recorded  # done in the cluster: recorded next pass
                raise
        await s.recorder.publish(events, now)

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
            async with self.s.requests:
                await self.s.cluster.evict(pod.key)
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
            async with self.s.requests:
                await self.s.cluster.delete_pod(pod.key, grace_seconds=grace)
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
        s = self.s
        claim = s.projection.claims[t.nodeclaim]
        provider_id = claim.provider_id
        if provider_id is None:  # not launched as far as the log says: a launch may be on its way
            running = [i for i in await s.cloud.list() if i.get("nodeclaim") == t.nodeclaim]
            if not running:
                self.instance_gone = True
                return
            provider_id = running[0]["providerID"]
        try:
            await s.cloud.delete(provider_id)
        except InstanceNotFound:
            self.instance_gone = True

    async def delete_node(self, t: Termination, now: datetime) -> None:
        s = self.s
        assert t.node is not None
        with contextlib.suppress(NotFound):
            await s.cluster.delete_node(t.node)
        self.node_gone = True
        claim = s.projection.claims[t.nodeclaim]
        s.nodes_drained.labels(t.nodepool).inc()
        s.nodes_terminated.labels(t.nodepool, claim.zone or "").inc()
        if t.draining_since is not None:
            s.node_duration.observe(max((now - t.draining_since).total_seconds(), 0.0))

    async def finish(self, t: Termination, now: datetime) -> None:
        s = self.s
        claim = s.projection.claims[t.nodeclaim]
        ended = c.NodeClaimTerminated(nodeclaim=t.nodeclaim, nodepool=t.nodepool, reason=t.reason)
        await s.record([(ended, step_id("terminated", t.nodeclaim))], now)
        s.finished.append(t.nodeclaim)
        s.terminated_total.labels(t.nodepool, claim.capacity_type or "", claim.zone or "").inc()
        s.claim_duration.observe(max((now - t.requested_at).total_seconds(), 0.0))
        if t.node is not None:  # gone: deleted here, or with its instance (upstream says it once its finalizer goes)
            message, fields = acts.deleted_node(t.node, t.nodeclaim)
            log.info(message, **fields)
        message, fields = acts.deleted_nodeclaim(t.nodeclaim, t.node, claim.provider_id, t.reason)
        lifecycle.info(message, **fields)
