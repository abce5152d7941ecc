"""What a scheduling pass knows of the world, folded from the log: the NodePools in force, the
pods waiting, the nodes and what is bound to them, and the NodeClaims in flight with the pods they
were made for (those pods are not planned again while their claim is on its way).

The scheduler's projection (`services.scheduler.projection`) is this view and what the scheduler
alone keeps; disruption's embeds it too, as what a consolidation simulates on: so it lives here,
where both may import it. Which pod runs on which node is the shared cluster fold's
(`shared.projections.cluster`), which this view applies first.

Pure: `apply` takes recorded events in position order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from shared.api.core import Requirement, Taint, Toleration
from shared.api.labels import NODEPOOL_LABEL, ZONE_LABEL
from shared.api.nodeoverlay import NodeOverlay
from shared.api.nodeoverlay_validation import validate_overlay
from shared.api.nodepool import NodePool
from shared.api.pod import Affinity, PodAffinityTerm, TopologySpreadConstraint
from shared.api.quantity import Quantity
from shared.api.validation import validate_nodepool
from shared.events import contracts as c
from shared.events.decode import Step, dispatch
from shared.events.envelope import RecordedEvent
from shared.projections.cluster import Cluster
from shared.scheduling import preferences
from shared.scheduling.nodeclasses import NodeClassState, unready_reason
from shared.scheduling.offerings import DaemonSetPods, node_daemon_overhead
from shared.scheduling.requirements import Requirements, ValueSet
from shared.scheduling.topology import Running
from shared.scheduling.values import NodeCapacity, PendingPod, PoolTemplate

_ZERO = Decimal(0)


@dataclass(slots=True)
class _Node:
    name: str
    labels: dict[str, str]
    taints: list[Taint]
    allocatable: dict[str, Decimal]
    nodeclaim: str | None
    nodepool: str | None
    initialized: bool = False


@dataclass(slots=True)
class ClaimInFlight:
    """A NodeClaim in flight: what it was created with (what a launch needs), and once launched
    what its node will offer."""

    nodepool: str
    pods: list[str]
    requirements: list[dict[str, Any]] = field(default_factory=list)
    requests: dict[str, str] = field(default_factory=dict)
    launched: bool = False
    registered: bool = False
    recorded_registered: bool = False  # NodeClaimRegistered is in the log
    recorded_initialized: bool = False
    zone: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, Decimal] = field(default_factory=dict)
    provider_id: str | None = None
    """Its instance, once launched: any other the cloud lists for it is a leak."""
    prioritized: list[str] = field(default_factory=list)
    """Its types in the order it was planned by, when NodeOverlays were in force: the cloud is
    asked to launch the first it can (upstream's prioritized fleet), not its own cheapest."""


@dataclass(slots=True)
class SchedulingView:
    cluster: Cluster = field(default_factory=Cluster)
    pools: dict[str, NodePool] = field(default_factory=dict)
    pending: dict[str, PendingPod] = field(default_factory=dict)
    bound: dict[str, tuple[Mapping[str, Decimal], Mapping[str, str]]] = field(default_factory=dict)
    """Bound pod -> (requests, labels); its node is the cluster fold's (`node_of`)."""
    requests: dict[str, Mapping[str, Decimal]] = field(default_factory=dict)  # what each known pod asked for
    labels: dict[str, Mapping[str, str]] = field(default_factory=dict)
    anti_affinity: dict[str, tuple[PodAffinityTerm, ...]] = field(default_factory=dict)  # running pods' own
    daemonsets: dict[str, DaemonSetPods] = field(default_factory=dict)
    daemon_pods: set[str] = field(default_factory=set)  # known pods a DaemonSet owns
    nodes: dict[str, _Node] = field(default_factory=dict)
    claims: dict[str, ClaimInFlight] = field(default_factory=dict)
    nominated: dict[str, str] = field(default_factory=dict)  # pod -> the claim in flight for it
    nodeclasses: dict[str, NodeClassState] = field(default_factory=dict)  # EC2NodeClass -> last status
    overlays: dict[str, NodeOverlay] = field(default_factory=dict)
    """The NodeOverlays in force (recorded only while the `NodeOverlay` gate is on)."""
    gated: bool = False
    """The cloud resolves EC2NodeClasses (AWS): a pool on one launches only while it is Ready."""
    position: int = 0
    changed: bool = False  # a pod or a pool changed since the last plan

    def apply(self, events: Iterable[RecordedEvent]) -> None:
        for event in events:
            self.position = max(self.position, event.position)
            self.take(event)

    def take(self, recorded: RecordedEvent) -> None:
        """One event: the cluster fold's step, then the view's."""
        self.cluster.apply(recorded)
        dispatch(self, VIEW_STEPS, recorded)

    def node_of(self, key: str) -> str | None:
        pod = self.cluster.pods.get(key)
        return pod.node if pod is not None else None

    # --- what a pass needs -------------------------------------------------------------------------

    def plannable(self) -> list[PendingPod]:
        return [p for key, p in self.pending.items() if key not in self.nominated]

    def leaving(self) -> set[str]:
        """Claims being deleted: no pod is planned onto them (upstream leaves nodes marked for
        deletion out of its simulation). The view itself knows none; the scheduler's does."""
        return set()

    def capacity(self) -> list[NodeCapacity]:
        """Nodes, and launched claims whose node has not registered yet, but not those leaving
        (`leaving`), as capacity: what they
        offer less what their bound pods and the pending pods their claim was made for ask, and
        less the DaemonSet pods they will run that are not bound there yet (upstream keeps
        `max(overhead - DaemonSet pods on the node, 0)`). A node still starting counts without
        its pool's startup taints (they are about to go)."""
        used: dict[str, dict[str, Decimal]] = {}
        daemons: dict[str, dict[str, Decimal]] = {}  # per host, what its bound DaemonSet pods ask
        pods = self.cluster.pods
        for key, (requests, _) in self.bound.items():
            node = pods[key].node
            if node is None:
                continue
            _take(used.setdefault(node, {}), requests)
            if key in self.daemon_pods:
                _take(daemons.setdefault(node, {}), requests)
        hosts = self._hosts()
        for key, claim_name in self.nominated.items():
            pod = self.pending.get(key)
            if pod is not None and claim_name in self.claims:
                _take(used.setdefault(hosts.get(claim_name, claim_name), {}), pod.requests)
        out = []
        leaving = self.leaving()
        for node in self.nodes.values():
            if node.nodeclaim in leaving:
                continue
            startup = self._startup_taints(node.nodepool) if not node.initialized else set()
            taints = [t for t in node.taints if t.key not in startup]
            out.append(self._room(node.name, node.labels, taints, node.allocatable, used, daemons, node.initialized))
        for name, claim in self.claims.items():
            if claim.launched and not claim.registered and claim.allocatable and name not in leaving:
                pool = self.pools.get(claim.nodepool)
                taints = list(pool.spec.template.spec.taints or []) if pool else []
                out.append(self._room(name, claim.labels, taints, claim.allocatable, used, daemons, False))
        return out

    def _room(
        self,
        name: str,
        labels: Mapping[str, str],
        taints: list[Taint],
        allocatable: Mapping[str, Decimal],
        used: Mapping[str, Mapping[str, Decimal]],
        daemons: Mapping[str, Mapping[str, Decimal]],
        initialized: bool,
    ) -> NodeCapacity:
        overhead = node_daemon_overhead(self.daemonsets.values(), taints, labels)
        there = daemons.get(name, {})
        missing = {k: v - there.get(k, _ZERO) for k, v in overhead.items() if v > there.get(k, _ZERO)}
        return NodeCapacity(name, labels, taints, _less(_less(allocatable, used.get(name)), missing), initialized)

    def running(self) -> list[Running]:
        """(labels, zone, host) of the bound pods, and of the pending pods a claim in flight was
        made for (on that claim's host, in its zone once known), for the topology rules."""
        out: list[Running] = []
        pods = self.cluster.pods
        for key, (_, labels) in self.bound.items():
            node_name = pods[key].node
            if node_name is None:
                continue
            node = self.nodes.get(node_name)
            out.append(
                (labels, node.labels.get(ZONE_LABEL) if node else None, node_name, self.anti_affinity.get(key, ()))
            )
        hosts = self._hosts()
        for key, claim_name in self.nominated.items():
            claim = self.claims.get(claim_name)
            pod = self.pending.get(key)
            if pod is not None and claim is not None:
                host = hosts.get(claim_name, claim_name)
                out.append((pod.topology.labels, claim.zone, host, pod.topology.anti_affinity))
        return out

    def _hosts(self) -> dict[str, str]:
        """claim -> the name of its registered node."""
        return {node.nodeclaim: node.name for node in self.nodes.values() if node.nodeclaim}

    def unready(self) -> dict[str, str]:
        """The pools a pass leaves out, each with why (`nodeclasses.unready_reason`)."""
        out = {}
        for name, pool in self.pools.items():
            why = unready_reason(pool, self.nodeclasses, self.gated)
            if why is not None:
                out[name] = why
        return out

    def templates(
        self, remaining: Mapping[str, Mapping[str, Decimal] | None], *, unready: bool = False, static: bool = False
    ) -> list[PoolTemplate]:
        """The pools a pass may launch into; `unready`: those it leaves out too (drift compares a
        claim with its pool whether or not the pool may launch); `static`: the static pools too,
        which a pod never makes grow (upstream's provisioner leaves them out: `static` does)."""
        out = []
        left_out = set() if unready else set(self.unready())
        for name, pool in self.pools.items():
            if name in left_out or (pool.spec.static and not static):
                continue
            spec = pool.spec.template.spec
            requirements = Requirements.of(spec.requirements)
            for key, value in pool.spec.template.labels.items():
                requirements.add(ValueSet.exactly(key, value))
            out.append(
                PoolTemplate(name, requirements, pool.spec.weight or 0, tuple(spec.taints or ()), remaining.get(name))
            )
        return out

    def _startup_taints(self, nodepool: str | None) -> set[str]:
        pool = self.pools.get(nodepool or "")
        return {t.key for t in pool.spec.template.spec.startup_taints or []} if pool else set()


def _node_requirements(node_selector: Mapping[str, str], affinity: Affinity | None) -> Requirements:
    """A pod spec's nodeSelector and required node affinity as requirements."""
    requirements = Requirements(ValueSet.exactly(k, v) for k, v in node_selector.items())
    selector = affinity.required_node_selector() if affinity else None
    if selector is not None and selector.node_selector_terms:  # upstream tries the first term first
        for r in selector.node_selector_terms[0].match_expressions or []:
            requirements.add(ValueSet.of(Requirement.model_validate(r.model_dump())))
    return requirements


def pending_pod(pod: c.PodPending, at: datetime) -> PendingPod:
    """A PodPending fact as the scheduling pass takes it: its preferred terms and ScheduleAnyway
    spread in force, to be relaxed one at a time (`preferences`)."""
    affinity = _affinity(pod.affinity)
    selector = Requirements(ValueSet.exactly(k, v) for k, v in pod.node_selector.items())
    spread = tuple(TopologySpreadConstraint.model_validate(t) for t in pod.topology_spread_constraints)
    requirements, topology, soft = preferences.strict(selector, affinity, dict(pod.labels), spread)
    return PendingPod(
        key=f"{pod.namespace}/{pod.name}",
        requests=_quantities(pod.requests),
        requirements=requirements,
        tolerations=_tolerations(pod.tolerations),
        created_at=at,
        uid=pod.uid or "",
        daemonset=pod.owner_kind == "DaemonSet",
        topology=topology,
        preferences=soft,
    )


def _affinity(raw: Mapping[str, Any] | None) -> Affinity | None:
    return Affinity.model_validate(raw) if raw else None


def _tolerations(raw: Iterable[Mapping[str, Any]]) -> tuple[Toleration, ...]:
    return tuple(Toleration.model_validate(t) for t in raw)


def _quantities(raw: Mapping[str, Quantity]) -> dict[str, Decimal]:
    """A fact's resource map (`"4"`, `"16Gi"`) as exact values (the contract parsed them)."""
    return {k: v.value for k, v in raw.items()}


def daemonset_pods(daemonset: c.DaemonSetApplied) -> DaemonSetPods:
    """A DaemonSetApplied fact as the overhead every node it runs on carries."""
    return DaemonSetPods(
        _quantities(daemonset.requests),
        _tolerations(daemonset.tolerations),
        _node_requirements(daemonset.node_selector, _affinity(daemonset.affinity)),
    )


def _daemonset_applied(p: SchedulingView, e: c.DaemonSetApplied, r: RecordedEvent) -> None:
    p.daemonsets[f"{e.namespace}/{e.name}"] = daemonset_pods(e)
    p.changed = True


def _daemonset_deleted(p: SchedulingView, e: c.DaemonSetDeleted, r: RecordedEvent) -> None:
    p.daemonsets.pop(f"{e.namespace}/{e.name}", None)
    p.changed = True


def _pool_applied(p: SchedulingView, e: c.NodePoolApplied, r: RecordedEvent) -> None:
    result = validate_nodepool(e.nodepool_object)
    if result.nodepool is not None:
        p.pools[e.nodepool] = result.nodepool
        p.changed = True


def _pool_gone(p: SchedulingView, e: c.NodePoolRejected | c.NodePoolDeleted, r: RecordedEvent) -> None:
    p.pools.pop(e.nodepool, None)
    p.changed = True


def _nodeclass_status(p: SchedulingView, e: c.NodeClassStatusChanged, r: RecordedEvent) -> None:
    p.nodeclasses[e.nodeclass] = NodeClassState(
        e.ready, e.reason, e.message, tuple(e.subnets), tuple(e.security_groups), tuple(e.amis)
    )
    p.changed = True  # a pool may launch now, or no longer


def _overlay_applied(p: SchedulingView, e: c.NodeOverlayApplied, r: RecordedEvent) -> None:
    overlay = validate_overlay(e.nodeoverlay_object).overlay
    if overlay is not None:
        p.overlays[e.nodeoverlay] = overlay
    else:
        p.overlays.pop(e.nodeoverlay, None)
    p.changed = True  # the catalogs change: a pass may choose otherwise


def _overlay_deleted(p: SchedulingView, e: c.NodeOverlayDeleted, r: RecordedEvent) -> None:
    p.overlays.pop(e.nodeoverlay, None)
    p.changed = True


def _pending(p: SchedulingView, e: c.PodPending, r: RecordedEvent) -> None:
    pod = pending_pod(e, r.occurred_at)
    p.pending[pod.key] = pod
    if pod.daemonset:
        p.daemon_pods.add(pod.key)
    p.requests[pod.key] = pod.requests
    p.labels[pod.key] = pod.topology.labels
    p.changed = True


def _bound(p: SchedulingView, e: c.PodBound, r: RecordedEvent) -> None:
    key = f"{e.namespace}/{e.name}"
    p.pending.pop(key, None)
    p.nominated.pop(key, None)
    requests = _quantities(e.requests) or p.requests.get(key, {})
    p.bound[key] = (requests, e.labels or p.labels.get(key, {}))
    if e.owner_kind == "DaemonSet":
        p.daemon_pods.add(key)
    affinity = _affinity(e.affinity)
    if affinity is not None and (terms := tuple(affinity.required_anti_affinity())):
        p.anti_affinity[key] = terms
    p.changed = True  # its node has less room now


def _pod_deleted(p: SchedulingView, e: c.PodDeleted, r: RecordedEvent) -> None:
    key = f"{e.namespace}/{e.name}"
    for table in (p.pending, p.nominated, p.bound, p.requests, p.labels, p.anti_affinity):
        table.pop(key, None)
    p.daemon_pods.discard(key)
    p.changed = True


def _node_registered(p: SchedulingView, e: c.NodeRegistered, r: RecordedEvent) -> None:
    p.nodes[e.node] = _Node(
        e.node,
        dict(e.labels),
        [Taint.model_validate(t) for t in e.taints],
        _quantities(e.allocatable),
        e.nodeclaim,
        e.nodepool or e.labels.get(NODEPOOL_LABEL),
    )
    claim = p.claims.get(e.nodeclaim or "")
    if claim is not None:
        claim.registered = True  # its room is the node's from now on, even after the node goes
    p.changed = True


def _node_initialized(p: SchedulingView, e: c.NodeInitialized, r: RecordedEvent) -> None:
    node = p.nodes.get(e.node)
    if node is not None:
        node.initialized = True
        p.changed = True


def _node_deleted(p: SchedulingView, e: c.NodeDeleted, r: RecordedEvent) -> None:
    """The node is gone (the cluster fold unbound its pods); its claim, still counted until it
    is terminated, offers nothing now."""
    p.nodes.pop(e.node, None)
    for pod in p.cluster.gone:
        p.bound.pop(pod.key, None)
        p.anti_affinity.pop(pod.key, None)
    p.changed = True


def _claim_created(p: SchedulingView, e: c.NodeClaimCreated, r: RecordedEvent) -> None:
    requirements = list(e.requirements)
    p.claims[e.nodeclaim] = ClaimInFlight(
        e.nodepool,
        list(e.pods),
        requirements,
        {k: str(v) for k, v in e.requests.items()},
        zone=_pinned_zone(requirements),
        prioritized=[o.name for o in e.instance_types] if p.overlays else [],
    )
    for key in e.pods:
        p.nominated[key] = e.nodeclaim


def _pinned_zone(requirements: Iterable[Mapping[str, Any]]) -> str | None:
    """The zone a claim is pinned to by its requirements, if exactly one."""
    for r in requirements:
        if r.get("key") == ZONE_LABEL and r.get("operator") == "In" and len(r.get("values") or []) == 1:
            return str(r["values"][0])
    return None


def _claim_launched(p: SchedulingView, e: c.NodeClaimLaunched, r: RecordedEvent) -> None:
    claim = p.claims.get(e.nodeclaim)
    if claim is not None:
        claim.launched = True
        claim.provider_id = e.provider_id
        claim.zone = e.zone or claim.zone
        claim.labels = dict(e.labels)
        claim.allocatable = _quantities(e.allocatable)
        p.changed = True  # room for pods that wait


def _claim_ended(p: SchedulingView, e: c.NodeClaimLaunchFailed | c.NodeClaimTerminated, r: RecordedEvent) -> None:
    """A launch that failed, or a claim that went: its pods may be planned again."""
    claim = p.claims.pop(e.nodeclaim, None)
    if claim is not None:
        for key in claim.pods:
            if p.nominated.get(key) == e.nodeclaim:
                del p.nominated[key]
        p.changed = True


def _claim_registered(p: SchedulingView, e: c.NodeClaimRegistered, r: RecordedEvent) -> None:
    claim = p.claims.get(e.nodeclaim)
    if claim is not None:
        claim.registered = claim.recorded_registered = True


def _claim_initialized(p: SchedulingView, e: c.NodeClaimInitialized, r: RecordedEvent) -> None:
    """Its node can take pods: the pods it was made for that are still waiting are planned again
    (onto it, as existing capacity, when they fit)."""
    claim = p.claims.get(e.nodeclaim)
    if claim is not None:
        claim.recorded_initialized = True
        for key in claim.pods:
            if p.nominated.get(key) == e.nodeclaim:
                del p.nominated[key]
        p.changed = True


VIEW_STEPS: Mapping[type[c.Event], Step[SchedulingView]] = {
    c.NodePoolApplied: _pool_applied,
    c.NodePoolRejected: _pool_gone,
    c.NodePoolDeleted: _pool_gone,
    c.NodeClassStatusChanged: _nodeclass_status,
    c.NodeOverlayApplied: _overlay_applied,
    c.NodeOverlayDeleted: _overlay_deleted,
    c.DaemonSetApplied: _daemonset_applied,
    c.DaemonSetDeleted: _daemonset_deleted,
    c.PodPending: _pending,
    c.PodBound: _bound,
    c.PodDeleted: _pod_deleted,
    c.NodeRegistered: _node_registered,
    c.NodeInitialized: _node_initialized,
    c.NodeDeleted: _node_deleted,
    c.NodeClaimCreated: _claim_created,
    c.NodeClaimLaunched: _claim_launched,
    c.NodeClaimLaunchFailed: _claim_ended,
    c.NodeClaimTerminated: _claim_ended,
    c.NodeClaimRegistered: _claim_registered,
    c.NodeClaimInitialized: _claim_initialized,
}
"""The view's steps; the cluster fold's (`shared.projections.cluster.STEPS`) run before them."""


def _take(used: dict[str, Decimal], requests: Mapping[str, Decimal]) -> None:
    for name, value in requests.items():
        used[name] = used.get(name, _ZERO) + value
    used["pods"] = used.get("pods", _ZERO) + 1


def _less(offered: Mapping[str, Decimal], used: Mapping[str, Decimal] | None) -> dict[str, Decimal]:
    free = dict(offered)
    for name, value in (used or {}).items():
        free[name] = free.get(name, _ZERO) - value
    return free
