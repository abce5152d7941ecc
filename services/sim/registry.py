"""What the sim's API server keeps besides pods, nodes and workloads: NodePools and NodeClaims
(karpenter.sh/v1 objects, kept as the API serves them), EC2NodeClasses (karpenter.k8s.aws/v1,
kept and served, read by nothing in the sim yet), core/v1 Events and Namespaces.

A mixin of `SimCluster`, whose one resource-version counter (`record`) every change here moves.
An object with finalizers is only marked when deleted (its deletion timestamp set) and goes,
with its DELETED change, once its last finalizer is removed, as the API server does. Pure: time
comes in as `now`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from services.sim.objects import AlreadyExists, NotFound
from shared.api.labels import NODEPOOL_LABEL, TERMINATION_FINALIZER
from shared.ports import cluster as ports
from shared.ports.cluster import ADDED, DELETED, MODIFIED, NODECLAIM, NODEOVERLAY, NODEPOOL

EVENT, NAMESPACE = "Event", "Namespace"
EC2NODECLASS = "EC2NodeClass"
AWS_API_VERSION = "karpenter.k8s.aws/v1"
EVENTS_KEPT = 10_000
"""Kubernetes Events kept, the oldest dropped first (the API server lets them expire)."""
INITIAL_NAMESPACES = ("default", "kube-system")
KARPENTER_API_VERSION = "karpenter.sh/v1"
OVERLAY_API_VERSION = "karpenter.sh/v1alpha1"
_UIDS = uuid.UUID("0b9c4f57-6d1f-4d5e-9a57-73696d617069")
_CLUSTER_SCOPED = frozenset({"Node", NODEPOOL, NODECLAIM, EC2NODECLASS, NODEOVERLAY, NAMESPACE})
_API_VERSIONS = {
    NODEPOOL: KARPENTER_API_VERSION,
    NODECLAIM: KARPENTER_API_VERSION,
    EC2NODECLASS: AWS_API_VERSION,
    NODEOVERLAY: OVERLAY_API_VERSION,
    "PodDisruptionBudget": "policy/v1",
}
CUSTOM_KINDS = (NODEPOOL, NODECLAIM, EC2NODECLASS, NODEOVERLAY)
"""The custom resources the sim's API keeps as API objects."""


def object_uid(*parts: object) -> str:
    """A uid named by what the object is (kind, key, creation), so every render agrees."""
    return str(uuid.uuid5(_UIDS, "/".join(str(p) for p in parts)))


def involved_api_version(kind: str) -> str:
    return _API_VERSIONS.get(kind, "apps/v1" if kind == "DaemonSet" else "v1")


class Registry:
    resource_version: int
    _versions: dict[tuple[str, str], int]
    record: Callable[..., None]  # SimCluster's: one counter, one history per kind group

    def _init_registry(self) -> None:
        self.nodepools: dict[str, dict[str, Any]] = {}
        self.nodeclaims: dict[str, dict[str, Any]] = {}
        self.ec2nodeclasses: dict[str, dict[str, Any]] = {}
        self.nodeoverlays: dict[str, dict[str, Any]] = {}
        self.events: dict[str, dict[str, Any]] = {}  # namespace/name -> core/v1 Event
        self._event_index: dict[tuple[str, str, str, str], str] = {}  # (kind, key, reason, message) -> Event
        self._event_serial = 0
        self.namespaces: dict[str, dict[str, Any]] = {}
        for name in INITIAL_NAMESPACES:  # there from the start, before any version was given
            self.namespaces[name] = _namespace(name, None)
            self._versions[(NAMESPACE, name)] = 0

    # --- karpenter.sh/v1 objects -----------------------------------------------------------------

    def custom(self, kind: str) -> dict[str, dict[str, Any]]:
        """The NodePools, the NodeClaims, the EC2NodeClasses or the NodeOverlays, by name."""
        return {
            NODEPOOL: self.nodepools,
            NODECLAIM: self.nodeclaims,
            EC2NODECLASS: self.ec2nodeclasses,
            NODEOVERLAY: self.nodeoverlays,
        }[kind]

    def create_custom(self, kind: str, document: dict[str, Any], now: datetime | None) -> dict[str, Any]:
        """A new custom resource (NodePool, NodeClaim, EC2NodeClass): given its uid, creation time
        and generation 1; the status a create carries is dropped, as the API server drops it for a
        status subresource."""
        name = str(document["metadata"]["name"])
        store = self.custom(kind)
        if name in store:
            raise AlreadyExists(f'{kind.lower()}s.karpenter.sh "{name}" already exists')
        metadata = {**document.get("metadata", {}), "generation": 1}
        metadata["uid"] = object_uid(kind, name, self.resource_version + 1)
        if now is not None:
            metadata["creationTimestamp"] = api_time(now)
        for gone in ("resourceVersion", "deletionTimestamp", "managedFields", "selfLink"):
            metadata.pop(gone, None)
        stored = {"apiVersion": _API_VERSIONS[kind], "kind": kind, **document, "metadata": metadata}
        stored.pop("status", None)
        store[name] = stored
        self.record(kind, ADDED, name, stored)
        return stored

    def update_custom(self, kind: str, document: dict[str, Any]) -> dict[str, Any]:
        """Replace a NodePool or NodeClaim (the API's update): the generation moves when the spec
        does; a marked object whose last finalizer went is removed."""
        name = str(document["metadata"]["name"])
        store = self.custom(kind)
        old = store.get(name)
        if old is None:
            raise NotFound(f'{kind.lower()}s.karpenter.sh "{name}" not found')
        if document == old:
            return old
        metadata = dict(document["metadata"])
        metadata.pop("resourceVersion", None)
        generation = int(old["metadata"].get("generation") or 1)
        metadata["generation"] = generation + 1 if document.get("spec") != old.get("spec") else generation
        stored = {**document, "metadata": metadata}
        if metadata.get("deletionTimestamp") and not metadata.get("finalizers"):
            del store[name]
            self.record(kind, DELETED, name, stored)
            return stored
        store[name] = stored
        self.record(kind, MODIFIED, name, stored)
        return stored

    def delete_custom(self, kind: str, name: str, now: datetime) -> dict[str, Any]:
        """A delete: marked while finalizers hold it, removed otherwise."""
        document = self.custom(kind).get(name)
        if document is None:
            raise NotFound(f'{kind.lower()}s.karpenter.sh "{name}" not found')
        metadata = document["metadata"]
        if metadata.get("finalizers"):
            if metadata.get("deletionTimestamp"):
                return document
            return self.update_custom(kind, {**document, "metadata": {**metadata, "deletionTimestamp": api_time(now)}})
        del self.custom(kind)[name]
        self.record(kind, DELETED, name, document)
        return document

    # --- NodePools ----------------------------------------------------------------------------------

    def apply_nodepool(self, document: dict[str, Any], now: datetime | None = None) -> None:
        """Stored as given, valid or not: the watcher validates it, as Karpenter does at runtime
        (the API's own admission is `services.sim.api`'s). A re-apply keeps the status."""
        name = str((document.get("metadata") or {}).get("name", ""))
        old = self.nodepools.get(name)
        if old is None:
            self.create_custom(
                NODEPOOL, {**document, "metadata": {**(document.get("metadata") or {}), "name": name}}, now
            )
            return
        metadata = {**old["metadata"], **(document.get("metadata") or {})}
        for kept in ("uid", "creationTimestamp", "generation"):
            if kept in old["metadata"]:
                metadata[kept] = old["metadata"][kept]
        new = {**document, "metadata": metadata}
        if "status" in old:
            new["status"] = old["status"]
        self.update_custom(NODEPOOL, new)

    def set_nodepool_condition(self, name: str, condition: dict[str, Any]) -> None:
        """Write one status condition (replacing the one of the same type), as a controller does."""
        document = self.nodepools.get(name)
        if document is None:
            raise NotFound(f"nodepool {name} not found")
        status = document.get("status") or {}
        conditions = status.get("conditions") or []
        old = next((c for c in conditions if c.get("type") == condition.get("type")), None)
        if old is not None and _but_time(old) == _but_time(condition):
            return
        kept = [c for c in conditions if c.get("type") != condition.get("type")]
        self.update_custom(NODEPOOL, {**document, "status": {**status, "conditions": [*kept, dict(condition)]}})

    def delete_nodepool(self, name: str) -> None:
        document = self.nodepools.pop(name, None)
        if document is None:
            raise NotFound(f"nodepool {name} not found")
        self.record(NODEPOOL, DELETED, name, document)

    # --- NodeClaims, for the NATS requests the services send until they create them --------------

    def nodeclaim_deleting(self, name: str) -> bool:
        claim = self.nodeclaims.get(name)
        return claim is not None and bool(claim["metadata"].get("deletionTimestamp"))

    def delete_nodeclaim(self, name: str, nodepool: str, now: datetime) -> None:
        """`kubectl delete nodeclaim`: marked for deletion (its finalizer holds it) until it goes;
        a claim the services never created as an object is made one first, with the finalizer
        Karpenter gives every claim, so the deletion has something to mark."""
        if name not in self.nodeclaims:
            metadata = {"name": name, "labels": {NODEPOOL_LABEL: nodepool}, "finalizers": [TERMINATION_FINALIZER]}
            self.create_custom(NODECLAIM, {"metadata": metadata, "spec": {}}, now)
        self.delete_custom(NODECLAIM, name, now)

    def annotate_nodeclaim(self, name: str, nodepool: str, annotations: dict[str, str], now: datetime) -> None:
        """Annotations on a claim being deleted; a claim whose deletion someone else asked for (a
        disruption) gets its deletion timestamp now, as the API server would have set it."""
        self.delete_nodeclaim(name, nodepool, now)
        document = self.nodeclaims.get(name)
        if document is None:
            return
        have = document["metadata"].get("annotations") or {}
        if any(have.get(k) != v for k, v in annotations.items()):
            metadata = {**document["metadata"], "annotations": {**have, **annotations}}
            self.update_custom(NODECLAIM, {**document, "metadata": metadata})

    def nodeclaim_gone(self, name: str) -> None:
        """Its instance terminated: a claim marked for deletion has nothing left to wait for (the
        NATS termination never removes the finalizer; one that does finds it gone, and is done)."""
        document = self.nodeclaims.get(name)
        if document is not None and document["metadata"].get("deletionTimestamp"):
            del self.nodeclaims[name]
            self.record(NODECLAIM, DELETED, name, document)

    # --- Events ----------------------------------------------------------------------------------

    def record_event(self, event: ports.KubeEvent, now: datetime) -> None:
        """Keep an Event; a repeat of the same object, reason and message raises its count and
        last time, as client-go's recorder does. The oldest go past EVENTS_KEPT."""
        same = (event.kind, event.key, event.reason, event.message)
        key = self._event_index.get(same)
        kept = self.events.get(key) if key is not None else None
        if kept is None:
            namespace, _, name = event.key.rpartition("/")
            self._event_serial += 1
            involved = {"apiVersion": involved_api_version(event.kind), "kind": event.kind, "name": name}
            if namespace:
                involved["namespace"] = namespace
            if event.uid:
                involved["uid"] = event.uid
            document = {
                "apiVersion": "v1",
                "kind": EVENT,
                "metadata": {"name": f"{name}.{self._event_serial:016x}", "namespace": namespace or "default"},
                "involvedObject": involved,
                "reason": event.reason,
                "message": event.message,
                "type": event.type,
                "count": 1,
                "firstTimestamp": api_time(now),
                "lastTimestamp": api_time(now),
                "source": {"component": "nodewright"},
            }
            self.put_event(document, now)
            return
        self.put_event({**kept, "count": int(kept.get("count") or 1) + 1, "lastTimestamp": api_time(now)}, now)

    def put_event(self, document: dict[str, Any], now: datetime, *, create: bool = False) -> dict[str, Any]:
        """Store an Event as sent (created or replaced); the newest is kept last."""
        metadata = dict(document["metadata"])
        key = f"{metadata.get('namespace') or 'default'}/{metadata['name']}"
        old = self.events.pop(key, None)
        if create and old is not None:
            self.events[key] = old
            raise AlreadyExists(f'events "{metadata["name"]}" already exists')
        metadata.pop("resourceVersion", None)
        metadata.setdefault("uid", object_uid(EVENT, key, self.resource_version + 1))
        metadata.setdefault("creationTimestamp", api_time(now))
        stored = {**document, "apiVersion": "v1", "kind": EVENT, "metadata": metadata}
        self.events[key] = stored
        self._event_index[_aggregation(stored)] = key
        self.record(EVENT, MODIFIED if old is not None else ADDED, key, stored)
        if len(self.events) > EVENTS_KEPT:
            self.delete_event(next(iter(self.events)))
        return stored

    def delete_event(self, key: str) -> None:
        document = self.events.pop(key, None)
        if document is None:
            raise NotFound(f"event {key} not found")
        self._event_index.pop(_aggregation(document), None)
        self.record(EVENT, DELETED, key, document)

    def events_about(self, kind: str | None = None, key: str | None = None) -> list[dict[str, Any]]:
        """The Events kept, oldest first, about one object or kind if given, as the port's
        KubeEvent fields with `count` and the first and last times."""
        out = []
        for document in self.events.values():
            involved = document.get("involvedObject") or {}
            involved_key = "/".join(p for p in (involved.get("namespace"), involved.get("name")) if p)
            if kind not in (None, involved.get("kind")) or key not in (None, involved_key):
                continue
            out.append(
                {
                    "kind": involved.get("kind"),
                    "key": involved_key,
                    "type": document.get("type"),
                    "reason": document.get("reason"),
                    "message": document.get("message"),
                    "uid": involved.get("uid") or "",
                    "count": document.get("count") or 1,
                    "firstTimestamp": document.get("firstTimestamp"),
                    "lastTimestamp": document.get("lastTimestamp"),
                }
            )
        return out

    # --- Namespaces --------------------------------------------------------------------------------

    def namespaces_made_at(self, now: datetime) -> None:
        """The creation time of the namespaces there from the start: the world's."""
        for document in self.namespaces.values():
            document["metadata"].setdefault("creationTimestamp", api_time(now))

    def create_namespace(self, name: str, labels: dict[str, str], now: datetime) -> dict[str, Any]:
        if name in self.namespaces:
            raise AlreadyExists(f'namespaces "{name}" already exists')
        document = _namespace(name, now)
        if labels:
            document["metadata"]["labels"] = {**document["metadata"]["labels"], **labels}
        self.namespaces[name] = document
        self.record(NAMESPACE, ADDED, name, document)
        return document


def cluster_scoped(kind: str) -> bool:
    return kind in _CLUSTER_SCOPED


def _namespace(name: str, now: datetime | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "uid": object_uid(NAMESPACE, name),
        "labels": {"kubernetes.io/metadata.name": name},
    }
    if now is not None:
        metadata["creationTimestamp"] = api_time(now)
    return {
        "apiVersion": "v1",
        "kind": NAMESPACE,
        "metadata": metadata,
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def _aggregation(document: Mapping[str, Any]) -> tuple[str, str, str, str]:
    involved = document.get("involvedObject") or {}
    key = "/".join(p for p in (involved.get("namespace"), involved.get("name")) if p)
    return str(involved.get("kind")), key, str(document.get("reason")), str(document.get("message"))


def _but_time(condition: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in condition.items() if k != "lastTransitionTime"}


def api_time(now: datetime) -> str:
    """The API's timestamps: RFC 3339 in UTC (what client-go's metav1.Time parses)."""
    return now.astimezone(UTC).isoformat()
