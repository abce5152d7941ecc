"""The sim cluster's objects, as the API server holds them: pods and their templates, nodes,
PodDisruptionBudgets, workloads and DaemonSets, and the errors the API answers with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from shared.api.core import Taint, Toleration
from shared.api.pod import Affinity, LabelSelector, TopologySpreadConstraint
from shared.api.quantity import format_quantity
from shared.ports import cluster as ports
from shared.ports.cluster import (
    DAEMONSET,
)


class ClusterError(ports.ClusterError):
    pass


class NotFound(ClusterError, ports.NotFound):
    pass


class Gone(ClusterError, ports.Gone):
    pass


class AlreadyExists(ClusterError):
    """The API's 409 on a create: an object of that name is there."""


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
    spec: dict[str, Any] | None = field(default=None, repr=False)
    """The pod spec as a user sent it through the API (containers and all), rendered back as
    sent; None for the scenario's templates, rendered with one container `main`."""
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
            "ownerKind": self.owner_kind or None,
            "ownerName": self.owner_name or None,
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
    annotations: dict[str, str] = field(default_factory=dict)
    finalizers: list[str] = field(default_factory=list)
    deletion_timestamp: datetime | None = None
    """Set by a delete while finalizers hold the node; it goes when the last one is removed."""
    ready_since: datetime | None = None
    """When the Ready condition last changed (None: never Ready yet, since its creation)."""
    conditions: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    """Conditions beside Ready that a node monitoring agent posted (type: status, since), such as
    `KernelReady` False; one never posted is not there."""

    @property
    def ready_status(self) -> str:
        """The Ready condition: True; Unknown once a kubelet that was Ready stopped posting (the
        node lifecycle controller's); False before it was ever Ready."""
        if self.ready:
            return "True"
        return "Unknown" if self.ready_since is not None else "False"

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
            "readyStatus": self.ready_status,
            "readySince": (self.ready_since or self.created_at).isoformat(),
            "conditions": [
                {"type": kind, "status": status, "since": since.isoformat()}
                for kind, (status, since) in sorted(self.conditions.items())
            ],
            "deletionTimestamp": self.deletion_timestamp.isoformat() if self.deletion_timestamp else None,
            "finalizers": list(self.finalizers),
        }


@dataclass(slots=True)
class PodDisruptionBudget:
    namespace: str
    name: str
    selector: LabelSelector
    min_available: int | str | None = None
    max_unavailable: int | str | None = None
    created_at: datetime | None = field(default=None, compare=False)
    metadata: dict[str, Any] = field(default_factory=dict)
    """Its labels and annotations, as a client set them through the API."""

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
    created_at: datetime | None = field(default=None, compare=False)
    metadata: dict[str, Any] = field(default_factory=dict)
    """Its labels and annotations, as a client set them through the API."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_dict(self) -> dict[str, Any]:
        """The pod template nested as the API nests it (spec.template), in the sim's pod shape."""
        return {"namespace": self.namespace, "name": self.name, "template": self.template.to_dict()}


def queue_order(pod: Pod) -> tuple[int, bool, datetime, str]:
    """The kube-scheduler's queue: priority first, then age. At equal priority a DaemonSet pod goes
    first, as the system-node-critical class most clusters give DaemonSets (and Karpenter's docs
    advise) makes it go: a node Karpenter sized for its DaemonSets then runs them."""
    return (-pod.template.priority, pod.owner_kind != DAEMONSET, pod.created_at, pod.key)


def _quantities(values: Mapping[str, Decimal]) -> dict[str, str]:
    return {k: format_quantity(v, binary=k in ("memory", "ephemeral-storage")) for k, v in values.items()}
