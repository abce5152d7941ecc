"""What the watcher tells the event store about the cluster: facts, from watch events and lists.

Pure. `Facts.observe(event)` turns one watch event into facts and remembers what it reported;
`Facts.resync(snapshot)` does the same for a whole list, plus the deletions the list implies
(objects reported live that are gone). What the watcher reported is rebuilt from its own facts
in the log (`Facts.remember`), so a restarted watcher re-lists and reports only what changed.

Every fact has an id derived from what it is about (a pod's uid, a node's provider id, the
resource version a NodePool, PDB or DaemonSet was applied at), so a fact reported twice, by a
watcher that died between appending and remembering, is dropped by the store's de-duplication
by event id.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.watcher.documents import desired_spec, disruption_fields, pending_fact, startup_taints
from shared.api.core import agent_condition
from shared.api.labels import NODEPOOL_LABEL
from shared.api.validation import validate_nodepool
from shared.events import contracts as c
from shared.events.decode import handled
from shared.events.envelope import NewEvent, only_event_id
from shared.policy.drift import DRIFT_HASH_VERSION, drift_hash
from shared.ports.cluster import DAEMONSET, DELETED, NODE, NODECLAIM, NODEPOOL, PDB, POD, Snapshot, WatchEvent
from shared.store.units import Unit, unit

_LIST_ORDER = {NODEPOOL: 0, DAEMONSET: 1, NODE: 1, PDB: 2, NODECLAIM: 2, POD: 3}
_IDS = uuid.UUID("6f0c6a5e-9a57-4a3e-8a0e-6e6f64657772")


PRODUCER = "watcher"


def fact_id(*parts: object) -> uuid.UUID:
    return uuid.uuid5(_IDS, "/".join(str(p) for p in parts))


@dataclass(frozen=True, slots=True)
class Fact:
    event: c.Event
    event_id: uuid.UUID


def fact_units(facts: Iterable[Fact], now: datetime) -> list[Unit]:
    """Each fact in a unit of its own, under its own id, in the order seen: an id the log already
    holds is dropped by the store (a fact reported again after a restart)."""
    return [
        unit(f.event.stream_id, None, [NewEvent.of(f.event, occurred_at=now, producer=PRODUCER, event_id=f.event_id)])
        for f in facts
    ]


@dataclass(slots=True)
class _Pod:
    uid: str
    pending: bool = False
    node: str | None = None


@dataclass(slots=True)
class _Node:
    provider_id: str
    nodeclaim: str | None = None
    initialized: bool = False
    ready: bool = True  # once initialized: what the log last said
    conditions: dict[str, str] = field(default_factory=dict)
    """Its other `*Ready` conditions not True, as the log last said (absent: True)."""


@dataclass(slots=True)
class _Pool:
    version: int  # the resource version it was applied (or rejected) at
    desired: dict[str, Any] | None  # the object without its status (None: not known after a restart)
    valid: bool
    startup_taints: frozenset[str] = frozenset()


@dataclass(slots=True)
class Facts:
    pods: dict[str, _Pod] = field(default_factory=dict)
    nodes: dict[str, _Node] = field(default_factory=dict)
    pools: dict[str, _Pool] = field(default_factory=dict)
    pdbs: dict[str, int] = field(default_factory=dict)  # namespace/name -> the resource version reported
    daemonsets: dict[str, int] = field(default_factory=dict)  # likewise
    deletions: set[str] = field(default_factory=set)  # NodeClaims whose deletion was reported

    # --- from the cluster ----------------------------------------------------------------------

    def observe(self, event: WatchEvent) -> list[Fact]:
        if event.kind == POD:
            return self._pod(event)
        if event.kind == NODE:
            return self._node(event)
        if event.kind == NODEPOOL:
            return self._nodepool(event)
        if event.kind == PDB:
            return self._pdb(event)
        if event.kind == DAEMONSET:
            return self._daemonset(event)
        if event.kind == NODECLAIM:
            return self._nodeclaim(event)
        return []

    def resync(self, snapshot: Snapshot) -> list[Fact]:
        """A full list: facts for what changed while the watch was down, deletions included."""
        out: list[Fact] = []
        present: dict[str, set[str]] = {
            POD: set(),
            NODE: set(),
            NODEPOOL: set(),
            PDB: set(),
            DAEMONSET: set(),
            NODECLAIM: set(),
        }
        # pools, then DaemonSets and nodes, then budgets, then pods: a fact never comes before what
        # it refers to, and a node's DaemonSet overhead is known before the pods that need room
        for event in sorted(snapshot.objects, key=lambda e: (_LIST_ORDER.get(e.kind, 9), e.resource_version)):
            present.setdefault(event.kind, set()).add(event.key)
            out.extend(self.observe(event))
        gone = [
            *((POD, k, {"uid": p.uid, "nodeName": p.node}) for k, p in self.pods.items() if k not in present[POD]),
            *((NODE, k, {"providerID": n.provider_id}) for k, n in self.nodes.items() if k not in present[NODE]),
            *((NODEPOOL, k, {}) for k in self.pools if k not in present[NODEPOOL]),
            *((PDB, k, {}) for k in self.pdbs if k not in present[PDB]),
            *((DAEMONSET, k, {}) for k in self.daemonsets if k not in present[DAEMONSET]),
            *((NODECLAIM, k, {}) for k in self.deletions if k not in present[NODECLAIM]),
        ]
        for kind, key, obj in gone:
            out.extend(self.observe(WatchEvent(snapshot.resource_version, kind, DELETED, key, obj)))
        return out

    def _pod(self, event: WatchEvent) -> list[Fact]:
        namespace, _, name = event.key.partition("/")
        known = self.pods.get(event.key)
        obj = event.object
        if event.action == DELETED:
            if known is None:
                return []
            del self.pods[event.key]
            deleted = c.PodDeleted(namespace=namespace, name=name, uid=known.uid, node=known.node)
            return [Fact(deleted, fact_id("PodDeleted", known.uid))]
        uid = obj.get("uid") or event.key
        if known is None or known.uid != uid:
            out = [] if known is None else self._pod(WatchEvent(event.resource_version, POD, DELETED, event.key, {}))
            known = self.pods[event.key] = _Pod(uid)
        else:
            out = []
        node = obj.get("nodeName")
        if node and known.node != node:
            known.node = node
            bound = c.PodBound(
                namespace=namespace,
                name=name,
                node=node,
                uid=uid,
                requests=obj.get("requests") or {},
                labels=obj.get("labels") or {},
                affinity=obj.get("affinity") or None,
                owner_kind=obj.get("ownerKind"),
                **disruption_fields(obj),
            )
            out.append(Fact(bound, fact_id("PodBound", uid)))
        elif not node and obj.get("unschedulable") and not known.pending:
            known.pending = True
            out.append(Fact(pending_fact(namespace, name, uid, obj), fact_id("PodPending", uid)))
        return out

    def _node(self, event: WatchEvent) -> list[Fact]:
        known = self.nodes.get(event.key)
        obj = event.object
        if event.action == DELETED:
            if known is None:
                return []
            del self.nodes[event.key]
            deleted = c.NodeDeleted(node=event.key, nodeclaim=known.nodeclaim)
            return [Fact(deleted, fact_id("NodeDeleted", known.provider_id))]
        provider_id = obj.get("providerID", "")
        labels = obj.get("labels") or {}
        nodepool = labels.get(NODEPOOL_LABEL)
        nodeclaim = event.key if nodepool else None  # the sim (like kwok) names a node after its claim
        out: list[Fact] = []
        if known is None or known.provider_id != provider_id:
            known = self.nodes[event.key] = _Node(provider_id, nodeclaim)
            registered = c.NodeRegistered(
                node=event.key,
                provider_id=provider_id,
                nodeclaim=nodeclaim,
                nodepool=nodepool,
                labels=labels,
                taints=obj.get("taints") or [],
                capacity=obj.get("capacity") or {},
                allocatable=obj.get("allocatable") or {},
            )
            out.append(Fact(registered, fact_id("NodeRegistered", provider_id)))
        if not known.initialized and obj.get("ready") and not self._startup_taints_left(nodepool, obj):
            known.initialized = True
            initialized = c.NodeInitialized(node=event.key, nodeclaim=nodeclaim, nodepool=nodepool)
            out.append(Fact(initialized, fact_id("NodeInitialized", provider_id)))
        elif (
            known.initialized
            and nodeclaim
            and nodepool
            and bool(obj.get("ready")) != known.ready
            and not obj.get("deletionTimestamp")  # going: its kubelet stops, and nothing waits on it
        ):
            known.ready = bool(obj.get("ready"))
            flipped: c.NodeClaimReady | c.NodeClaimNotReady
            if known.ready:
                flipped = c.NodeClaimReady(nodeclaim=nodeclaim, nodepool=nodepool, node=event.key)
            else:
                status = "Unknown" if obj.get("readyStatus") == "Unknown" else "False"
                since = obj.get("readySince")
                flipped = c.NodeClaimNotReady(
                    nodeclaim=nodeclaim, nodepool=nodepool, node=event.key, status=status, since=since
                )
            out.append(Fact(flipped, fact_id(flipped.TYPE, provider_id, event.resource_version)))
        if known.initialized and nodeclaim and nodepool and not obj.get("deletionTimestamp"):
            out.extend(self._conditions(known, event, nodeclaim, nodepool, provider_id))
        if obj.get("deletionTimestamp") and nodeclaim and nodepool:
            out.extend(self._deletion_requested(nodeclaim, nodepool))
        return out

    def _conditions(
        self, known: _Node, event: WatchEvent, nodeclaim: str, nodepool: str, provider_id: str
    ) -> list[Fact]:
        """Each change of a `*Ready` condition other than Ready (the node monitoring agent's: True
        when healthy), once the node is initialized: what node repair's policies name beside Ready.
        Other conditions (the kubelet's pressure ones) name no repair policy, and are not recorded."""
        out: list[Fact] = []
        for condition in event.object.get("conditions") or ():
            kind, status = condition.get("type"), condition.get("status")
            if not agent_condition(kind) or status not in ("True", "False", "Unknown"):
                continue
            if status == known.conditions.get(kind, "True"):
                continue
            if status == "True":
                known.conditions.pop(kind, None)
            else:
                known.conditions[kind] = status
            changed = c.NodeClaimConditionChanged(
                nodeclaim=nodeclaim,
                nodepool=nodepool,
                node=event.key,
                condition=kind,
                status=status,
                since=condition.get("since"),
            )
            out.append(Fact(changed, fact_id(changed.TYPE, provider_id, kind, event.resource_version)))
        return out

    def _startup_taints_left(self, nodepool: str | None, obj: Mapping[str, Any]) -> bool:
        pool = self.pools.get(nodepool or "")
        startup = pool.startup_taints if pool is not None else frozenset()
        return any(t.get("key") in startup for t in obj.get("taints") or [])

    def _nodepool(self, event: WatchEvent) -> list[Fact]:
        known = self.pools.get(event.key)
        if event.action == DELETED:
            if known is None:
                return []
            del self.pools[event.key]
            if not known.valid:
                return []  # never in force: nothing to take back
            deleted = c.NodePoolDeleted(nodepool=event.key)
            return [Fact(deleted, fact_id("NodePoolDeleted", event.key, known.version))]
        desired = desired_spec(event.object)
        if known is not None and known.desired == desired:
            return []  # a status update (such as our own condition), not a new spec
        result = validate_nodepool(event.object)
        if result.nodepool is None or result.name != event.key:
            errors = [{"path": e.path, "message": e.message} for e in result.errors] or [
                {"path": "metadata.name", "message": f"the object is named {result.name!r}, not {event.key!r}"}
            ]
            self.pools[event.key] = _Pool(event.resource_version, desired, False)
            rejected = c.NodePoolRejected(
                nodepool=event.key, errors=errors, nodepool_object=event.object, resource_version=event.resource_version
            )
            return [Fact(rejected, fact_id("NodePoolRejected", event.key, event.resource_version))]
        self.pools[event.key] = _Pool(event.resource_version, desired, True, startup_taints(event.object))
        applied = c.NodePoolApplied(
            nodepool=event.key,
            nodepool_object=event.object,
            drift_hash=drift_hash(result.nodepool),
            drift_hash_version=DRIFT_HASH_VERSION,
            resource_version=event.resource_version,
        )
        return [Fact(applied, fact_id("NodePoolApplied", event.key, event.resource_version))]

    def _pdb(self, event: WatchEvent) -> list[Fact]:
        def applied(namespace: str, name: str, obj: dict[str, Any]) -> c.NamespacedEvent:
            return c.PodDisruptionBudgetApplied(
                namespace=namespace,
                name=name,
                selector=obj.get("selector") or {},
                min_available=obj.get("minAvailable"),
                max_unavailable=obj.get("maxUnavailable"),
                resource_version=event.resource_version,
            )

        return _versioned(self.pdbs, event, applied, c.PodDisruptionBudgetDeleted)

    def _daemonset(self, event: WatchEvent) -> list[Fact]:
        def applied(namespace: str, name: str, obj: dict[str, Any]) -> c.NamespacedEvent:
            template = obj.get("template") or {}
            return c.DaemonSetApplied(
                namespace=namespace,
                name=name,
                requests=template.get("requests") or {},
                node_selector=template.get("nodeSelector") or {},
                affinity=template.get("affinity") or None,
                tolerations=template.get("tolerations") or [],
                resource_version=event.resource_version,
            )

        return _versioned(self.daemonsets, event, applied, c.DaemonSetDeleted)

    def _nodeclaim(self, event: WatchEvent) -> list[Fact]:
        """A deletion of a NodeClaim (its deletion timestamp set, by a user or a service): reported
        once; the claim's end is termination's to record."""
        if event.action == DELETED:
            self.deletions.discard(event.key)
            return []
        metadata = event.object.get("metadata") or {}
        if not metadata.get("deletionTimestamp"):
            return []
        return self._deletion_requested(event.key, str((metadata.get("labels") or {}).get(NODEPOOL_LABEL) or ""))

    def _deletion_requested(self, nodeclaim: str, nodepool: str) -> list[Fact]:
        """NodeClaimDeletionRequested, once per claim: a deleted Node starts the same graceful
        termination as its NodeClaim's deletion (Karpenter's node termination controller)."""
        if nodeclaim in self.deletions:
            return []
        self.deletions.add(nodeclaim)
        requested = c.NodeClaimDeletionRequested(nodeclaim=nodeclaim, nodepool=nodepool, reason="Manual")
        return [Fact(requested, only_event_id(requested.stream_id, requested.TYPE))]

    # --- from the log --------------------------------------------------------------------------

    def remember(self, events: Iterable[c.Event]) -> None:
        """Rebuild what was reported from the watcher's own facts, in log order."""
        for event in events:
            step = _REMEMBER.get(type(event))
            if step is not None:
                step(self, event)


def _pod_pending(f: Facts, e: c.PodPending) -> None:
    f.pods[e.key] = _Pod(e.uid or e.key, pending=True)


def _pod_bound(f: Facts, e: c.PodBound) -> None:
    f.pods.setdefault(e.key, _Pod(e.uid or e.key)).node = e.node


def _pod_deleted(f: Facts, e: c.PodDeleted) -> None:
    f.pods.pop(e.key, None)


def _node_registered(f: Facts, e: c.NodeRegistered) -> None:
    f.nodes[e.node] = _Node(e.provider_id, e.nodeclaim)


def _node_initialized(f: Facts, e: c.NodeInitialized) -> None:
    if e.node in f.nodes:
        f.nodes[e.node].initialized = True


def _node_readiness(f: Facts, e: c.NodeClaimReady | c.NodeClaimNotReady) -> None:
    if e.node in f.nodes:
        f.nodes[e.node].ready = isinstance(e, c.NodeClaimReady)


def _node_condition(f: Facts, e: c.NodeClaimConditionChanged) -> None:
    known = f.nodes.get(e.node)
    if known is None:
        return
    if e.status == "True":
        known.conditions.pop(e.condition, None)
    else:
        known.conditions[e.condition] = e.status


def _node_deleted(f: Facts, e: c.NodeDeleted) -> None:
    f.nodes.pop(e.node, None)


def _pool_recorded(f: Facts, e: c.NodePoolApplied | c.NodePoolRejected) -> None:
    document = e.nodepool_object
    desired = desired_spec(document) if document is not None else None
    valid = isinstance(e, c.NodePoolApplied)
    startup = startup_taints(document) if valid and document else frozenset()
    f.pools[e.nodepool] = _Pool(e.resource_version or 0, desired, valid, startup)


def _pool_deleted(f: Facts, e: c.NodePoolDeleted) -> None:
    f.pools.pop(e.nodepool, None)


def _pdb_applied(f: Facts, e: c.PodDisruptionBudgetApplied) -> None:
    f.pdbs[e.key] = e.resource_version or 0


def _pdb_deleted(f: Facts, e: c.PodDisruptionBudgetDeleted) -> None:
    f.pdbs.pop(e.key, None)


def _daemonset_applied(f: Facts, e: c.DaemonSetApplied) -> None:
    f.daemonsets[e.key] = e.resource_version or 0


def _daemonset_deleted(f: Facts, e: c.DaemonSetDeleted) -> None:
    f.daemonsets.pop(e.key, None)


def _deletion_requested(f: Facts, e: c.NodeClaimDeletionRequested) -> None:
    f.deletions.add(e.nodeclaim)


_REMEMBER: dict[type[c.Event], Callable[[Facts, Any], None]] = {
    c.PodPending: _pod_pending,
    c.PodBound: _pod_bound,
    c.PodDeleted: _pod_deleted,
    c.NodeRegistered: _node_registered,
    c.NodeInitialized: _node_initialized,
    c.NodeDeleted: _node_deleted,
    c.NodePoolApplied: _pool_recorded,
    c.NodePoolRejected: _pool_recorded,
    c.NodePoolDeleted: _pool_deleted,
    c.PodDisruptionBudgetApplied: _pdb_applied,
    c.PodDisruptionBudgetDeleted: _pdb_deleted,
    c.DaemonSetApplied: _daemonset_applied,
    c.DaemonSetDeleted: _daemonset_deleted,
    c.NodeClaimDeletionRequested: _deletion_requested,
    c.NodeClaimNotReady: _node_readiness,
    c.NodeClaimReady: _node_readiness,
    c.NodeClaimConditionChanged: _node_condition,
}
WATCHER_FACTS = tuple(sorted(handled(_REMEMBER)))
"""The facts the watcher reads back from the log when it starts: those it appends."""


def _versioned(
    reported: dict[str, int],
    event: WatchEvent,
    applied: Callable[[str, str, dict[str, Any]], c.NamespacedEvent],
    deleted: type[c.NamespacedEvent],
) -> list[Fact]:
    """A namespaced object reported once per resource version (`reported` keeps the last one);
    its deletion's id is named by the last version reported, so a re-list finds it again."""
    namespace, _, name = event.key.partition("/")
    known = reported.get(event.key)
    if event.action == DELETED:
        if known is None:
            return []
        del reported[event.key]
        return [Fact(deleted(namespace=namespace, name=name), fact_id(deleted.TYPE, event.key, known))]
    if known == event.resource_version:
        return []
    reported[event.key] = event.resource_version
    fact = applied(namespace, name, event.object)
    return [Fact(fact, fact_id(fact.TYPE, event.key, event.resource_version))]
