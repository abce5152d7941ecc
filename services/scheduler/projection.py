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
from shared.api.pod import Affinity, TopologySpreadConstraint
from shared.api.quantity import parse
from shared.api.validation import validate_nodepool
from shared.events.envelope import RecordedEvent
from shared.scheduling.packing import NodeCapacity, PendingPod, PoolTemplate
from shared.scheduling.requirements import Requirements, ValueSet
from shared.scheduling.topology import PodTopology

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
class _Claim:
    nodepool: str
    pods: list[str]
    launched: bool = False
    registered: bool = False
    initialized: bool = False


@dataclass(slots=True)
class Projection:
    pools: dict[str, NodePool] = field(default_factory=dict)
    pending: dict[str, PendingPod] = field(default_factory=dict)
    bound: dict[str, tuple[str, Mapping[str, Decimal], Mapping[str, str]]] = field(default_factory=dict)
    requests: dict[str, Mapping[str, Decimal]] = field(default_factory=dict)  # what each known pod asked for
    labels: dict[str, Mapping[str, str]] = field(default_factory=dict)
    nodes: dict[str, _Node] = field(default_factory=dict)
    claims: dict[str, _Claim] = field(default_factory=dict)
    nominated: dict[str, str] = field(default_factory=dict)  # pod -> the claim in flight for it
    position: int = 0
    changed: bool = False  # a pod or a pool changed since the last plan

    def apply(self, events: Iterable[RecordedEvent]) -> None:
        for event in events:
            self.position = max(self.position, event.position)
            step = _STEPS.get(event.type)
            if step is not None:
                step(self, event.data, event.occurred_at)

    # --- what a pass needs -------------------------------------------------------------------------

    def plannable(self) -> list[PendingPod]:
        return [p for key, p in self.pending.items() if key not in self.nominated]

    def capacity(self) -> list[NodeCapacity]:
        """Nodes as capacity: allocatable less what their bound pods asked for. A node still
        starting counts without its pool's startup taints (they are about to go)."""
        used: dict[str, dict[str, Decimal]] = {}
        for node, requests, _ in self.bound.values():
            room = used.setdefault(node, {})
            for name, value in requests.items():
                room[name] = room.get(name, _ZERO) + value
            room["pods"] = room.get("pods", _ZERO) + 1
        out = []
        for node in self.nodes.values():
            startup = self._startup_taints(node.nodepool) if not node.initialized else set()
            taints = [t for t in node.taints if t.key not in startup]
            free = dict(node.allocatable)
            for name, value in used.get(node.name, {}).items():
                free[name] = free.get(name, _ZERO) - value
            out.append(NodeCapacity(node.name, node.labels, taints, free, node.initialized))
        return out

    def running(self) -> list[tuple[Mapping[str, str], str | None, str]]:
        """(labels, zone, node) of the bound pods, for the topology rules."""
        out = []
        for node_name, _, labels in self.bound.values():
            node = self.nodes.get(node_name)
            out.append((labels, node.labels.get(ZONE_LABEL) if node else None, node_name))
        return out

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


def pending_pod(data: Mapping[str, Any], at: datetime) -> PendingPod:
    """A PodPending fact as the scheduling pass takes it."""
    requirements = Requirements(ValueSet.exactly(k, v) for k, v in (data.get("node_selector") or {}).items())
    affinity = Affinity.model_validate(data["affinity"]) if data.get("affinity") else None
    selector = affinity.required_node_selector() if affinity else None
    if selector is not None and selector.node_selector_terms:  # upstream tries the first term first
        for r in selector.node_selector_terms[0].match_expressions or []:
            requirements.add(ValueSet.of(Requirement.model_validate(r.model_dump())))
    spread = tuple(TopologySpreadConstraint.model_validate(c) for c in data.get("topology_spread_constraints") or [])
    topology = PodTopology(
        labels=dict(data.get("labels") or {}),
        spread=spread,
        affinity=tuple(affinity.required_affinity()) if affinity else (),
        anti_affinity=tuple(affinity.required_anti_affinity()) if affinity else (),
    )
    return PendingPod(
        key=f"{data['namespace']}/{data['name']}",
        requests={k: parse(str(v)) for k, v in (data.get("requests") or {}).items()},
        requirements=requirements,
        tolerations=tuple(Toleration.model_validate(t) for t in data.get("tolerations") or []),
        created_at=at,
        uid=data.get("uid") or "",
        daemonset=data.get("owner_kind") == "DaemonSet",
        topology=topology,
    )


def _pod_key(data: Mapping[str, Any]) -> str:
    return f"{data['namespace']}/{data['name']}"


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
    p.requests[pod.key] = pod.requests
    p.labels[pod.key] = pod.topology.labels
    p.changed = True


def _bound(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    key = _pod_key(data)
    p.pending.pop(key, None)
    p.nominated.pop(key, None)
    requests = {k: parse(str(v)) for k, v in (data.get("requests") or {}).items()} or p.requests.get(key, {})
    p.bound[key] = (data["node"], requests, data.get("labels") or p.labels.get(key, {}))
    p.changed = True  # its node has less room now


def _pod_deleted(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    key = _pod_key(data)
    for table in (p.pending, p.nominated, p.bound, p.requests, p.labels):
        table.pop(key, None)
    p.changed = True


def _node_registered(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    p.nodes[data["node"]] = _Node(
        data["node"],
        dict(data.get("labels") or {}),
        [Taint.model_validate(t) for t in data.get("taints") or []],
        {k: parse(str(v)) for k, v in (data.get("allocatable") or {}).items()},
        data.get("nodeclaim"),
        data.get("nodepool") or (data.get("labels") or {}).get(NODEPOOL_LABEL),
    )
    p.changed = True


def _node_initialized(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    node = p.nodes.get(data["node"])
    if node is not None:
        node.initialized = True
        p.changed = True


def _node_deleted(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    p.nodes.pop(data["node"], None)
    for key in [k for k, (node, _, _) in p.bound.items() if node == data["node"]]:
        del p.bound[key]
    p.changed = True


def _claim_created(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    p.claims[data["nodeclaim"]] = _Claim(data["nodepool"], list(data.get("pods") or []))
    for key in data.get("pods") or []:
        p.nominated[key] = data["nodeclaim"]


def _claim_launched(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    claim = p.claims.get(data["nodeclaim"])
    if claim is not None:
        claim.launched = True


def _claim_ended(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    """A launch that failed, or a claim that went: its pods may be planned again."""
    claim = p.claims.pop(data["nodeclaim"], None)
    if claim is not None:
        for key in claim.pods:
            if p.nominated.get(key) == data["nodeclaim"]:
                del p.nominated[key]
        p.changed = True


def _claim_registered(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    claim = p.claims.get(data["nodeclaim"])
    if claim is not None:
        claim.registered = True


def _claim_initialized(p: Projection, data: Mapping[str, Any], at: datetime) -> None:
    """Its node can take pods: the pods it was made for that are still waiting are planned again
    (onto it, as existing capacity, when they fit)."""
    claim = p.claims.get(data["nodeclaim"])
    if claim is not None:
        claim.initialized = True
        for key in claim.pods:
            if p.nominated.get(key) == data["nodeclaim"]:
                del p.nominated[key]
        p.changed = True


_STEPS = {
    "NodePoolApplied": _pool_applied,
    "NodePoolRejected": _pool_gone,
    "NodePoolDeleted": _pool_gone,
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
    "NodeClaimRegistered": _claim_registered,
    "NodeClaimInitialized": _claim_initialized,
}
