"""What the scheduler knows of the world, folded from the log: the NodePools in force, the pods
waiting, the nodes and what is bound to them, and the NodeClaims in flight with the pods they
were made for (those pods are not planned again while their claim is on its way).

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
from shared.api.nodepool import NodePool
from shared.api.pod import Affinity, PodAffinityTerm, TopologySpreadConstraint
from shared.api.quantity import parse
from shared.api.validation import validate_nodepool
from shared.events.envelope import RecordedEvent
from shared.scheduling.offerings import DaemonSetPods, node_daemon_overhead
from shared.scheduling.requirements import Requirements, ValueSet
from shared.scheduling.topology import PodTopology, Running
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


@dataclass(frozen=True, slots=True)
class Owed:
    """A lifecycle step the watcher's node facts imply and the log does not hold yet: the claim's
    NodeClaimRegistered or NodeClaimInitialized, caused by its node's fact."""

    type: str
    nodeclaim: str
    nodepool: str
    node: str
    occurred_at: datetime
    causation_id: str


@dataclass(slots=True)
class Projection:
    pools: dict[str, NodePool] = field(default_factory=dict)
    pending: dict[str, PendingPod] = field(default_factory=dict)
    bound: dict[str, tuple[str, Mapping[str, Decimal], Mapping[str, str]]] = field(default_factory=dict)
    requests: dict[str, Mapping[str, Decimal]] = field(default_factory=dict)  # what each known pod asked for
    labels: dict[str, Mapping[str, str]] = field(default_factory=dict)
    anti_affinity: dict[str, tuple[PodAffinityTerm, ...]] = field(default_factory=dict)  # running pods' own
    daemonsets: dict[str, DaemonSetPods] = field(default_factory=dict)
    daemon_pods: set[str] = field(default_factory=set)  # known pods a DaemonSet owns
    nodes: dict[str, _Node] = field(default_factory=dict)
    claims: dict[str, ClaimInFlight] = field(default_factory=dict)
    nominated: dict[str, str] = field(default_factory=dict)  # pod -> the claim in flight for it
    orphans: set[str] = field(default_factory=set)  # claims whose node was deleted: is their instance gone too?
    deleting: set[str] = field(default_factory=set)  # claims termination is carrying out: theirs alone
    owed: dict[tuple[str, str], Owed] = field(default_factory=dict)  # (claim, step type) -> the step
    position: int = 0
    changed: bool = False  # a pod or a pool changed since the last plan

    def apply(self, events: Iterable[RecordedEvent]) -> None:
        for event in events:
            self.position = max(self.position, event.position)
            step = _STEPS.get(event.type)
            if step is not None:
                step(self, event.data, event.occurred_at)
                if event.type in _OWING:
                    self._owe(event)

    def _owe(self, event: RecordedEvent) -> None:
        """The claim step a node fact implies, for a claim this projection holds; the step's own
        event settles it (`_claim_registered`, `_claim_initialized`), as does the claim's end."""
        data = event.data
        name = data.get("nodeclaim")
        claim = self.claims.get(name or "")
        if claim is None or name is None:
            return
        kind = _OWING[event.type]
        if (kind == "NodeClaimRegistered" and claim.recorded_registered) or (
            kind == "NodeClaimInitialized" and claim.recorded_initialized
        ):
            return
        self.owed[(name, kind)] = Owed(kind, name, claim.nodepool, data["node"], event.occurred_at, str(event.event_id))

    # --- what a pass needs -------------------------------------------------------------------------

    def plannable(self) -> list[PendingPod]:
        return [p for key, p in self.pending.items() if key not in self.nominated]

    def orphaned(self) -> list[str]:
        """Claims whose node was deleted: if their instance is gone as well (a spot reclaim, a
        deletion outside nodewright), nothing will ever terminate them but a garbage collection.
        A claim whose deletion was asked for is termination's: it is terminated once, by it."""
        return sorted(self.orphans - self.deleting)

    def unlaunched(self) -> list[str]:
        """Claims created and not launched yet: a pass's own, the replacements a disruption
        ordered, or one whose launch a previous leader began and never recorded. Not one being
        deleted: its instance would outlive it."""
        return [name for name, claim in self.claims.items() if not claim.launched and name not in self.deleting]

    def capacity(self) -> list[NodeCapacity]:
        """Nodes, and launched claims whose node has not registered yet, as capacity: what they
        offer less what their bound pods and the pending pods their claim was made for ask, and
        less the DaemonSet pods they will run that are not bound there yet (upstream keeps
        `max(overhead - DaemonSet pods on the node, 0)`). A node still starting counts without
        its pool's startup taints (they are about to go)."""
        used: dict[str, dict[str, Decimal]] = {}
        daemons: dict[str, dict[str, Decimal]] = {}  # per host, what its bound DaemonSet pods ask
        for key, (node, requests, _) in self.bound.items():
            _take(used.setdefault(node, {}), requests)
            if key in self.daemon_pods:
                _take(daemons.setdefault(node, {}), requests)
        hosts = self._hosts()
        for key, claim_name in self.nominated.items():
            pod = self.pending.get(key)
            if pod is not None and claim_name in self.claims:
                _take(used.setdefault(hosts.get(claim_name, claim_name), {}), pod.requests)
        out = []
        for node in self.nodes.values():
            startup = self._startup_taints(node.nodepool) if not node.initialized else set()
            taints = [t for t in node.taints if t.key not in startup]
            out.append(self._room(node.name, node.labels, taints, node.allocatable, used, daemons, node.initialized))
        for name, claim in self.claims.items():
            if claim.launched and not claim.registered and claim.allocatable:
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
        for key, (node_name, _, labels) in self.bound.items():
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

    def templates(self, remaining: Mapping[str, Mapping[str, Decimal] | None]) -> list[PoolTemplate]:
        out = []
        for name, pool in self.pools.items():
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


def _node_requirements(data: Mapping[str, Any], affinity: Affinity | None) -> Requirements:
    """A pod spec's nodeSelector and required node affinity as requirements."""
    requirements = Requirements(ValueSet.exactly(k, v) for k, v in (data.get("node_selector") or {}).items())
    selector = affinity.required_node_selector() if affinity else None
    if selector is not None and selector.node_selector_terms:  # upstream tries the first term first
        for r in selector.node_selector_terms[0].match_expressions or []:
            requirements.add(ValueSet.of(Requirement.model_validate(r.model_dump())))
    return requirements


def pending_pod(data: Mapping[str, Any], at: datetime) -> PendingPod:
    """A PodPending fact as the scheduling pass takes it."""
    affinity = _affinity(data)
    requirements = _node_requirements(data, affinity)
    spread = tuple(TopologySpreadConstraint.model_validate(c) for c in data.get("topology_spread_constraints") or [])
    topology = PodTopology(
        labels=dict(data.get("labels") or {}),
        spread=spread,
        affinity=tuple(affinity.required_affinity()) if affinity else (),
        anti_affinity=tuple(affinity.required_anti_affinity()) if affinity else (),
    )
    return PendingPod(
        key=_pod_key(data),
        requests=_quantities(data.get("requests")),
        requirements=requirements,
        tolerations=_tolerations(data),
        created_at=at,
        uid=data.get("uid") or "",
        daemonset=data.get("owner_kind") == "DaemonSet",
        topology=topology,
    )


def _pod_key(data: Mapping[str, Any]) -> str:
    return f"{data['namespace']}/{data['name']}"


def _affinity(data: Mapping[str, Any]) -> Affinity | None:
    return Affinity.model_validate(data["affinity"]) if data.get("affinity") else None


def _tolerations(data: Mapping[str, Any]) -> tuple[Toleration, ...]:
    return tuple(Toleration.model_validate(t) for t in data.get("tolerations") or [])


def _quantities(raw: Mapping[str, Any] | None) -> dict[str, Decimal]:
    """A fact's resource map (`"4"`, `"16Gi"`) as exact values."""
    return {k: parse(str(v)) for k, v in (raw or {}).items()}


def daemonset_pods(data: Mapping[str, Any]) -> DaemonSetPods:
    """A DaemonSetApplied fact as the overhead every node it runs on carries."""
    affinity = _affinity(data)
    return DaemonSetPods(
        _quantities(data.get("requests")),
        _tolerations(data),
        _node_requirements(data, affinity),
    )


def _daemonset_applied(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    p.daemonsets[_pod_key(data)] = daemonset_pods(data)
    p.changed = True


def _daemonset_deleted(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    p.daemonsets.pop(_pod_key(data), None)
    p.changed = True


def _pool_applied(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    result = validate_nodepool(data["nodepool_object"])
    if result.nodepool is not None:
        p.pools[data["nodepool"]] = result.nodepool
        p.changed = True


def _pool_gone(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    p.pools.pop(data["nodepool"], None)
    p.changed = True


def _pending(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    pod = pending_pod(data, at)
    p.pending[pod.key] = pod
    if pod.daemonset:
        p.daemon_pods.add(pod.key)
    p.requests[pod.key] = pod.requests
    p.labels[pod.key] = pod.topology.labels
    p.changed = True


def _bound(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    key = _pod_key(data)
    p.pending.pop(key, None)
    p.nominated.pop(key, None)
    requests = _quantities(data.get("requests")) or p.requests.get(key, {})
    p.bound[key] = (data["node"], requests, data.get("labels") or p.labels.get(key, {}))
    if data.get("owner_kind") == "DaemonSet":
        p.daemon_pods.add(key)
    affinity = _affinity(data)
    if affinity is not None and (terms := tuple(affinity.required_anti_affinity())):
        p.anti_affinity[key] = terms
    p.changed = True  # its node has less room now


def _pod_deleted(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    key = _pod_key(data)
    for table in (p.pending, p.nominated, p.bound, p.requests, p.labels, p.anti_affinity):
        table.pop(key, None)
    p.daemon_pods.discard(key)
    p.changed = True


def _node_registered(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    p.nodes[data["node"]] = _Node(
        data["node"],
        dict(data.get("labels") or {}),
        [Taint.model_validate(t) for t in data.get("taints") or []],
        _quantities(data.get("allocatable")),
        data.get("nodeclaim"),
        data.get("nodepool") or (data.get("labels") or {}).get(NODEPOOL_LABEL),
    )
    claim = p.claims.get(data.get("nodeclaim") or "")
    if claim is not None:
        claim.registered = True  # its room is the node's from now on, even after the node goes
    p.changed = True


def _node_initialized(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    node = p.nodes.get(data["node"])
    if node is not None:
        node.initialized = True
        p.changed = True


def _node_deleted(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    """The node is gone; its claim (still counted until it is terminated) offers nothing now."""
    node = p.nodes.pop(data["node"], None)
    name = data.get("nodeclaim") or (node.nodeclaim if node else None)
    if name in p.claims:
        p.orphans.add(name)
    for key in [k for k, (node, _, _) in p.bound.items() if node == data["node"]]:
        del p.bound[key]
        p.anti_affinity.pop(key, None)
    p.changed = True


def _claim_created(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    requirements = list(data.get("requirements") or [])
    p.claims[data["nodeclaim"]] = ClaimInFlight(
        data["nodepool"],
        list(data.get("pods") or []),
        requirements,
        dict(data.get("requests") or {}),
        zone=_pinned_zone(requirements),
    )
    for key in data.get("pods") or []:
        p.nominated[key] = data["nodeclaim"]


def _pinned_zone(requirements: Iterable[Mapping[str, Any]]) -> str | None:
    """The zone a claim is pinned to by its requirements, if exactly one."""
    for r in requirements:
        if r.get("key") == ZONE_LABEL and r.get("operator") == "In" and len(r.get("values") or []) == 1:
            return str(r["values"][0])
    return None


def _claim_launched(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    claim = p.claims.get(data["nodeclaim"])
    if claim is not None:
        claim.launched = True
        claim.zone = data.get("zone") or claim.zone
        claim.labels = dict(data.get("labels") or {})
        claim.allocatable = _quantities(data.get("allocatable"))
        p.changed = True  # room for pods that wait


def _claim_deleting(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    if data["nodeclaim"] in p.claims:
        p.deleting.add(data["nodeclaim"])


def _claim_ended(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    """A launch that failed, or a claim that went: its pods may be planned again."""
    claim = p.claims.pop(data["nodeclaim"], None)
    p.orphans.discard(data["nodeclaim"])
    p.deleting.discard(data["nodeclaim"])
    for kind in _OWING.values():
        p.owed.pop((data["nodeclaim"], kind), None)
    if claim is not None:
        for key in claim.pods:
            if p.nominated.get(key) == data["nodeclaim"]:
                del p.nominated[key]
        p.changed = True


def _claim_registered(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    claim = p.claims.get(data["nodeclaim"])
    p.owed.pop((data["nodeclaim"], "NodeClaimRegistered"), None)
    if claim is not None:
        claim.registered = claim.recorded_registered = True


def _claim_initialized(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    """Its node can take pods: the pods it was made for that are still waiting are planned again
    (onto it, as existing capacity, when they fit)."""
    claim = p.claims.get(data["nodeclaim"])
    p.owed.pop((data["nodeclaim"], "NodeClaimInitialized"), None)
    if claim is not None:
        claim.recorded_initialized = True
        for key in claim.pods:
            if p.nominated.get(key) == data["nodeclaim"]:
                del p.nominated[key]
        p.changed = True


_OWING = {"NodeRegistered": "NodeClaimRegistered", "NodeInitialized": "NodeClaimInitialized"}
"""The watcher's node facts, and the claim step each implies."""

_STEPS = {
    "NodePoolApplied": _pool_applied,
    "NodePoolRejected": _pool_gone,
    "NodePoolDeleted": _pool_gone,
    "DaemonSetApplied": _daemonset_applied,
    "DaemonSetDeleted": _daemonset_deleted,
    "PodPending": _pending,
    "PodBound": _bound,
    "PodDeleted": _pod_deleted,
    "NodeRegistered": _node_registered,
    "NodeInitialized": _node_initialized,
    "NodeDeleted": _node_deleted,
    "NodeClaimCreated": _claim_created,
    "NodeClaimLaunched": _claim_launched,
    "NodeClaimLaunchFailed": _claim_ended,
    "NodeClaimTerminated": _claim_ended,
    "NodeClaimDeletionRequested": _claim_deleting,
    "NodeClaimRegistered": _claim_registered,
    "NodeClaimInitialized": _claim_initialized,
}


def _take(used: dict[str, Decimal], requests: Mapping[str, Decimal]) -> None:
    for name, value in requests.items():
        used[name] = used.get(name, _ZERO) + value
    used["pods"] = used.get("pods", _ZERO) + 1


def _less(offered: Mapping[str, Decimal], used: Mapping[str, Decimal] | None) -> dict[str, Decimal]:
    free = dict(offered)
    for name, value in (used or {}).items():
        free[name] = free.get(name, _ZERO) - value
    return free
