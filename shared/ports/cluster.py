"""The `Cluster` port: what nodewright reads from and does to Kubernetes.

Informer-shaped: `snapshot()` lists every object with the resource version it was last changed
at, and `watch(after)` streams the changes after a resource version, in order. Objects travel
as JSON-ready dicts: NodePools and NodeClaims as the API serves them; pods, nodes, PDBs and
DaemonSets flattened to the fields nodewright reads (`docs/cluster-api.md` names them). The
Kubernetes API adapter (`shared.adapters.kube`) is the one every service uses; the sim serves
that API. The in-process double over the sim's cluster is for tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from shared.api.core import Taint, TaintEffect

POD, NODE, PDB, NODEPOOL, DAEMONSET = "Pod", "Node", "PodDisruptionBudget", "NodePool", "DaemonSet"
NODECLAIM = "NodeClaim"
EC2NODECLASS = "EC2NodeClass"
NODEOVERLAY = "NodeOverlay"
ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    resource_version: int
    kind: str  # Pod, Node, PodDisruptionBudget, NodePool, DaemonSet, NodeClaim, EC2NodeClass
    action: str  # ADDED, MODIFIED, DELETED
    key: str  # namespace/name, or name for cluster-scoped objects
    object: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "resourceVersion": self.resource_version,
            "kind": self.kind,
            "action": self.action,
            "key": self.key,
            "object": self.object,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> WatchEvent:
        return cls(int(raw["resourceVersion"]), raw["kind"], raw["action"], raw["key"], raw["object"])


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every object as of `resource_version`, each as an ADDED event at its own last version."""

    resource_version: int
    objects: list[WatchEvent]


@dataclass(frozen=True, slots=True)
class KubeEvent:
    """A Kubernetes Event (core/v1) about one object, as `kubectl describe` shows it: Karpenter's
    reasons (`FailedScheduling`, `Nominated`, `DisruptionBlocked`...) and messages."""

    kind: str  # the involved object's kind
    key: str  # namespace/name, or name for cluster-scoped objects
    type: str  # Normal or Warning
    reason: str
    message: str
    uid: str = ""  # the involved object's uid, when known

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> KubeEvent:
        return cls(raw["kind"], raw["key"], raw["type"], raw["reason"], raw["message"], raw.get("uid") or "")


NORMAL, WARNING = "Normal", "Warning"


class ClusterError(Exception):
    pass


class NotFound(ClusterError):
    pass


class Gone(ClusterError):
    """The API's 410: a watch from a resource version older than the kept history; list again."""


class EvictionRefused(ClusterError):
    """The API's 429: a PodDisruptionBudget allows no disruption now."""


class Cluster(Protocol):
    async def snapshot(self) -> Snapshot: ...

    def watch(self, after: int) -> AsyncIterator[WatchEvent]: ...

    async def taint(self, node: str, taint: Taint) -> None: ...

    async def untaint(self, node: str, key: str, effect: TaintEffect | None = None) -> None: ...

    async def label_node(self, node: str, labels: dict[str, str]) -> None: ...

    async def annotate_nodeclaim(self, nodeclaim: str, nodepool: str, annotations: dict[str, str]) -> None:
        """Set annotations on a NodeClaim being deleted (its deletion timestamp set, if not yet)."""
        ...

    async def evict(self, pod: str) -> None: ...

    async def delete_pod(self, pod: str, *, grace_seconds: int | None = None) -> None:
        """Delete the pod, bypassing PodDisruptionBudgets; `grace_seconds`: the grace period a
        termination grants at its deadline (the deletion is then the grace period's forcing)."""
        ...

    async def delete_node(self, node: str) -> None: ...

    async def set_nodepool_condition(self, nodepool: str, condition: dict[str, Any]) -> None: ...

    async def patch_nodepool_status(self, nodepool: str, status: dict[str, Any]) -> None:
        """Merge `status` (resources, nodes, conditions as a whole list) into the NodePool's status
        subresource."""
        ...

    async def patch_nodeclass_status(self, nodeclass: str, status: dict[str, Any]) -> None:
        """Merge `status` (subnets, securityGroups, amis, instanceProfile, conditions) into the
        EC2NodeClass's status subresource; a null drops a field."""
        ...

    async def patch_nodeoverlay_status(self, nodeoverlay: str, status: dict[str, Any]) -> None:
        """Merge `status` (its conditions, as a whole list) into the NodeOverlay's status subresource."""
        ...

    async def get_nodeclass(self, nodeclass: str) -> dict[str, Any] | None:
        """The EC2NodeClass with its status, or None when there is none (the AWS provider reads the
        class a launch names)."""
        ...

    async def record_event(self, event: KubeEvent) -> None: ...

    async def create_nodeclaim(self, nodeclaim: dict[str, Any]) -> None:
        """Create the NodeClaim object (karpenter.sh/v1, with its finalizer); one of that name
        already there is left as it is, so a step taken again changes nothing."""
        ...

    async def patch_nodeclaim_status(self, nodeclaim: str, status: dict[str, Any]) -> None:
        """Merge `status` into the NodeClaim's status subresource (conditions as a whole list)."""
        ...

    async def delete_nodeclaim(self, nodeclaim: str) -> None:
        """Ask for its deletion: its finalizer keeps it, deletion timestamp set, until removed."""
        ...

    async def add_finalizer(self, kind: str, name: str, finalizer: str) -> None:
        """On a Node, a NodeClaim or an EC2NodeClass, under optimistic locking (a conflict is
        read again); not on one being deleted, as the API takes no new finalizer there."""
        ...

    async def remove_finalizer(self, kind: str, name: str, finalizer: str) -> None:
        """The object goes once its last finalizer does, if its deletion was asked for; absent: done."""
        ...
