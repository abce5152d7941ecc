"""The sim cluster: pods, nodes, PodDisruptionBudgets, workload controllers, DaemonSets, and a
kube-scheduler (`services.sim.kube_scheduler`) that binds pending pods to Ready nodes where they
fit.

It plays the Kubernetes API for the rest of nodewright, so it behaves like one: an eviction that
a PDB forbids is refused (the API's 429), a deleted node takes its pods with it and their
controllers create replacements, and every change is recorded with a resource version for
watchers (`changes_since`). Pure: time comes in as `now`.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from services.sim.kube_scheduler import KubeScheduler, takes_pods, tolerated
from services.sim.objects import (
    AlreadyExists,
    ClusterError,
    DaemonSet,
    EvictionRefused,
    Gone,
    Node,
    NotFound,
    Pod,
    PodDisruptionBudget,
    PodTemplate,
    Workload,
)
from services.sim.registry import Registry, api_time
from shared.api.core import Taint, TaintEffect
from shared.api.labels import HOSTNAME_LABEL
from shared.api.scenario import STATEFULSET
from shared.disruption.pdbs import scaled
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

HISTORY = 50_000
"""Changes kept for watchers: between this and twice this many (`SimCluster.history`)."""
PORT_KINDS = frozenset({POD, NODE, PDB, DAEMONSET, NODEPOOL, NODECLAIM})
"""The kinds the `Cluster` port lists and watches; the API's others (Events, Namespaces) have a
history of their own, on the same counter."""
_ZERO = Decimal(0)

__all__ = [
    "AlreadyExists",
    "ClusterError",
    "DaemonSet",
    "EvictionRefused",
    "Gone",
    "Node",
    "NotFound",
    "Pod",
    "PodDisruptionBudget",
    "PodTemplate",
    "SimCluster",
    "Workload",
]


class SimCluster(KubeScheduler, Registry):
    def __init__(self) -> None:
        self.pods: dict[str, Pod] = {}
        self.nodes: dict[str, Node] = {}
        self.pdbs: dict[str, PodDisruptionBudget] = {}
        self.workloads: dict[str, Workload] = {}
        self.daemonsets: dict[str, DaemonSet] = {}
        self.changes: list[WatchEvent] = []
        self.api_changes: list[WatchEvent] = []
        self.extras: dict[int, Mapping[str, Any]] = {}
        """What a change's object holds beyond the port's shape (a node's annotations, when a PDB
        or DaemonSet was made), by resource version, for the API to render it as it was."""
        self.pod_specs: dict[str, dict[str, Any]] = {}
        """The pod spec a user sent through the API, by pod uid (a pod's spec does not change)."""
        self.history = HISTORY
        """Changes kept per history before a watch from an older version gets 410 (a test cuts
        it short: NODEWRIGHT_SIM_WATCH_HISTORY)."""
        self.static_capacity = False
        """The `StaticCapacity` gate: a NodePool that sets `spec.replicas` is admitted only with it on."""
        self._trimmed = {id(self.changes): 0, id(self.api_changes): 0}  # the newest version dropped
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
        self.eviction_requests: dict[str, dict[str, int]] = {}
        """Every eviction request, by pod and by the API's answer: 200 evicted, 404 the pod was
        not there (gone already), 429 a PodDisruptionBudget refused, 500 more than one PDB. A
        drain that asks twice for a pod it evicted shows here, as no other count can."""
        self.forced_deletions = 0
        self.pdb_violations = 0
        """Pods removed while a PodDisruptionBudget over them allowed no disruption, by anything but a
        termination's grace period (its forcing is the one removal allowed to break a budget)."""
        self._init_registry()

    # --- watch ---------------------------------------------------------------------------------

    def record(
        self, kind: str, action: str, key: str, obj: dict[str, Any], extra: Mapping[str, Any] | None = None
    ) -> None:
        self.resource_version += 1
        history = self.changes if kind in PORT_KINDS else self.api_changes
        history.append(WatchEvent(self.resource_version, kind, action, key, obj))
        if extra:
            self.extras[self.resource_version] = extra
        if len(history) > 2 * self.history:  # a watch older than what is kept must list again (410 Gone)
            self._trimmed[id(history)] = history[self.history - 1].resource_version
            del history[: self.history]
            oldest = min(self._trimmed.values())
            for version in [v for v in self.extras if v <= oldest]:
                del self.extras[version]
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
            *((NODECLAIM, k, d) for k, d in self.nodeclaims.items()),
        ]
        objects = [WatchEvent(self._versions[(kind, key)], kind, ADDED, key, obj) for kind, key, obj in current]
        return Snapshot(self.resource_version, sorted(objects, key=lambda e: e.resource_version))

    def version_of(self, kind: str, key: str) -> int:
        """The resource version of an object's last change."""
        return self._versions.get((kind, key), 0)

    def changes_since(self, resource_version: int, limit: int | None = None, *, port: bool = True) -> list[WatchEvent]:
        """What changed after `resource_version`, in order, at most `limit` (a watch from that
        version): of the port's kinds, or (`port=False`) of the API's others. Gone when those
        changes are no longer kept, as the API answers 410."""
        history = self.changes if port else self.api_changes
        if resource_version < self._trimmed[id(history)]:
            raise Gone(f"too old resource version: {resource_version} ({self.resource_version})")
        start = bisect.bisect_right(history, resource_version, key=lambda e: e.resource_version)
        return history[start:] if limit is None else history[start : start + limit]

    # --- pods ----------------------------------------------------------------------------------

    def add_pod(self, pod: Pod) -> Pod:
        if pod.key in self.pods:
            raise AlreadyExists(f'pods "{pod.name}" already exists')
        if not pod.uid:
            self._uids += 1
            pod.uid = f"uid-{self._uids:08x}"
        if pod.template.spec is not None:
            self.pod_specs[pod.uid] = pod.template.spec
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
            if key in self._anti or (node is not None and takes_pods(node)):
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
        unhealthyPodEvictionPolicy, IfHealthyBudget). Each request is counted with its answer."""
        answers = self.eviction_requests.setdefault(key, {})
        try:
            pod = self._eviction(key)
        except NotFound:
            answers["404"] = answers.get("404", 0) + 1
            raise
        except EvictionRefused:
            answers["429"] = answers.get("429", 0) + 1
            raise
        except ClusterError:
            answers["500"] = answers.get("500", 0) + 1
            raise
        answers["200"] = answers.get("200", 0) + 1
        return pod

    def _eviction(self, key: str) -> Pod:
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
        return self.delete_pod(key)

    @property
    def evictions(self) -> int:
        """Pods evicted (requests answered 200)."""
        return sum(answers.get("200", 0) for answers in self.eviction_requests.values())

    def bound_to(self, node: str) -> list[Pod]:
        return list(self._on_node.get(node, {}).values())

    def pending(self) -> list[Pod]:
        return [p for p in self.pods.values() if p.node_name is None]

    # --- PodDisruptionBudgets ------------------------------------------------------------------

    def apply_pdb(self, pdb: PodDisruptionBudget) -> None:
        known = self.pdbs.get(pdb.key)
        if known is not None:
            pdb.created_at = known.created_at
        self.pdbs[pdb.key] = pdb
        self.record(PDB, MODIFIED if known else ADDED, pdb.key, pdb.to_dict(), _made(pdb.created_at, pdb.metadata))

    def delete_pdb(self, key: str) -> None:
        pdb = self.pdbs.pop(key, None)
        if pdb is None:
            raise NotFound(f"poddisruptionbudget {key} not found")
        self.record(PDB, DELETED, key, pdb.to_dict(), _made(pdb.created_at, pdb.metadata))

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

    def budget(self, pdb: PodDisruptionBudget) -> tuple[int, int]:
        """(currentHealthy, desiredHealthy), as a PDB's status has them."""
        return self._budget(pdb)

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
            raise AlreadyExists(f'nodes "{node.name}" already exists')
        self.nodes[node.name] = node
        self._retry_all = True
        self.record(NODE, ADDED, node.name, node.to_dict(), _node_extra(node))

    def node(self, name: str) -> Node:
        node = self.nodes.get(name)
        if node is None:
            raise NotFound(f"node {name} not found")
        return node

    def _node_changed(self, node: Node, *, helps: bool = True) -> None:
        """`helps`: the change may let a pending pod fit (Ready, a taint gone, a label); a taint
        added cannot."""
        self._retry_all = self._retry_all or helps
        self.record(NODE, MODIFIED, node.name, node.to_dict(), _node_extra(node))

    def set_ready(self, name: str, ready: bool = True, at: datetime | None = None) -> None:
        """`at`: when (the condition's lastTransitionTime); the node's creation when not known."""
        node = self.node(name)
        if node.ready != ready:
            node.ready = ready
            node.ready_since = at or node.created_at
            self._node_changed(node)

    def set_condition(self, name: str, kind: str, status: str, at: datetime) -> None:
        """A node monitoring agent's condition (`KernelReady`...): False when it finds a fault,
        True once it clears."""
        node = self.node(name)
        was = node.conditions.get(kind, ("True", node.created_at))[0]
        if was == status:
            return
        node.conditions[kind] = (status, at)  # an agent goes on posting it, True once it clears
        self._node_changed(node, helps=status == "True")

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
        self.record(NODE, DELETED, name, node.to_dict(), _node_extra(node))
        return gone

    def request_node_deletion(self, name: str, now: datetime) -> list[Pod]:
        """A delete of a node (`kubectl delete node`): marked while finalizers hold it (the
        termination controller's drain then runs), removed with its pods otherwise."""
        node = self.node(name)
        if not node.finalizers:
            return self.delete_node(name)
        if node.deletion_timestamp is None:
            node.deletion_timestamp = now
            self._node_changed(node, helps=False)
        return []

    def update_node(self, node: Node, *, helps: bool = True) -> None:
        """Record a node the API changed in place (labels, annotations, taints, finalizers); a
        marked node whose last finalizer went is removed."""
        if node.deletion_timestamp is not None and not node.finalizers:
            self.delete_node(node.name)
            return
        self._node_changed(node, helps=helps)

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
        if known is not None:
            daemonset.created_at = known.created_at
        self.daemonsets[daemonset.key] = daemonset
        action = MODIFIED if known is not None else ADDED
        self.record(DAEMONSET, action, daemonset.key, daemonset.to_dict(), _daemonset_extra(daemonset))

    def delete_daemonset(self, namespace: str, name: str) -> None:
        """The DaemonSet goes, then its pods (the API's default background cascading delete)."""
        daemonset = self.daemonsets.pop(f"{namespace}/{name}", None)
        if daemonset is None:
            raise NotFound(f"daemonset {namespace}/{name} not found")
        self.record(DAEMONSET, DELETED, daemonset.key, daemonset.to_dict(), _daemonset_extra(daemonset))
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
                if f"{ds.namespace}/{name}" in self.pods or not tolerated(ds.template.tolerations, node.taints):
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


def _scale_down_order(pods: list[Pod]) -> list[Pod]:
    """Which replicas go first when a workload shrinks: pending ones, then the newest, then the
    highest name (a StatefulSet's highest ordinal)."""
    out = sorted(pods, key=lambda p: p.name, reverse=True)
    out.sort(key=lambda p: (p.node_name is not None, -p.created_at.timestamp()))
    return out


def _node_extra(node: Node) -> dict[str, Any] | None:
    return {"annotations": dict(node.annotations)} if node.annotations else None


def _made(at: datetime | None, metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    """When a PDB or DaemonSet was made, and the labels and annotations a client gave it."""
    extra: dict[str, Any] = {"createdAt": api_time(at)} if at is not None else {}
    if metadata:
        extra["metadata"] = dict(metadata)
    return extra or None


def _daemonset_extra(daemonset: DaemonSet) -> dict[str, Any] | None:
    extra = _made(daemonset.created_at, daemonset.metadata) or {}
    if daemonset.template.spec is not None:
        extra["spec"] = daemonset.template.spec
    return extra or None
