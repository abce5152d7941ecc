"""The sim cluster: pods, nodes, PodDisruptionBudgets, workload controllers, DaemonSets, and a
kube-scheduler that binds pending pods to Ready nodes where they fit.

It plays the Kubernetes API for the rest of nodewright, so it behaves like one: an eviction that
a PDB forbids is refused (the API's 429), a deleted node takes its pods with it and their
controllers create replacements, and every change is recorded with a resource version for
watchers (`changes_since`). Pure: time comes in as `now`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from shared.api.core import Taint, TaintEffect, Toleration
from shared.api.labels import HOSTNAME_LABEL
from shared.api.pod import Affinity, LabelSelector, TopologySpreadConstraint, WhenUnsatisfiable
from shared.api.quantity import format_quantity
from shared.api.scenario import STATEFULSET
from shared.disruption.pdbs import scaled
from shared.ports import cluster as ports
from shared.ports.cluster import (
    ADDED,
    DAEMONSET,
    DELETED,
    MODIFIED,
    NODE,
    NODECLAIM,
    NODEPOOL,
    PDB,
    POD,
    Snapshot,
    WatchEvent,
)
from shared.scheduling.requirements import selector_allows

HISTORY = 50_000
"""Changes kept for watchers: between this and twice this many."""
EVENTS_KEPT = 10_000
"""Kubernetes Events kept, the oldest dropped first (the API server lets them expire)."""
UNSCHEDULABLE_BACKOFF = timedelta(seconds=10)
"""How often at most a watch hears that a pending pod's scheduling message changed."""
_ZERO = Decimal(0)


class ClusterError(ports.ClusterError):
    pass


class NotFound(ClusterError, ports.NotFound):
    pass


class Gone(ClusterError, ports.Gone):
    pass


class EvictionRefused(ClusterError, ports.EvictionRefused):
    """What the eviction API answers with 429 while a PodDisruptionBudget allows no disruption."""

    status = 429

    def __init__(self, pod: str, pdb: str) -> None:
        super().__init__(f"Cannot evict pod {pod} as it would violate the pod's disruption budget {pdb}.")
        self.pod = pod
        self.pdb = pdb


@dataclass(slots=True)
class PodTemplate:
    """What a workload stamps on each pod."""

    labels: dict[str, str]
    requests: dict[str, Decimal]
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity: Affinity | None = None
    spread: list[TopologySpreadConstraint] = field(default_factory=list)
    tolerations: list[Toleration] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    priority_class: str | None = None
    priority: int = 0
    grace_seconds: int = 30
    _shape: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The pod spec fields a template sets, in the API's shape: a pod's and a DaemonSet's.
        Made once per template (a template is never changed; a pod record copies it shallowly),
        since every pod of a workload is recorded with it at each status change."""
        if self._shape is None:
            self._shape = self._make_dict()
        return self._shape

    def _make_dict(self) -> dict[str, Any]:
        return {
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
            "requests": _quantities(self.requests),
            "nodeSelector": dict(self.node_selector),
            "affinity": self.affinity.to_dict() if self.affinity else None,
            "topologySpreadConstraints": [c.to_dict() for c in self.spread],
            "tolerations": [x.to_dict() for x in self.tolerations],
            "priorityClassName": self.priority_class,
            "priority": self.priority,
            "terminationGracePeriodSeconds": self.grace_seconds,
        }


@dataclass(slots=True)
class Pod:
    namespace: str
    name: str
    template: PodTemplate
    owner_kind: str
    owner_name: str
    created_at: datetime
    node_name: str | None = None
    started_at: datetime | None = None
    unschedulable: str | None = None  # the scheduler's message while it cannot place the pod
    reported_at: datetime | None = None  # when a watch last heard the message
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def labels(self) -> dict[str, str]:
        return self.template.labels

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            **self.template.to_dict(),
            "ownerKind": self.owner_kind,
            "ownerName": self.owner_name,
            "createdAt": self.created_at.isoformat(),
            "nodeName": self.node_name,
            "phase": "Running" if self.node_name else "Pending",
            "unschedulable": self.unschedulable,
        }


@dataclass(slots=True)
class Node:
    name: str
    provider_id: str
    labels: dict[str, str]
    taints: list[Taint]
    capacity: Mapping[str, Decimal]
    allocatable: Mapping[str, Decimal]
    created_at: datetime
    ready: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "providerID": self.provider_id,
            "labels": dict(self.labels),
            "taints": [t.to_dict() for t in self.taints],
            "capacity": _quantities(self.capacity),
            "allocatable": _quantities(self.allocatable),
            "createdAt": self.created_at.isoformat(),
            "ready": self.ready,
        }


@dataclass(slots=True)
class PodDisruptionBudget:
    namespace: str
    name: str
    selector: LabelSelector
    min_available: int | str | None = None
    max_unavailable: int | str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "selector": self.selector.to_dict(),
            "minAvailable": self.min_available,
            "maxUnavailable": self.max_unavailable,
        }


@dataclass(slots=True)
class Workload:
    """A Deployment or StatefulSet: keeps `replicas` pods alive."""

    namespace: str
    name: str
    kind: str
    replicas: int
    template: PodTemplate


@dataclass(slots=True)
class DaemonSet:
    namespace: str
    name: str
    template: PodTemplate

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_dict(self) -> dict[str, Any]:
        """The pod template nested as the API nests it (spec.template), in the sim's pod shape."""
        return {"namespace": self.namespace, "name": self.name, "template": self.template.to_dict()}


def _queue_order(pod: Pod) -> tuple[int, bool, datetime, str]:
    """The kube-scheduler's queue: priority first, then age. At equal priority a DaemonSet pod goes
    first, as the system-node-critical class most clusters give DaemonSets (and Karpenter's docs
    advise) makes it go: a node Karpenter sized for its DaemonSets then runs them."""
    return (-pod.template.priority, pod.owner_kind != DAEMONSET, pod.created_at, pod.key)


def _quantities(values: Mapping[str, Decimal]) -> dict[str, str]:
    return {k: format_quantity(v, binary=k in ("memory", "ephemeral-storage")) for k, v in values.items()}


class SimCluster:
    def __init__(self) -> None:
        self.pods: dict[str, Pod] = {}
        self.nodes: dict[str, Node] = {}
        self.pdbs: dict[str, PodDisruptionBudget] = {}
        self.workloads: dict[str, Workload] = {}
        self.daemonsets: dict[str, DaemonSet] = {}
        self.changes: list[WatchEvent] = []
        self.nodepools: dict[str, dict[str, Any]] = {}
        self._versions: dict[tuple[str, str], int] = {}
        self.resource_version = 0
        self._serial = 0
        self._uids = 0
        self._on_node: dict[str, dict[str, Pod]] = {}  # node -> its bound pods
        self._used: dict[str, dict[str, Decimal]] = {}  # node -> requests of its pods, and "pods"
        self._owned_by: dict[tuple[str, str, str], dict[str, Pod]] = {}  # (kind, namespace, name) -> pods
        self._anti: dict[str, Pod] = {}  # bound pods with required anti-affinity (checked both ways)
        # kube-scheduler's queues: new pending pods are tried at the next pass; every pending pod
        # when something changed that could let one fit, and at least every UNSCHEDULABLE_BACKOFF
        self._active: dict[str, Pod] = {}
        self._retry_all = True
        self._full_pass_at: datetime | None = None
        self.events: dict[tuple[str, str, str, str], dict[str, Any]] = {}  # aggregated, as the API server does
        self.nodeclaim_deletions: dict[str, dict[str, Any]] = {}  # NodeClaims a user deleted, until they go
        self.evictions = 0
        self.forced_deletions = 0
        self.pdb_violations = 0
        """Pods removed while a PodDisruptionBudget over them allowed no disruption, by anything but a
        termination's grace period (its forcing is the one removal allowed to break a budget)."""

    # --- watch ---------------------------------------------------------------------------------

    def record(self, kind: str, action: str, key: str, obj: dict[str, Any]) -> None:
        self.resource_version += 1
        self.changes.append(WatchEvent(self.resource_version, kind, action, key, obj))
        if len(self.changes) > 2 * HISTORY:
            del self.changes[:HISTORY]  # a watch older than what is kept must list again (410 Gone)
        if action == DELETED:
            self._versions.pop((kind, key), None)
        else:
            self._versions[(kind, key)] = self.resource_version

    def snapshot(self) -> Snapshot:
        """Every object now, each at the resource version of its last change (a list call)."""
        current: list[tuple[str, str, dict[str, Any]]] = [
            *((POD, k, p.to_dict()) for k, p in self.pods.items()),
            *((NODE, k, n.to_dict()) for k, n in self.nodes.items()),
            *((PDB, k, b.to_dict()) for k, b in self.pdbs.items()),
            *((DAEMONSET, k, d.to_dict()) for k, d in self.daemonsets.items()),
            *((NODEPOOL, k, d) for k, d in self.nodepools.items()),
            *((NODECLAIM, k, d) for k, d in self.nodeclaim_deletions.items()),
        ]
        objects = [WatchEvent(self._versions[(kind, key)], kind, ADDED, key, obj) for kind, key, obj in current]
        return Snapshot(self.resource_version, sorted(objects, key=lambda e: e.resource_version))

    def changes_since(self, resource_version: int, limit: int | None = None) -> list[WatchEvent]:
        """What changed after `resource_version`, in order, at most `limit` (a watch from that
        version); Gone when those changes are no longer kept, as the API answers 410."""
        if self.changes and resource_version < self.changes[0].resource_version - 1:
            raise Gone(f"resource version {resource_version} is too old; list again")
        start = max(resource_version - (self.changes[0].resource_version - 1), 0) if self.changes else 0
        out = self.changes[start:]
        return out if limit is None else out[:limit]

    # --- pods ----------------------------------------------------------------------------------

    def add_pod(self, pod: Pod) -> Pod:
        if pod.key in self.pods:
            raise ClusterError(f"pod {pod.key} already exists")
        if not pod.uid:
            self._uids += 1
            pod.uid = f"uid-{self._uids:08x}"
        self.pods[pod.key] = pod
        self._owned_by.setdefault((pod.owner_kind, pod.namespace, pod.owner_name), {})[pod.key] = pod
        if pod.node_name is not None:
            self._place(pod, pod.node_name)
        else:
            self._active[pod.key] = pod
        self.record(POD, ADDED, pod.key, pod.to_dict())
        return pod

    def delete_pod(self, key: str, *, forced: bool = False, by_controller: bool = False) -> Pod:
        """`forced`: a termination's grace period deletes it (a budget may break); `by_controller`:
        its workload scaled down (the user's own act). Any other removal that breaks a budget
        counts as a PDB violation."""
        pod = self.pods.get(key)
        if pod is None:
            raise NotFound(f"pod {key} not found")
        if forced:
            self.forced_deletions += 1
        elif not by_controller and self._breaks_budget(pod):
            self.pdb_violations += 1
        del self.pods[key]
        self._owned_by.get((pod.owner_kind, pod.namespace, pod.owner_name), {}).pop(key, None)
        self._active.pop(key, None)
        if pod.node_name is not None:
            node = self.nodes.get(pod.node_name)
            if key in self._anti or (node is not None and _open(node)):
                self._retry_all = True  # room, or a domain, others may now take
            self._unplace(pod)
        self.record(POD, DELETED, key, pod.to_dict())
        return pod

    def _place(self, pod: Pod, node: str) -> None:
        pod.node_name = node
        self._on_node.setdefault(node, {})[pod.key] = pod
        used = self._used.setdefault(node, {})
        for name, value in pod.template.requests.items():
            used[name] = used.get(name, _ZERO) + value
        used["pods"] = used.get("pods", _ZERO) + 1
        if pod.template.affinity is not None and pod.template.affinity.required_anti_affinity():
            self._anti[pod.key] = pod

    def _unplace(self, pod: Pod) -> None:
        node = pod.node_name or ""
        self._on_node.get(node, {}).pop(pod.key, None)
        used = self._used.get(node, {})
        for name, value in pod.template.requests.items():
            used[name] = used.get(name, _ZERO) - value
        used["pods"] = used.get("pods", _ZERO) - 1
        self._anti.pop(pod.key, None)

    def evict(self, key: str) -> Pod:
        """The eviction API. A pending pod goes without asking (no budget counts it); more than
        one PDB over a pod is an error, as in Kubernetes; a healthy pod needs a disruption its
        PDB allows; an unhealthy one only a PDB whose healthy pods already meet it (the default
        unhealthyPodEvictionPolicy, IfHealthyBudget)."""
        pod = self.pods.get(key)
        if pod is None:
            raise NotFound(f"pod {key} not found")
        if pod.node_name is not None:
            pdbs = self.pdbs_of(pod)
            if len(pdbs) > 1:
                raise ClusterError(f"pod {key} has more than one PodDisruptionBudget, which eviction does not support")
            for pdb in pdbs:
                healthy, desired = self._budget(pdb)
                if (healthy - desired <= 0) if self._healthy(pod) else (healthy < desired):
                    raise EvictionRefused(key, pdb.key)
        self.evictions += 1
        return self.delete_pod(key)

    def bound_to(self, node: str) -> list[Pod]:
        return list(self._on_node.get(node, {}).values())

    def pending(self) -> list[Pod]:
        return [p for p in self.pods.values() if p.node_name is None]

    # --- PodDisruptionBudgets ------------------------------------------------------------------

    def apply_pdb(self, pdb: PodDisruptionBudget) -> None:
        action = MODIFIED if pdb.key in self.pdbs else ADDED
        self.pdbs[pdb.key] = pdb
        self.record(PDB, action, pdb.key, pdb.to_dict())

    def delete_pdb(self, key: str) -> None:
        pdb = self.pdbs.pop(key, None)
        if pdb is not None:
            self.record(PDB, DELETED, key, pdb.to_dict())

    def pdbs_of(self, pod: Pod) -> list[PodDisruptionBudget]:
        return [b for b in self.pdbs.values() if b.namespace == pod.namespace and b.selector.matches(pod.labels)]

    def _breaks_budget(self, pod: Pod) -> bool:
        """Whether removing this pod now takes a budget over it below its minimum."""
        if not self._healthy(pod):
            return False
        return any(self.disruptions_allowed(b) == 0 for b in self.pdbs_of(pod))

    def disruptions_allowed(self, pdb: PodDisruptionBudget) -> int:
        """Healthy pods beyond what the budget must keep (status.disruptionsAllowed)."""
        healthy, desired = self._budget(pdb)
        return max(healthy - desired, 0)

    def _budget(self, pdb: PodDisruptionBudget) -> tuple[int, int]:
        """(currentHealthy, desiredHealthy) of a PDB."""
        matching = [p for p in self.pods.values() if p.namespace == pdb.namespace and pdb.selector.matches(p.labels)]
        expected = len(matching)
        healthy = sum(self._healthy(p) for p in matching)
        if pdb.min_available is not None:
            desired = scaled(pdb.min_available, expected)
        else:
            desired = expected - scaled(pdb.max_unavailable if pdb.max_unavailable is not None else 0, expected)
        return healthy, desired

    def _healthy(self, pod: Pod) -> bool:
        node = self.nodes.get(pod.node_name) if pod.node_name else None
        return node is not None and node.ready

    # --- nodes ---------------------------------------------------------------------------------

    def add_node(self, node: Node) -> None:
        if node.name in self.nodes:
            raise ClusterError(f"node {node.name} already exists")
        self.nodes[node.name] = node
        self._retry_all = True
        self.record(NODE, ADDED, node.name, node.to_dict())

    def node(self, name: str) -> Node:
        node = self.nodes.get(name)
        if node is None:
            raise NotFound(f"node {name} not found")
        return node

    def _node_changed(self, node: Node, *, helps: bool = True) -> None:
        """`helps`: the change may let a pending pod fit (Ready, a taint gone, a label); a taint
        added cannot."""
        self._retry_all = self._retry_all or helps
        self.record(NODE, MODIFIED, node.name, node.to_dict())

    def set_ready(self, name: str, ready: bool = True) -> None:
        node = self.node(name)
        if node.ready != ready:
            node.ready = ready
            self._node_changed(node)

    def taint(self, name: str, taint: Taint) -> None:
        node = self.node(name)
        if not any(t.key == taint.key and t.effect == taint.effect for t in node.taints):
            node.taints.append(taint)
            self._node_changed(node, helps=False)

    def label_node(self, name: str, labels: dict[str, str]) -> None:
        node = self.node(name)
        if any(node.labels.get(k) != v for k, v in labels.items()):
            node.labels.update(labels)
            self._node_changed(node)

    def untaint(self, name: str, key: str, effect: TaintEffect | None = None) -> None:
        node = self.node(name)
        kept = [t for t in node.taints if not (t.key == key and (effect is None or t.effect == effect))]
        if len(kept) != len(node.taints):
            node.taints = kept
            self._node_changed(node)

    def delete_node(self, name: str) -> list[Pod]:
        """The node goes, and its pods with it; their controllers will create replacements."""
        node = self.nodes.pop(name, None)
        if node is None:
            raise NotFound(f"node {name} not found")
        gone = [self.delete_pod(p.key) for p in self.bound_to(name)]
        self._on_node.pop(name, None)
        self._used.pop(name, None)
        self.record(NODE, DELETED, name, node.to_dict())
        return gone

    # --- NodeClaims a user deleted -------------------------------------------------------------------

    def delete_nodeclaim(self, name: str, nodepool: str, now: datetime) -> None:
        """`kubectl delete nodeclaim`: the claim is marked for deletion (its deletion timestamp
        set) until it goes; the watcher reports the request, termination carries it out."""
        if name in self.nodeclaim_deletions:
            return
        obj = {"name": name, "nodepool": nodepool, "deletionTimestamp": now.isoformat()}
        self.nodeclaim_deletions[name] = obj
        self.record(NODECLAIM, MODIFIED, name, obj)

    def annotate_nodeclaim(self, name: str, nodepool: str, annotations: dict[str, str], now: datetime) -> None:
        """Annotations on a claim being deleted; a claim whose deletion someone else asked for (a
        disruption) gets its deletion timestamp now, as the API server would have set it."""
        self.delete_nodeclaim(name, nodepool, now)
        obj = self.nodeclaim_deletions[name]
        if any(obj.get("annotations", {}).get(k) != v for k, v in annotations.items()):
            obj = {**obj, "annotations": {**obj.get("annotations", {}), **annotations}}
            self.nodeclaim_deletions[name] = obj
            self.record(NODECLAIM, MODIFIED, name, obj)

    def nodeclaim_gone(self, name: str) -> None:
        obj = self.nodeclaim_deletions.pop(name, None)
        if obj is not None:
            self.record(NODECLAIM, DELETED, name, obj)

    # --- NodePools, as the API server holds them ------------------------------------------------

    def apply_nodepool(self, document: dict[str, Any]) -> None:
        """Stored as given, valid or not: the watcher validates it, as Karpenter does at runtime."""
        name = str((document.get("metadata") or {}).get("name", ""))
        action = MODIFIED if name in self.nodepools else ADDED
        self.nodepools[name] = document
        self.record(NODEPOOL, action, name, document)

    def record_event(self, event: ports.KubeEvent, now: datetime) -> None:
        """Keep an Event; a repeat of the same object, reason and message raises its count and
        last time, as Kubernetes' event aggregation does. The oldest go past EVENTS_KEPT."""
        same = (event.kind, event.key, event.reason, event.message)
        kept = self.events.pop(same, None)
        if kept is None:
            kept = {**event.to_dict(), "count": 0, "firstTimestamp": now.isoformat()}
        kept["count"] += 1
        kept["lastTimestamp"] = now.isoformat()
        self.events[same] = kept
        if len(self.events) > EVENTS_KEPT:
            del self.events[next(iter(self.events))]

    def events_about(self, kind: str | None = None, key: str | None = None) -> list[dict[str, Any]]:
        """The Events kept, oldest first, about one object or kind if given."""
        return [e for e in self.events.values() if kind in (None, e["kind"]) and key in (None, e["key"])]

    def set_nodepool_condition(self, name: str, condition: dict[str, Any]) -> None:
        """Write one status condition (replacing the one of the same type), as a controller does."""
        document = self.nodepools.get(name)
        if document is None:
            raise NotFound(f"nodepool {name} not found")
        status = document.setdefault("status", {})
        kept = [c for c in status.get("conditions") or [] if c.get("type") != condition.get("type")]
        old = next((c for c in status.get("conditions") or [] if c.get("type") == condition.get("type")), None)
        if old is not None and {k: v for k, v in old.items() if k != "lastTransitionTime"} == {
            k: v for k, v in condition.items() if k != "lastTransitionTime"
        }:
            return
        status["conditions"] = [*kept, dict(condition)]
        self.record(NODEPOOL, MODIFIED, name, document)

    def delete_nodepool(self, name: str) -> None:
        document = self.nodepools.pop(name, None)
        if document is None:
            raise NotFound(f"nodepool {name} not found")
        self.record(NODEPOOL, DELETED, name, document)

    # --- controllers ---------------------------------------------------------------------------

    def apply_workload(self, workload: Workload) -> None:
        self.workloads[f"{workload.namespace}/{workload.name}"] = workload

    def delete_workload(self, namespace: str, name: str) -> None:
        workload = self.workloads.pop(f"{namespace}/{name}", None)
        if workload is None:
            raise NotFound(f"workload {namespace}/{name} not found")
        for pod in self._owned(workload.kind, namespace, name):
            self.delete_pod(pod.key, by_controller=True)

    def apply_daemonset(self, daemonset: DaemonSet) -> None:
        """Recorded for watchers (the scheduler counts its pods' requests on every new node); the
        same spec applied again changes nothing, as an unchanged object keeps its resource version."""
        known = self.daemonsets.get(daemonset.key)
        if known == daemonset:
            return
        self.daemonsets[daemonset.key] = daemonset
        self.record(DAEMONSET, MODIFIED if known is not None else ADDED, daemonset.key, daemonset.to_dict())

    def delete_daemonset(self, namespace: str, name: str) -> None:
        """The DaemonSet goes, then its pods (the API's default background cascading delete)."""
        daemonset = self.daemonsets.pop(f"{namespace}/{name}", None)
        if daemonset is None:
            raise NotFound(f"daemonset {namespace}/{name} not found")
        self.record(DAEMONSET, DELETED, daemonset.key, daemonset.to_dict())
        for pod in self._owned(DAEMONSET, namespace, name):
            self.delete_pod(pod.key, by_controller=True)

    def _owned(self, kind: str, namespace: str, name: str) -> list[Pod]:
        return list(self._owned_by.get((kind, namespace, name), {}).values())

    def reconcile(self, now: datetime) -> None:
        """The workload and DaemonSet controllers: replicas created or removed, one DaemonSet pod
        on each node whose taints it tolerates."""
        for workload in self.workloads.values():
            owned = self._owned_by.get((workload.kind, workload.namespace, workload.name), {})
            if len(owned) > workload.replicas:
                for pod in _scale_down_order(list(owned.values()))[: len(owned) - workload.replicas]:
                    self.delete_pod(pod.key, by_controller=True)
            elif len(owned) < workload.replicas:
                names = {p.name for p in owned.values()} if workload.kind == STATEFULSET else set()
                for _ in range(workload.replicas - len(owned)):
                    self.add_pod(self._replica(workload, names, now))
        for ds in self.daemonsets.values():
            for node in self.nodes.values():
                name = f"{ds.name}-{node.name}"
                if f"{ds.namespace}/{name}" in self.pods or not _tolerated(ds.template.tolerations, node.taints):
                    continue
                # pinned to its node, and bound by the scheduler when it fits there (as DaemonSets are)
                pinned = replace(ds.template, node_selector={**ds.template.node_selector, HOSTNAME_LABEL: node.name})
                self.add_pod(Pod(ds.namespace, name, pinned, DAEMONSET, ds.name, now))

    def _replica(self, workload: Workload, taken: set[str], now: datetime) -> Pod:
        if workload.kind == STATEFULSET:
            ordinal = next(i for i in range(len(taken) + 1) if f"{workload.name}-{i}" not in taken)
            name = f"{workload.name}-{ordinal}"
        else:
            self._serial += 1
            name = f"{workload.name}-{self._serial:05x}"
        taken.add(name)
        return Pod(workload.namespace, name, workload.template, workload.kind, workload.name, now)

    # --- kube-scheduler ------------------------------------------------------------------------

    def schedule(self, now: datetime) -> list[Pod]:
        """Bind pending pods, in queue order (`_queue_order`), each to the feasible Ready node with the most
        room left (kube-scheduler's LeastAllocated); mark the others Unschedulable with the
        scheduler's message. A pass tries the pods added since the last one, or every pending pod
        when something changed that could let one fit, and at least every UNSCHEDULABLE_BACKOFF.
        Returns the pods bound."""
        due = self._full_pass_at is None or now - self._full_pass_at >= UNSCHEDULABLE_BACKOFF
        if self._retry_all or due:
            queue, self._full_pass_at = self.pending(), now
        else:
            queue = [p for p in self._active.values() if p.node_name is None]
        self._retry_all = False
        self._active.clear()
        if not queue:
            return []
        bound = []
        nodes = sorted(self.nodes.values(), key=lambda n: n.name)
        hopeless: dict[tuple[str, int], str] = {}
        for pod in sorted(queue, key=_queue_order):
            reasons: dict[str, int] = {}
            feasible = []
            placement = self._placement(pod)
            # A pass only takes room and adds anti-affinity: a pod no node could take, with no
            # affinity or spread that others' binding could satisfy, stands for its workload's rest.
            alike = (pod.namespace, id(pod.template)) if not placement.required and not placement.spread else None
            if alike in hopeless:
                self._unschedulable(pod, hopeless[alike], now)  # type: ignore[index]
                continue
            for node in nodes:
                why = self.why_not(pod, node, placement)
                if why is None:
                    feasible.append(node)
                else:
                    reasons[why] = reasons.get(why, 0) + 1
            if feasible:
                node = max(feasible, key=lambda n: (self._room(n), n.name))
                self._place(pod, node.name)
                pod.started_at, pod.unschedulable = now, None
                self.record(POD, MODIFIED, pod.key, pod.to_dict())
                bound.append(pod)
                continue
            message = f"0/{len(self.nodes)} nodes are available: " + ", ".join(
                f"{count} {why}" for why, count in sorted(reasons.items())
            )
            if not self.nodes:
                message = "no nodes available to schedule pods"
            if alike is not None:
                hopeless[alike] = message
            self._unschedulable(pod, message, now)
        return bound

    def _unschedulable(self, pod: Pod, message: str, now: datetime) -> None:
        """The pod's message is kept current; a watch hears of a new one at most every
        `UNSCHEDULABLE_BACKOFF` (kube-scheduler backs unschedulable pods off rather than
        retrying each at every node that joins, which for thousands of pods floods every watch)."""
        if pod.unschedulable is None or (
            message != pod.unschedulable and (pod.reported_at is None or now - pod.reported_at >= UNSCHEDULABLE_BACKOFF)
        ):
            pod.unschedulable, pod.reported_at = message, now
            self.record(POD, MODIFIED, pod.key, pod.to_dict())
        pod.unschedulable = message

    def free(self, node: Node) -> dict[str, Decimal]:
        out = dict(node.allocatable)
        for name, value in self._used.get(node.name, {}).items():
            out[name] = out.get(name, _ZERO) - value
        return out

    def _room(self, node: Node) -> Decimal:
        free = self.free(node)
        shares = [free[r] / node.allocatable[r] for r in ("cpu", "memory") if node.allocatable.get(r)]
        return sum(shares, _ZERO) / len(shares) if shares else _ZERO

    def why_not(self, pod: Pod, node: Node, placement: _Placement | None = None) -> str | None:
        """Why the pod cannot run on the node now (kube-scheduler's words), or None if it can."""
        t = pod.template
        if not node.ready:
            return "node(s) were not ready"
        untolerated = next(
            (
                taint
                for taint in node.taints
                if taint.effect != TaintEffect.PREFER_NO_SCHEDULE
                and not (t.tolerations and any(x.tolerates(taint) for x in t.tolerations))
            ),
            None,
        )
        if untolerated is not None:
            return f"node(s) had untolerated taint {{{untolerated.key}: {untolerated.value or ''}}}"
        if not _affine(pod, node.labels):
            return "node(s) didn't match Pod's node affinity/selector"
        free = self.free(node)
        if free.get("pods", _ZERO) < 1:
            return "Too many pods"
        for name, value in sorted(t.requests.items()):
            if value > free.get(name, _ZERO):
                return f"Insufficient {name}"
        placement = placement or self._placement(pod)
        labels = node.labels
        if any(labels.get(key) == value for key, value in placement.blocked):
            return "node(s) didn't match pod anti-affinity rules"
        for key, values in placement.required:
            if labels.get(key) not in values:
                return "node(s) didn't match pod affinity rules"
        for key, counts, self_match, max_skew in placement.spread:
            here = labels.get(key)
            if here is None or here not in counts:
                return "node(s) didn't match pod topology spread constraints (missing required label)"
            if counts[here] + self_match - min(counts.values()) > max_skew:
                return "node(s) didn't match pod topology spread constraints"
        return None

    def _placement(self, pod: Pod) -> _Placement:
        """What the pod's (and the placed pods') inter-pod rules say, once per pod and pass:
        topology domains it must avoid or join, and its spread constraints' counts."""
        affinity = pod.template.affinity
        if affinity is None and not pod.template.spread and not self._anti:
            return _FREE
        blocked: set[tuple[str, str]] = set()
        for term in affinity.required_anti_affinity() if affinity else []:
            for other in self._placed_in(pod.namespace):
                if term.selects(other.labels):
                    _add_domain(blocked, term.topology_key, self.nodes.get(other.node_name or ""))
        for other in self._anti.values():  # symmetric: placed pods' anti-affinity keeps this one away
            if other.namespace != pod.namespace:
                continue
            for term in other.template.affinity.required_anti_affinity() if other.template.affinity else []:
                if term.selects(pod.labels):
                    _add_domain(blocked, term.topology_key, self.nodes.get(other.node_name or ""))
        required: list[tuple[str, set[str | None]]] = []
        for term in affinity.required_affinity() if affinity else []:
            domains: set[str | None] = set()
            matched = False
            for other in self._placed_in(pod.namespace):
                if term.selects(other.labels):
                    matched = True
                    node = self.nodes.get(other.node_name or "")
                    if node is not None and term.topology_key in node.labels:
                        domains.add(node.labels[term.topology_key])
            if not matched and term.selects(pod.labels):
                continue  # the first pod of a group that wants itself: Kubernetes lets it go anywhere
            required.append((term.topology_key, domains))
        spread = []
        for c in pod.template.spread:
            if c.when_unsatisfiable != WhenUnsatisfiable.DO_NOT_SCHEDULE:
                continue
            eligible = {
                n.name: n.labels[c.topology_key]
                for n in self.nodes.values()
                if c.topology_key in n.labels and _affine(pod, n.labels)
            }
            counts = dict.fromkeys(eligible.values(), 0)
            selector = c.label_selector
            if selector is not None:  # a constraint without a selector matches no pod
                for other in self._placed_in(pod.namespace):
                    domain = eligible.get(other.node_name or "")
                    if domain is not None and selector.matches(other.labels):
                        counts[domain] += 1
            self_match = 1 if selector is not None and selector.matches(pod.labels) else 0
            spread.append((c.topology_key, counts, self_match, c.max_skew))
        return _Placement(frozenset(blocked), required, spread)

    def _placed_in(self, namespace: str) -> Iterable[Pod]:
        for pods in self._on_node.values():
            for pod in pods.values():
                if pod.namespace == namespace:
                    yield pod


@dataclass(frozen=True, slots=True)
class _Placement:
    blocked: frozenset[tuple[str, str]]  # (topology key, value) domains the pod must avoid
    required: list[tuple[str, set[str | None]]]  # (topology key, domains) it must join, per term
    spread: list[tuple[str, dict[str, int], int, int]]  # (key, matching pods per domain, self, maxSkew)


_FREE = _Placement(frozenset(), [], [])
"""A pod that neither has inter-pod rules nor meets any."""


def _open(node: Node) -> bool:
    """Ready and without a taint that keeps pods off: room freed there is room a pod may take."""
    return node.ready and not any(t.effect != TaintEffect.PREFER_NO_SCHEDULE for t in node.taints)


def _add_domain(into: set[tuple[str, str]], key: str, node: Node | None) -> None:
    if node is not None and key in node.labels:
        into.add((key, node.labels[key]))


def _affine(pod: Pod, labels: Mapping[str, str]) -> bool:
    t = pod.template
    if any(labels.get(k) != v for k, v in t.node_selector.items()):
        return False
    return selector_allows(t.affinity.required_node_selector() if t.affinity else None, labels)


def _tolerated(tolerations: Iterable[Toleration], taints: Iterable[Taint]) -> bool:
    """Every NoSchedule/NoExecute taint is tolerated by some toleration."""
    tolerations = list(tolerations)
    return all(
        taint.effect == TaintEffect.PREFER_NO_SCHEDULE or any(t.tolerates(taint) for t in tolerations)
        for taint in taints
    )


def _scale_down_order(pods: list[Pod]) -> list[Pod]:
    """Which replicas go first when a workload shrinks: pending ones, then the newest, then the
    highest name (a StatefulSet's highest ordinal)."""
    out = sorted(pods, key=lambda p: p.name, reverse=True)
    out.sort(key=lambda p: (p.node_name is not None, -p.created_at.timestamp()))
    return out
